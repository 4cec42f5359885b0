"""Review 14, finding 3 (pre-existing, not introduced by 0c295a2): a narrowed op with several results (max.dim,
min.dim, topk, native_layer_norm, ...) keeps its 32-bit results: compiled code returns int32
where eager returns int64, and a float64 LayerNorm model cannot train compiled (its forward
graph saves float32 activations for a backward graph traced with float64).

Shows: (a) torch.max(a * b, dim=1) on int64: the values come out int32 (eager: int64);
(b) a float64 Linear+LayerNorm module: forward+backward raises NEFFExecutionError
"model_default_*_backward_0: input 4 is Float[5, 16]; the graph was compiled for Double[5, 16]".
Same with the whole-graph propagation (the old code): both widen only single-tensor results.

How often: every run.

Root cause: python/torch_neuron_sim/compile/passes.py:120-122 (_widen_result: `isinstance(val,
torch.Tensor)`: a tuple/list result is never widened; the old _widen_results had the same test),
while narrow_64bit (:58-111) narrows such ops. Fix: widen each 64-bit element of a tuple result
(insert getitem-side _to_copy's, or a widened getitem per element), or do not narrow ops with
several results.

Exits 1 while the bug exists, 0 once fixed."""
import os
import sys
import tempfile

os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401

bad = False
a = torch.randint(0, 50, (3, 4), generator=torch.Generator().manual_seed(0)).to("neuron")
b = torch.randint(0, 50, (3, 4), generator=torch.Generator().manual_seed(1)).to("neuron")


def f(a, b):
    v, i = torch.max(a * b, dim=1)
    return v


got, want = torch.compile(f, backend="neuron")(a, b), f(a, b)
print(f"(a) max.dim values: compiled {got.dtype}, eager {want.dtype}")
bad |= got.dtype != want.dtype

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)).double().to("neuron")
x = torch.randn(5, 8, dtype=torch.float64).to("neuron")
try:
    out = torch.compile(m, backend="neuron")(x)
    out.sum().backward()
    print(f"(b) float64 LayerNorm training: ok, output {out.dtype}")
    bad |= out.dtype != torch.float64
except Exception as error:  # noqa: BLE001
    print(f"(b) float64 LayerNorm training raised {type(error).__name__}: {str(error)[-160:]}")
    bad = True
sys.exit(1 if bad else 0)
