"""A section of BENCHMARKS.md that one benchmark script owns, between its BEGIN and END markers:
replaced in place when the file has it, appended otherwise; the rest of the file is kept (bench.py
rewrites the main part, the other scripts of `make bench` their own sections after it)."""
import os
import re


def write_section(path, begin, end, section):
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as handle:
        handle.write(text)


def write_main_part(path, main):
    """bench.py's part: the file's text up to the first script's section (its "<!-- name: begin"
    marker) becomes `main`; the sections from there on stay as they are."""
    kept = ""
    if os.path.exists(path):
        previous = open(path).read()
        marker = re.search(r"^<!-- [\w-]+: begin", previous, re.MULTILINE)
        if marker:
            kept = "\n" + previous[marker.start():].rstrip("\n") + "\n"
    with open(path, "w") as handle:
        handle.write(main.rstrip("\n") + "\n" + kept)
