"""Review 15b, finding 1: the oneDNN flag is checked once (small_matmul_applies), then ATen's brgemm checks it
again on every call (device_check). If another thread turns oneDNN off in between -- here the host
thread, while a queued bf16 mm runs on the stream worker (asynchronous mode, commit bf5f4ff) --
the neuron mm fails with "BFloat16 Brgemm VNNI format is only supported ...", although at::mm
(the path before bf5f4ff, and CPU eager) computes the product whatever the flag.
Exit 1 while the bug exists. Run with NEURON_LAUNCH_BLOCKING=0 (set below)."""
import os, sys, time
os.environ.setdefault("NEURON_LAUNCH_BLOCKING", "0")
import torch, torch_neuronx
from torch_neuron_sim import _C

torch.manual_seed(0)
x = torch.randn(1, 768).bfloat16()
w = torch.randn(32000, 768).bfloat16()          # a vocabulary projection: ~1-2 ms per product
xd, wd = x.to("neuron"), w.to("neuron")
print("applies:", _C.small_matmul_applies(1, 768, 32000))
expected = torch.nn.functional.linear(x, w)
torch.nn.functional.linear(xd, wd).cpu()        # first of its signature (inline); later ones queue
# warm-up without toggling: the worker probes the shape at its thread count (Note [Kernel
# threads]), so the verdicts are cached as True
for _ in range(3):
    warm = [torch.nn.functional.linear(xd, wd) for _ in range(10)]
    time.sleep(0.2)
    torch.neuron.synchronize()
before = _C.small_matmul_calls()
error = None
for attempt in range(5):
    outs = [torch.nn.functional.linear(xd, wd) for _ in range(60)]   # queued on the worker
    deadline = time.time() + 1.0
    while time.time() < deadline:               # host: something else toggles oneDNN meanwhile,
        torch._C._set_mkldnn_enabled(False)     # as `with torch.backends.mkldnn.flags(enabled=False):`
        torch._C._set_mkldnn_enabled(True)      # around some CPU code would
    try:
        torch.neuron.synchronize()
        ok = all(torch.equal(o.cpu(), expected) for o in outs)
        # (results may differ from CPU where the worker ran at::mm with oneDNN off: the flag
        # is read when the kernel runs, as before bf5f4ff; not what this repro tests)
        print(f"attempt {attempt}: no error (equal to CPU: {ok})")
    except RuntimeError as e:
        error = str(e).splitlines()[0]
        break
print("kernel runs:", _C.small_matmul_calls() - before)
if error:
    print("FAIL:", error)
    sys.exit(1)
print("OK")
