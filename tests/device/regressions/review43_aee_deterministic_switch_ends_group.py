"""Review of issue 43 (AEE), finding 2: launches made while AEE is off (under
torch.use_deterministic_algorithms) left the stream's open group on the device clock, so the first
admitted op after switching it back joined the group opened before the switch (counted "fused",
no launch of its own) although unfused launches ran in between.
Expected: that op opens a new group: 0 fused (PASS)."""
import os
import sys

os.environ.update(NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_SHARED_CORES="0", TORCH_NEURONX_ENABLE_CONCATENATION="1")
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import _C  # noqa: E402

x = torch.randn(256, 256, device="neuron")
w = torch.randn(8, 8, device="neuron")
(x + 1).sum().item(); (w @ w).sum().item(); torch.neuron.synchronize()
_C._count_launches(True)
y = x + 1                                # opens a group (its own launch)
torch.use_deterministic_algorithms(True)
t = x * 2                                # unfused under deterministic algorithms: a launch of its own
torch.use_deterministic_algorithms(False)
z = y + 1                                # opens a new group
counts = _C._launch_counts()
_C._count_launches(False)
print({k: v for k, v in counts.items() if v})
print("PASS" if counts["fused"] == 0 else "FAIL")
sys.exit(0 if counts["fused"] == 0 else 1)
