"""Review 14, finding 6 (pre-existing, unrelated to both changes; found while testing): `x & 0xFF` compiles but
fails at run time: NEFFExecutionError "aten::bitwise_and() Expected a value of type 'Tensor'
for argument 'other' but instead found type 'int'" (int32 and int64, also with
NEURON_SIM_NATIVE_64BIT=1). The ATen graph has aten.bitwise_and.Tensor(x, 255): a Python number
where the schema says Tensor, which the Python op overload accepts (it wraps it) but the
program's boxed call does not.

How often: every run.

Root cause: python/torch_neuron_sim/compile/lowering.py:117-162 (Lowering._arg; ints at :139): an int/float
for a `Tensor` argument is encoded as A_INT/A_DOUBLE instead of a (0-dim, wrapped-number)
tensor constant. Fix: for a Tensor-typed argument given a Python number, emit a constant
scalar tensor (or rewrite to the .Scalar overload in a pass).

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys
import tempfile

os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401

x = torch.arange(12, device="neuron", dtype=torch.int32) * 37
try:
    got = torch.compile(lambda x: x & 0xFF, backend="neuron")(x).cpu()
except Exception as error:  # noqa: BLE001
    print(f"raised {type(error).__name__}: {str(error)[:160]}")
    sys.exit(1)
want = (x & 0xFF).cpu()
print(f"compiled {got.tolist()[:4]} eager {want.tolist()[:4]}")
sys.exit(0 if torch.equal(got, want) else 1)
