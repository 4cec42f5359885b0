"""Review 16, finding 2 (form()): the once-per-process "does the kernel run here" answer is
kept as "none" for good when oneDNN was off for a moment (another thread inside
torch.backends.mkldnn.flags(enabled=False)) while kernel_runs_here() (line 48) ran its trial:
ATen's brgemm refuses ("...only supported ... when oneDNN ukernel is enabled"), the catch at line
57 answers false, and the flag is looked at only after the trial (lines 83 and 87), when it is on
again, so kNone is stored (line 88). The process then never runs the kernel again, for any shape
(small_matmul_form() == "none", every product at::mm, ~8x slower at decode sizes): the failure
transient_flag_caches_false_verdict.py guards against for one shape's verdict, one level up, in code new in this
change. (On an AMX CPU the same window at line 85, could_pack() reading the flag, stores "direct".)

The interleaving is made deterministic with an LD_PRELOAD shim (_flag_off_during_trial.cpp) that
switches oneDNN off for the duration of the trial's one brgemm call (16x16x2) and on right after;
every other call passes through. Then, with oneDNN on for good, a child process asks for the form
and runs a decode-sized bfloat16 linear on the device. Exit 1 while the answer stays "none"."""
import os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = r"""
import ctypes, torch, torch_neuronx
from torch_neuron_sim import _C
x, w = torch.randn(1, 128).bfloat16(), torch.randn(256, 128).bfloat16()
out = torch.nn.functional.linear(x.to("neuron"), w.to("neuron"))   # asks form() (the trial)
assert torch.equal(out.cpu(), torch.nn.functional.linear(x, w))
assert torch.backends.mkldnn.enabled
before = _C.small_matmul_calls()
for _ in range(10):
    out = torch.nn.functional.linear(x.to("neuron"), w.to("neuron"))
try:
    hit = ctypes.CDLL(None).trials_interrupted()
except AttributeError:
    hit = 0
print(hit, _C.small_matmul_form(), _C.small_matmul_calls() - before)
"""

def run(preload):
    import torch
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING="1",
               LIBTORCH_CPU=os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    if preload:
        env["LD_PRELOAD"] = preload
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout[-1000:], r.stderr[-3000:]); sys.exit(2)
    hit, form, runs = r.stdout.split()
    return int(hit), form, int(runs)

import tempfile
scratch = tempfile.mkdtemp()  # private (0700): the shim is loaded into a process
src, lib = os.path.join(HERE, "_flag_off_during_trial.cpp"), os.path.join(scratch, "_flag_off_during_trial.so")
subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)

_, control, control_runs = run(None)
print(f"oneDNN on throughout: form {control!r}, kernel runs in 10 linears: {control_runs}")
if control == "none":
    print("not applicable: this CPU does not run the small-matmul kernel (no AVX512-BF16, or oneDNN's ISA "
          "limited below avx512_core_bf16), so there is no positive answer to lose")
    sys.exit(77)
if control == "dot":
    print("not applicable: the dot form (AVX2 without AVX-512) runs no brgemm trial that oneDNN's flag could "
          "interrupt")
    sys.exit(77)
hit, form, runs = run(lib)
print(f"oneDNN off during the trial only (trial interrupted: {hit}): form {form!r}, "
      f"kernel runs in 10 linears afterwards, oneDNN on: {runs}")
if not hit:
    print("the shim did not see the trial (its shape changed?): cannot check"); sys.exit(2)
if form == "none" or runs == 0:
    print("FAIL: an answer taken while oneDNN was off for a moment is kept: the kernel never runs in this process")
    sys.exit(1)
print("OK")
