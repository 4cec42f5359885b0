"""A section of BENCHMARKS.md that one benchmark script owns, between its BEGIN and END markers:
replaced in place when the file has it, appended otherwise; the rest of the file is kept (bench.py
rewrites the main part, the other scripts of `make bench` their own sections after it)."""
import os


def write_section(path, begin, end, section):
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as handle:
        handle.write(text)
