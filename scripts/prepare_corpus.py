#!/usr/bin/env python3
"""Build the demo text corpus from the Python documentation shipped by Debian.

Source: the reStructuredText sources of the CPython documentation, as shipped
in the Debian package ``python3.X-doc`` under
``/usr/share/doc/python3.X/html/_sources/``.  Python's documentation is
licensed under the PSF License Agreement (code examples in it are dual
licensed under PSF and Zero-Clause BSD), which permits redistribution of the
text and of derivative works provided the PSF copyright notice and licence
are kept.  See demo/corpus/SOURCE.md and demo/corpus/LICENSE-PSF.txt.

The script:
  1. finds the ``_sources`` tree (installed package, or ``--sources DIR``,
     or a ``.deb`` given with ``--deb``, or downloads the .deb with
     ``apt-get download`` into a temporary folder -- no root needed for that,
     only a working apt index);
  2. converts the prose of selected sections (tutorial, faq, howto,
     reference, library, ...) to plain text: directives, code blocks,
     doctest sessions, tables and markup are removed, paragraphs reflowed;
  3. writes ``demo/corpus/python_docs.txt`` (documents separated by a line
     holding ``<|endoftext|>``), ``SOURCE.md`` and ``LICENSE-PSF.txt``.

The output is deterministic for a given package version.

Usage:  python scripts/prepare_corpus.py [--out demo/corpus] [--max-mb 3]
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_SEP = "<|endoftext|>"

# Sections in priority order.  Files are added in this order (and in name
# order inside a section) until the next one would take the total over --max-mb.
SECTIONS = [
    "tutorial", "faq", "howto", "reference", "glossary.rst.txt", "using",
    "extending", "installing", "distributing", "library",
]

# Directives whose indented body is prose we keep.
KEEP_BODY = {
    "note", "warning", "seealso", "tip", "important", "caution", "attention",
    "hint", "admonition", "impl-detail", "deprecated", "versionadded",
    "versionchanged", "deprecated-removed", "function", "method", "class",
    "attribute", "data", "exception", "decorator", "decoratormethod",
    "classmethod", "staticmethod", "describe", "abstractmethod",
    "coroutinefunction", "coroutinemethod", "module", "envvar", "cmdoption",
    "option", "opcode", "pdbcommand", "index", "glossary", "rubric",
    "centered", "topic", "sidebar", "availability", "audit-event",
}
# Of those, the ones whose argument (the text after ``::``) is kept as a line.
KEEP_ARG = {
    "function", "method", "class", "attribute", "data", "exception",
    "decorator", "classmethod", "staticmethod", "describe", "coroutinefunction",
    "coroutinemethod", "abstractmethod", "rubric", "topic", "admonition",
}

ROLE_RE = re.compile(r":[A-Za-z][\w.+-]*(?::[\w.+-]+)*:`([^`]+)`")
INLINE_LITERAL_RE = re.compile(r"``(.+?)``")
LINK_RE = re.compile(r"`([^`<]+?)\s*<[^>]+>`__?")
REF_RE = re.compile(r"`([^`]+)`_{1,2}")
INTERP_RE = re.compile(r"`([^`]+)`")
STRONG_RE = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
EMPH_RE = re.compile(r"(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])")
SUBST_RE = re.compile(r"\|(release|version)\|")
FOOTREF_RE = re.compile(r"\s*\[(?:#\w*|\d+|\*)\]_")
ADORN_RE = re.compile(r"^\s*([=\-~^\"'`#*+.:_])\1{2,}\s*$")
DIRECTIVE_RE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$")


def _role_text(m: re.Match) -> str:
    text = m.group(1)
    mt = re.match(r"^(.*?)\s*<[^>]*>$", text, re.S)
    if mt and mt.group(1):
        return mt.group(1)
    if text.startswith("~"):
        text = text[1:].split(".")[-1]
    return text.lstrip("!")


def inline(text: str, version: str) -> str:
    text = SUBST_RE.sub(version, text)
    text = FOOTREF_RE.sub("", text)
    text = ROLE_RE.sub(_role_text, text)
    text = INLINE_LITERAL_RE.sub(r"\1", text)
    text = LINK_RE.sub(r"\1", text)
    text = REF_RE.sub(r"\1", text)
    text = INTERP_RE.sub(r"\1", text)
    text = STRONG_RE.sub(r"\1", text)
    text = EMPH_RE.sub(r"\1", text)
    text = text.replace("\\ ", "")
    return re.sub(r"[ \t]+", " ", text).strip()


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def rst_to_text(src: str, version: str) -> str:
    lines = src.expandtabs(8).splitlines()
    out: list[str] = []  # logical lines; "" = paragraph break
    i, n = 0, len(lines)

    def skip_block(start: int, base: int) -> int:
        """Skip lines indented deeper than ``base`` (blank lines included)."""
        j = start
        while j < n and (not lines[j].strip() or indent_of(lines[j]) > base):
            j += 1
        return j

    while i < n:
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            out.append("")
            i += 1
            continue
        ind = indent_of(line)
        m = DIRECTIVE_RE.match(line)
        if m:
            name = m.group(2).split(":")[-1]
            arg = m.group(3).strip()
            j = i + 1
            while arg.endswith("\\") and j < n:  # signature continued
                arg = arg[:-1].rstrip() + " " + lines[j].strip()
                j += 1
            # option lines (":noindex:" etc.) directly under the directive
            while j < n and lines[j].strip().startswith(":") and indent_of(lines[j]) > ind:
                j += 1
            if name in KEEP_BODY:
                if name in KEEP_ARG and arg:
                    out.append("")
                    out.append(arg + ("." if name in ("rubric", "topic") else ""))
                    out.append("")
                i = j  # body lines are processed normally (indentation ignored)
            else:
                i = skip_block(j, ind)
            continue
        if stripped.startswith(".."):  # comment, target, footnote, substitution
            i = skip_block(i + 1, ind)
            continue
        if ADORN_RE.match(line):  # section adornment
            i += 1
            continue
        if stripped.startswith(("+-", "+=", "|")) or re.match(r"^=+(\s+=+)+\s*$", stripped):
            i += 1  # table line
            continue
        if stripped.startswith((">>>", "...", "$ ", "% ")):
            # doctest / shell session: skip it with its output
            j = i + 1
            while j < n and lines[j].strip():
                j += 1
            i = j
            continue
        if re.match(r"^:[\w -]+:(\s|$)", stripped):  # field list
            out.append("")
            out.append(re.sub(r"^:([\w -]+):", r"\1:", stripped))
            i += 1
            continue
        # ordinary text line
        if stripped.endswith("::"):
            text = stripped[:-2].rstrip()
            if text:
                out.append(text + ":")
            # following indented literal block is code: skip it
            j = i + 1
            while j < n and not lines[j].strip():
                j += 1
            if j < n and indent_of(lines[j]) > ind:
                i = skip_block(j, ind)
            else:
                i += 1
            out.append("")
            continue
        out.append(stripped)
        i += 1

    # reflow logical lines into paragraphs
    paras: list[str] = []
    cur: list[str] = []
    for ln in out + [""]:
        if ln:
            # bullet or enumerated item starts a new paragraph
            if cur and re.match(r"^([-*•]|\d+\.|#\.)\s", ln):
                paras.append(" ".join(cur))
                cur = []
            cur.append(ln)
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    keep = []
    for p in paras:
        p = inline(re.sub(r"\s+", " ", p).strip(), version)
        p = re.sub(r"^([-*•]|#\.)\s+", "", p)
        if not p or not re.search(r"[A-Za-z]{2}", p):
            continue
        if len(p) < 3:
            continue
        keep.append(p)
    return "\n\n".join(keep)


def find_sources(args) -> tuple[str, str, str | None]:
    """Return (sources_dir, package_name_version, tmpdir_to_delete)."""
    if args.sources:
        return args.sources, "(given with --sources)", None
    if not args.deb:
        found = sorted(glob.glob("/usr/share/doc/python3.*/html/_sources"))
        if found:
            d = found[-1]
            pkg = "python%s-doc" % d.split("/")[4][len("python"):]
            ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                                 capture_output=True, text=True).stdout.strip()
            return d, f"{pkg} {ver} (installed)", None
    tmp = tempfile.mkdtemp(prefix="pydoc-")
    deb = args.deb
    if not deb:
        pkg = args.package
        print(f"downloading {pkg} with apt-get download ...", file=sys.stderr)
        subprocess.run(["apt-get", "download", pkg], cwd=tmp, check=True)
        debs = glob.glob(os.path.join(tmp, "*.deb"))
        if not debs:
            sys.exit(f"apt-get download {pkg} produced no .deb")
        deb = debs[0]
    subprocess.run(["dpkg-deb", "-x", deb, os.path.join(tmp, "root")], check=True)
    found = sorted(glob.glob(os.path.join(tmp, "root/usr/share/doc/python3.*/html/_sources")))
    if not found:
        sys.exit(f"no html/_sources in {deb}")
    base = os.path.basename(deb)
    pkg, ver = base.split("_")[0], base.split("_")[1]
    return found[-1], f"{pkg} {ver.replace('%3a', ':')}", tmp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "demo", "corpus"))
    ap.add_argument("--sources", help="an html/_sources folder to read")
    ap.add_argument("--deb", help="a python3.X-doc .deb file to read")
    ap.add_argument("--package", default="python3.11-doc",
                    help="Debian package to apt-get download if nothing is installed")
    ap.add_argument("--max-mb", type=float, default=3.0,
                    help="stop adding sections once the corpus would exceed this")
    args = ap.parse_args()

    src_dir, pkg, tmp = find_sources(args)
    mver = re.search(r"python(3\.\d+)", src_dir)
    version = mver.group(1) if mver else "3"
    try:
        docs: list[tuple[str, str]] = []
        total = 0
        used_sections = []
        full = False
        for sec in SECTIONS:
            path = os.path.join(src_dir, sec)
            files = [path] if os.path.isfile(path) else sorted(
                glob.glob(os.path.join(path, "**", "*.rst.txt"), recursive=True))
            count, sec_size = 0, 0
            for f in files:
                with open(f, encoding="utf-8") as fh:
                    text = rst_to_text(fh.read(), version)
                if len(text) < 200:
                    continue
                size = len(text.encode()) + len(DOC_SEP) + 2
                if docs and total + size > args.max_mb * 1e6:
                    full = True
                    break
                docs.append((os.path.relpath(f, src_dir), text))
                total += size
                count += 1
                sec_size += size
            if count:
                part = "" if not full else f", first {count} of {len(files)} files in name order"
                used_sections.append(f"{sec} ({count} files, {sec_size/1e6:.2f} MB{part})")
            if full:
                break

        os.makedirs(args.out, exist_ok=True)
        out_txt = os.path.join(args.out, "python_docs.txt")
        with open(out_txt, "w", encoding="utf-8") as fh:
            for _, text in docs:
                fh.write(text + "\n" + DOC_SEP + "\n")
        data = open(out_txt, "rb").read()
        sha = hashlib.sha256(data).hexdigest()

        lic_src = os.path.join(src_dir, "license.rst.txt")
        if os.path.exists(lic_src):
            with open(lic_src, encoding="utf-8") as fh:
                lic = rst_to_text(fh.read(), version)
            with open(os.path.join(args.out, "LICENSE-PSF.txt"), "w", encoding="utf-8") as fh:
                fh.write("Licence of the Python documentation (from license.rst in the\n"
                         f"{pkg} package), converted to plain text.\n\n"
                         "Copyright (c) 2001-2023 Python Software Foundation. All rights reserved.\n"
                         "Copyright (c) 2000 BeOpen.com. All rights reserved.\n"
                         "Copyright (c) 1995-2000 Corporation for National Research Initiatives.\n"
                         "All rights reserved.\n"
                         "Copyright (c) 1991-1995 Stichting Mathematisch Centrum. All rights reserved.\n\n"
                         + lic + "\n")

        with open(os.path.join(args.out, "SOURCE.md"), "w", encoding="utf-8") as fh:
            fh.write(f"""# Demo corpus: the Python {version} documentation, as plain text

- **File:** `python_docs.txt`: {len(data):,} bytes, {len(docs)} documents, each
  followed by a line `{DOC_SEP}`. sha256 `{sha}`.
- **Taken from:** the Debian package **{pkg}**, folder
  `/usr/share/doc/python{version}/html/_sources/` (the reStructuredText sources
  of the CPython documentation).
- **Sections used:** {', '.join(used_sections)}.
- **Not kept in the repository:** the text is made where it is needed
  (`scripts/train_demo_model.py` runs the script below when the file is missing); the
  repository keeps this note, the script and the licence. The sha256 above tells whether
  a text made again is the one the demo model was trained on.
- **How it was made:** `python scripts/prepare_corpus.py` (from the repo root).
  It drops directives other than prose ones, code and literal blocks, doctest
  sessions, tables, comments and markup, and puts each paragraph on one line.
  The same command makes it again from the package (it runs
  `apt-get download {args.package}` when the package is not installed).
- **Licence:** Python's documentation is copyright the Python Software
  Foundation and licensed under the **PSF License Agreement** (the code in it
  is dual licensed under PSF and the Zero-Clause BSD licence); see
  `LICENSE-PSF.txt` here. The PSF licence allows copying, changing and
  redistributing the text and works derived from it, such as the demo model
  trained on it, provided that the PSF copyright notice and the licence are
  kept with them, and a summary of the changes is given: the changes are those
  listed under "How it was made". This is a derived, shortened text; it is not
  the official documentation.
""")
        print(f"wrote {out_txt}: {len(data)/1e6:.2f} MB, {len(docs)} documents; "
              f"sections: {', '.join(used_sections)}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
