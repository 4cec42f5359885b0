"""Review 14, finding 5 (pre-existing, not introduced by 0c295a2): torch.as_strided of an int64 view with a storage
offset gives wrong values compiled: for base (3, 4) and x = base[1:], as_strided(x, (2, 2),
(1, 1), 4) * 3 reads base's storage from element 4 in eager, but the compiled graph narrows
as_strided: it is applied to a fresh int32 copy of x (offset 0, 8 elements), so offset 4 reads
x's element 4 (base element 8). Same with the whole-graph propagation.

How often: every run.

Root cause: python/torch_neuron_sim/compile/passes.py:58-111 (narrow_64bit narrows view ops:
"as_strided" is an on-device op and not exact in csrc/Dtype64.cpp:34-48); a view op's
storage-relative arguments do not carry over to a copy. Fix: never narrow view ops.

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys
import tempfile

os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401

base = torch.randint(0, 50, (3, 4), generator=torch.Generator().manual_seed(0)).to("neuron")


def f(base):
    x = base[1:]
    return torch.as_strided(x, (2, 2), (1, 1), 4) * 3


got, want = torch.compile(f, backend="neuron")(base).cpu(), f(base).cpu()
print(f"compiled {got.flatten().tolist()}; eager {want.flatten().tolist()}; cpu {f(base.cpu()).flatten().tolist()}")
sys.exit(0 if torch.equal(got, want) else 1)
