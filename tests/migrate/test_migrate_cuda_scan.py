"""neuron-migrate: CUDA-only code in a user's script, with line and suggested change."""
import os

from migrate_helpers import DATA
from neuron_migrate.cuda_scan import scan_files, scan_source


def test_cuda_script_findings_have_lines_and_suggestions():
    path = os.path.join(DATA, "cuda_script.py")
    findings = scan_files([path])
    by_line = {}
    for finding in findings:
        by_line.setdefault(finding["line"], []).append(finding)
    kinds = {(f["line"], f["kind"]) for f in findings}
    assert (4, "torch.cuda API") in kinds  # from torch.cuda.amp import GradScaler
    assert (6, "torch.backends (CUDA)") in kinds
    assert (7, "nccl backend") in kinds
    assert (8, "torch.cuda API") in kinds  # torch.cuda.set_device
    assert (9, ".cuda()") in kinds
    assert (10, "cuda-only compile mode") in kinds
    assert (11, "device string") in kinds  # device="cuda:0"
    assert (12, "torch.cuda API") in kinds and (13, "torch.cuda API") in kinds  # CUDA graphs
    mode = next(f for f in findings if f["kind"] == "cuda-only compile mode")
    assert "max-autotune" in mode["message"] and "backend='neuron'" in mode["suggestion"]
    graph = next(f for f in by_line[12] if f["kind"] == "torch.cuda API")
    assert "CUDA-graph" in graph["suggestion"]
    device = next(f for f in by_line[11] if f["kind"] == "device string")
    assert "'neuron:0'" in device["suggestion"] and 'device="cuda:0"' in device["code"]
    assert all(f["file"] == path for f in findings)


def test_clean_script_and_aliases():
    assert scan_source("import torch\nx = torch.ones(2, device='neuron')\nx.to('cpu')\n") == []
    findings = scan_source("import torch as T\nfrom torch import cuda as C\nT.cuda.synchronize()\nC.empty_cache()\n")
    assert [(f["line"], f["kind"]) for f in findings] == [(3, "torch.cuda API"), (4, "torch.cuda API")]
    assert "torch.neuron.empty_cache()" in findings[1]["suggestion"]
    assert scan_source("torch.compile(m, dynamic=True)\n")[0]["kind"] == "dynamic shapes"
    assert scan_source("import flash_attn\n")[0]["kind"] == "cuda-only package"


def test_syntax_error_is_a_finding():
    findings = scan_source("def broken(:\n", "bad.py")
    assert findings[0]["kind"] == "syntax error" and findings[0]["file"] == "bad.py"


def test_line_and_code_of_a_continued_call_and_after_a_form_feed():
    source = "import torch\nmodel = (torch.nn.Linear(4, 4)\n         .to(torch.float16)\n         .cuda())\n"
    finding = next(f for f in scan_source(source) if f["kind"] == ".cuda()")
    assert (finding["line"], finding["column"], finding["code"]) == (4, 11, ".cuda())")  # was line 2, no .cuda()
    source = "import torch\n\x0c\nx = torch.ones(2)\ny = x.cuda()\n"  # ^L: a page break, not a line break
    finding = next(f for f in scan_source(source) if f["kind"] == ".cuda()")
    assert (finding["line"], finding["code"]) == (4, "y = x.cuda()")


def test_script_that_cannot_be_decoded_is_a_finding_and_the_others_are_scanned(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes("# caf\u00e9\nimport torch\nx = torch.ones(2).cuda()\n".encode("latin-1"))  # no coding cookie
    declared = tmp_path / "declared.py"
    declared.write_bytes("# -*- coding: latin-1 -*-\n# caf\u00e9\nx = y.cuda()\n".encode("latin-1"))
    good = tmp_path / "good.py"
    good.write_text("import torch\ntorch.cuda.synchronize()\n")
    findings = scan_files([str(latin), str(declared), str(good)])  # raised UnicodeDecodeError
    assert [(os.path.basename(f["file"]), f["line"], f["kind"]) for f in findings] == [
        ("latin.py", 0, "unreadable"), ("declared.py", 3, ".cuda()"), ("good.py", 2, "torch.cuda API")]
    assert "not valid Python source text" in findings[0]["message"]
