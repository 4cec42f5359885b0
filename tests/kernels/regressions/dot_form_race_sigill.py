"""Review 45, finding 1: before form() has cached kDot, another thread turning oneDNN off makes form() answer
kNone inside probe(); run_kernel() then falls to its else-branch, run_direct (AVX-512 code), on an
AVX2 CPU -> SIGILL (fixed: the form is read once per call and passed down; kNone throws and the
caller keeps at::mm). Runs one child per try (form() is cached once per process). Exits 1 if a child
dies by a signal (crashed in 5 of 5 tries before the fix)."""
import os, subprocess, sys
CHILD = r"""
import sys, threading, torch, torch_neuronx
torch.set_num_threads(1)
sys.setswitchinterval(1e-4)
k, n = 4096, 2048
x = torch.randn(1, k).bfloat16().to("neuron"); w = torch.randn(n, k).bfloat16().to("neuron")
stop = False
def toggle():
    # oneDNN mostly off, on for a moment: as code in another thread using
    # torch.backends.mkldnn.flags(enabled=False) in a loop
    while not stop:
        torch._C._set_mkldnn_enabled(True)
        torch._C._set_mkldnn_enabled(False)
        for _ in range(50): pass
t = threading.Thread(target=toggle); t.start()
from torch_neuron_sim import _C
for i in range(3000):
    torch.nn.functional.linear(x, w)
    if _C.small_matmul_calls(): break
stop = True; t.join(); torch._C._set_mkldnn_enabled(True)
print("form", _C.small_matmul_form(), "calls", _C.small_matmul_calls(), "iters", i)
"""
env = dict(os.environ, NEURON_LAUNCH_BLOCKING="1", OMP_NUM_THREADS="1")
tries = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for t in range(tries):
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    print(f"try {t}: rc={r.returncode} {r.stdout.strip()} {r.stderr.strip()[-300:]}")
    if r.returncode < 0:
        print(f"FAIL: child killed by signal {-r.returncode} (4 = SIGILL)"); sys.exit(1)
print("no crash in", tries, "tries")
