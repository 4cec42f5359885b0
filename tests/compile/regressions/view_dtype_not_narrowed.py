"""Review 14, finding 4 (pre-existing, not introduced by 0c295a2): `x.view(dtype)` (aten.view.dtype) of an int64
tensor is narrowed like an arithmetic op: compiled `x.view(torch.int32)` of a (3, 4) int64 tensor
gives a (3, 4) tensor (the int32 copy's values + 1: 45, 40, 34, ...) where eager gives the
(3, 8) bit view + 1 (45, 1, 40, 1, ...: low and high halves). Same with the whole-graph propagation.

How often: every run.

Root cause: python/torch_neuron_sim/compile/passes.py:58-111 (narrow_64bit): "view" is an
on-device op and not exact (csrc/Dtype64.cpp is_exact_op has neither view nor as_strided), and the
"typed on request" test (:79-80, node.kwargs.get(dtype_argument)) misses view.dtype's dtype, which the
graph passes positionally; the 32-bit copy is then reinterpreted with half the element size.
Fix: never narrow view ops (target.is_view / alias_info on a return), at least view.dtype.

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys
import tempfile

os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401

x = torch.randint(0, 50, (3, 4), generator=torch.Generator().manual_seed(0)).to("neuron")


def f(x):
    return x.view(torch.int32) + 1


got, want = torch.compile(f, backend="neuron")(x).cpu(), f(x).cpu()
print(f"compiled {tuple(got.shape)} {got.flatten()[:6].tolist()}; eager {tuple(want.shape)} {want.flatten()[:6].tolist()}")
sys.exit(0 if got.shape == want.shape and torch.equal(got, want) else 1)
