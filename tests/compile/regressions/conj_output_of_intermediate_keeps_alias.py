"""Review of the complex-values fix (issue 26 item 5), finding 1. Compiled graph returning an intermediate t and t.conj() (or torch._neg_view(t)) without grad:
eager's second output is a view of the first (mutating t changes it); compiled, materialize_lazy_views
turned the view into conj_physical / neg, so the outputs no longer alias: silently different values
after an in-place update of the first output. (torch.compile(backend="aot_eager") keeps the alias.)"""
import os, sys
os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

torch.manual_seed(0)
a, b = torch.randn(4, dtype=torch.complex64), torch.randn(4, dtype=torch.complex64)
failures = 0
for name, view in (("t.conj()", torch.conj), ("torch._neg_view(t)", torch._neg_view)):
    def fn(x, y):
        t = x * y
        return t, view(t)
    results = {}
    for label, f, dev in (("cpu eager", fn, "cpu"), ("neuron eager", fn, "neuron"),
                          ("neuron compiled", torch.compile(fn, backend="neuron", fullgraph=True), "neuron")):
        t, v = f(a.to(dev), b.to(dev))
        t.add_(1)  # eager: v sees it
        results[label] = (v.resolve_conj().resolve_neg().cpu(), v._base is t)
        torch._dynamo.reset()
    want = results["cpu eager"][0]
    for label, (got, is_view) in results.items():
        same = torch.allclose(got, want)
        print(f"return (t, {name}); t.add_(1): {label}: second output {'matches' if same else 'DIFFERS'}"
              f" (is a view of t: {is_view}) {got[:2].tolist()}")
        failures += not same
sys.exit(1 if failures else 0)
