"""Review of the complex-values fix (issue 26 item 5), finding 2. An output that is a view of another dtype than its base fails when the base's storage is not a
whole number of the view's elements, though eager allows the view: Executor.cpp output_view first views
the WHOLE storage as the view's dtype (bytes % view_element must be 0)."""
import os, sys
os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import torch
import torch_neuronx  # noqa: F401

cases = {
    # a byte buffer of odd length (e.g. a header + packed float32 payload), part of it viewed as float32
    "uint8 input of 9 bytes, x[:8].view(float32)": (lambda x: x[:8].view(torch.float32), torch.arange(9, dtype=torch.uint8)),
    "uint8 input of 13 bytes, x[4:12].view(float32)": (lambda x: x[4:12].view(torch.float32), torch.arange(13, dtype=torch.uint8)),
    # a fresh result of 10 int8 elements, its first 8 viewed as int32
    "int8 result of 10, (x + 1)[:8].view(int32)": (lambda x: (x + 1)[:8].view(torch.int32), torch.arange(10, dtype=torch.int8)),
}
failures = 0
for name, (fn, x) in cases.items():
    want = fn(x.clone())
    try:
        got = torch.compile(fn, backend="neuron", fullgraph=True)(x.clone().to("neuron")).cpu()
        ok = got.dtype == want.dtype and torch.equal(got, want)
        print(f"{name}: {'equal' if ok else 'DIFFERENT'}")
    except Exception as error:  # noqa: BLE001
        ok = False
        print(f"{name}: eager gives {want.dtype} {tuple(want.shape)}; compiled raised {type(error).__name__}: "
              f"{str(error).splitlines()[0][-200:]}")
    failures += not ok
    torch._dynamo.reset()
sys.exit(1 if failures else 0)
