"""Review of issue 43 (AEE), finding 1: a synchronisation ends a concatenation group on the device
clock (Note [Adaptive Eager Execution]), whether or not the stream had work to wait for:
torch.neuron.synchronize() never ended it, and stream.synchronize() only when the stream still had
work (so the prediction depended on the host's timing and on NEURON_SIM_INLINE_BYTES).
Expected: the op after each kind of synchronisation opens a new group (0 fused), with ops run at
the call and with every op queued (PASS)."""
import json
import os
import subprocess
import sys

if os.environ.get("REVIEW43_CHILD") != "1":
    failed = False
    for inline in ("65536", "0"):
        env = dict(os.environ, REVIEW43_CHILD="1", NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_SHARED_CORES="0",
                   TORCH_NEURONX_ENABLE_CONCATENATION="1", NEURON_SIM_INLINE_BYTES=inline)
        result = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=300)
        print(f"NEURON_SIM_INLINE_BYTES={inline}:", result.stdout.strip(), result.stderr[-2000:])
        report = json.loads(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else None
        if not report or any(report.values()):
            failed = True
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)

import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import _C  # noqa: E402

x = torch.randn(256, 256, device="neuron")
(x + 1).sum().item()
torch.neuron.synchronize()
w = torch.randn(8, 8, device="neuron")


def fused_after(sync):
    w @ w  # not admitted: ends any open group
    _C._count_launches(True)
    y = x + 1
    sync()
    y + 1
    counts = _C._launch_counts()
    _C._count_launches(False)
    torch.neuron.synchronize()
    return counts["fused"]


print(json.dumps({
    "torch.neuron.synchronize": fused_after(torch.neuron.synchronize),
    "stream.synchronize": fused_after(lambda: torch.neuron.current_stream().synchronize()),
    "event record": fused_after(lambda: torch.Event(device="neuron").record() or None),
    "event.synchronize": fused_after(lambda: torch.neuron.current_stream().record_event().synchronize()),
}))
