"""Review 24 (the redesign), finding 2. Note [Launches] (csrc/Launch.h): "every piece of work the device runs passes one seam, once".
Two paths move device memory without calling note_launch:
  - t.item() (Minimal.cpp local_scalar_dense: a device->host read, CUDA's DtoH memcpy);
  - growing a storage (t.resize_, untyped_storage().resize_ -> NeuronHooks::resizePrivateUse1Bytes),
    which enqueues a device->device copy of the old bytes on the stream.
(Also HostViews.cpp device_storage_for's memset task for a storage without memory.)
A device clock hooked at the seam never sees this work. Exit 1 while either is uncounted."""
import sys
import torch, torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

a = torch.randn(64, 64, device="neuron")
def counted(fn):
    torch.neuron.synchronize(); _C._count_launches(True); fn(); torch.neuron.synchronize()
    c = {k: v for k, v in dict(_C._launch_counts()).items() if v}; _C._count_launches(False); return c
t = torch.ones(1024, device="neuron"); s = torch.ones(1024, device="neuron")
seen = {
    "a.cpu() (reference: a copy)": counted(lambda: a.cpu()),
    "a[0, 0].item()": counted(lambda: a[0, 0].item()),
    "t.resize_(1 << 20) (copies 4 KiB d2d on the stream)": counted(lambda: t.resize_(1 << 20)),
    "untyped_storage().resize_(8 MiB)": counted(lambda: s.untyped_storage().resize_(8 << 20)),
}
bad = 0
for name, c in seen.items():
    print(f"{name:55s} {c}")
    bad += not c
print("BUG: work on device memory that passes no seam" if bad else "OK")
sys.exit(1 if bad else 0)
