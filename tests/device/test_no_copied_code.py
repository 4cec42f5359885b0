"""The repository holds only code and text its own authors wrote (issue 39): no vendored folders,
no file under another project's copyright notice. The one exception is the licence that must
travel with the demo model (trained on the Python documentation: the PSF licence asks that its
notice be kept with derived works); the documentation's text itself is made where it is needed
(scripts/prepare_corpus.py), not kept. PyTorch's own tests are run from a PyTorch checkout named by
an environment variable (tests/distributed/test_dtensor_random.py), not copied."""
import os
import re
import subprocess

from conftest import ROOT

# Licence texts the repository must keep beside what it derived from them, each with its reason.
KEPT_LICENCES = {
    "demo/corpus/LICENSE-PSF.txt": "the licence of the demo corpus's source (kept with its note SOURCE.md)",
    "demo/model/LICENSE-PSF.txt": "the PSF licence asks that its notice be kept with derived works (the demo model)",
    "scripts/prepare_corpus.py": "writes the PSF notice into the licence file it makes beside the corpus",
}
FOREIGN_NOTICE = re.compile(r"Copyright \(c\) [0-9-]+,? (Meta|Facebook|Google|NVIDIA|Microsoft|Python Software "
                            r"Foundation|The HuggingFace|Intel|Advanced Micro Devices)|All rights " r"reserved by",
                            re.IGNORECASE)


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def test_no_vendored_folders():
    vendored = [p for p in tracked_files() if re.search(r"(^|/)(third_party|third-party|vendor|vendored)/", p)]
    assert not vendored, vendored


def test_no_file_under_another_projects_notice():
    found = []
    for path in tracked_files():
        if path in KEPT_LICENCES:
            continue
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full) or os.path.getsize(full) > 2_000_000:
            continue
        with open(full, "rb") as fh:
            head = fh.read(200_000)
        if b"\0" in head:
            continue  # binary (weights, images)
        if FOREIGN_NOTICE.search(head.decode("utf-8", "replace")):
            found.append(path)
    assert not found, found


def test_the_demo_corpus_text_is_not_kept():
    assert "demo/corpus/python_docs.txt" not in tracked_files()
    with open(os.path.join(ROOT, "demo", "corpus", "SOURCE.md")) as fh:
        assert "scripts/prepare_corpus.py" in fh.read()
