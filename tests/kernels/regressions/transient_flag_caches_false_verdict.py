"""Review 15b, finding 2 (performance only): a probe that runs while oneDNN is switched off for a moment (by
another thread) throws, or compares the kernel with ATen's non-oneDNN gemm; either way its verdict
is False, and that verdict is kept for the process (global map + per-thread table), although the
flag is back on. Here: asynchronous mode, the worker probes 1x768x32000 at its own thread count
while the host toggles torch.backends.mkldnn; afterwards, with oneDNN on for good, no queued
product of that shape ever takes the kernel again. Exit 1 while the bug exists."""
import os, sys, time
os.environ.setdefault("NEURON_LAUNCH_BLOCKING", "0")
import torch, torch_neuronx
from torch_neuron_sim import _C

torch.manual_seed(0)
x, w = torch.randn(1, 768).bfloat16(), torch.randn(32000, 768).bfloat16()
xd, wd = x.to("neuron"), w.to("neuron")
torch.nn.functional.linear(xd, wd).cpu()   # first of its signature: inline, probed on the host (2 threads)
outs = [torch.nn.functional.linear(xd, wd) for _ in range(30)]   # queued: the worker (1 thread while
deadline = time.time() + 1.0                                    # the host runs Python) probes again
while time.time() < deadline and not os.environ.get("CONTROL_NO_TOGGLE"):
    torch._C._set_mkldnn_enabled(False)
    torch._C._set_mkldnn_enabled(True)
try:
    torch.neuron.synchronize()
except RuntimeError as e:
    print("(sticky error from finding 1:", str(e)[:60], "...) - rerun"); sys.exit(2)
assert torch.backends.mkldnn.enabled
# oneDNN is on for good now; the host keeps running Python, so the worker runs at 1 thread again
before = _C.small_matmul_calls()
outs = [torch.nn.functional.linear(xd, wd) for _ in range(20)]
time.sleep(1.0)
torch.neuron.synchronize()
runs = _C.small_matmul_calls() - before
print("queued products after the toggling:", len(outs), "kernel runs:", runs)
equal = all(torch.equal(o.cpu(), torch.nn.functional.linear(x, w)) for o in outs)
print("equal to CPU:", equal)
if not equal:
    print("FAIL: products after the toggling differ from CPU")
    sys.exit(1)
if _C.small_matmul_form() == "none":  # every product is at::mm's: there is no verdict to keep
    print("not applicable: this CPU does not run the small-matmul kernel (no AVX512-BF16, or "
          "oneDNN's ISA limited below avx512_core_bf16), so no verdict can stay False; products checked equal to CPU")
    sys.exit(77)
if runs == 0:
    print("FAIL: a verdict taken while oneDNN was off for a moment stays False")
    sys.exit(1)
print("OK")
