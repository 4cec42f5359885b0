"""Finding 1. Asynchronous mode: an in-place scatter whose source is its destination
(`x.scatter_(0, idx, x)`) must raise at the call, as it does launch-blocking and as the
CompositeExplicitAutogradNonFunctional kernel these ops took before 0d888a8 does (its meta
function's assert_no_overlap). Since 0d888a8 the call is queued (Generic.cpp only runs at the
call the ops writing "another view" of an operand), the CPU kernel raises on the stream's
worker, the device stays failed, and the error comes out of a later, unrelated op.

Run: python tests/kernels/regressions/THIS_FILE"""
import os
import subprocess
import sys

CHILD = r"""
import sys, warnings
import torch, torch_neuronx
warnings.filterwarnings("ignore")
name = sys.argv[1]
rows = torch.arange(64, device="neuron").flip(0)
idx = rows.view(64, 1).expand(64, 512).contiguous()
ops = {
    "scatter_": lambda x, s: x.scatter_(0, idx, s),
    "scatter_add_": lambda x, s: x.scatter_add_(0, idx, s),
    "index_copy_": lambda x, s: x.index_copy_(0, rows, s),
    "index_add_": lambda x, s: x.index_add_(0, rows, s),
}
op = ops[name]
x = torch.arange(64 * 512.0).reshape(64, 512).to("neuron")  # 128 KiB: over the 64 KiB run-at-call limit
for _ in range(2):                   # valid calls: the dtype signature is verified, later calls queue
    op(x.clone(), x.clone())
torch.neuron.synchronize()
busy = torch.randn(512, 512, device="neuron") @ torch.randn(512, 512, device="neuron")  # work on the stream
try:
    op(x, x)
except RuntimeError as error:
    print(f"{name}(x, ..., x): raised at the call ({str(error)[:60]}...)")
    sys.exit(0)
print(f"{name}(x, ..., x): the call returned")
try:
    (torch.ones(3, device="neuron") + 1).cpu()
    print("  a later unrelated op: fine")
except RuntimeError as error:
    print(f"  a later unrelated op raised: {str(error)[:150]}...")
try:
    torch.zeros(1, device="neuron").cpu()
except RuntimeError:
    print("  and the device stays failed for every later op")
sys.exit(1)
"""

failed = []
for mode in ("1", "0"):
    for name in ("scatter_", "scatter_add_", "index_copy_", "index_add_"):
        env = dict(os.environ, NEURON_LAUNCH_BLOCKING=mode)
        run = subprocess.run([sys.executable, "-c", CHILD, name], env=env, capture_output=True, text=True, timeout=300)
        print(f"[NEURON_LAUNCH_BLOCKING={mode}] " + run.stdout.strip().replace("\n", "\n    "))
        if run.returncode != 0:
            failed.append(f"{name} (NEURON_LAUNCH_BLOCKING={mode})")
if failed:
    print("BUG: self-aliasing scatter not refused at the call in:", ", ".join(failed))
    sys.exit(1)
print("ok: refused at the call in every mode")
