"""Review 15, finding 1: once a shape has been accepted, neuron bf16 mm raises under
torch.backends.mkldnn.flags(enabled=False) (at::native::cpublas::brgemm refuses to run when
the user disabled oneDNN), while CPU eager (and neuron before the change) compute fine.
cpu_supported() caches could_pack() once per process and small_matmul_applies caches the
verdict per shape, so neither sees the flag change. Exits 1 while the bug exists (review 15, kept as a regression test)."""
import sys
import warnings

warnings.filterwarnings("ignore")
import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

torch.manual_seed(0)
a = torch.randn(4, 128).bfloat16()
w = torch.randn(256, 128).bfloat16()
an, wn = a.to("neuron"), w.to("neuron")
torch.nn.functional.linear(an, wn)  # first use: probe accepts (4, 128, 256)
print("accepted:", _C.small_matmul_applies(4, 128, 256), "kernel calls:", _C.small_matmul_calls())

failures = []
with torch.backends.mkldnn.flags(enabled=False):
    expected = torch.nn.functional.linear(a, w)
    for name, fn in [("eager linear", lambda: torch.nn.functional.linear(an, wn)),
                     ("eager mm", lambda: torch.mm(an, wn.t())),
                     ("compiled linear", lambda: torch.compile(lambda x, y: x @ y.t(), backend="neuron")(an, wn))]:
        try:
            got = fn().cpu()
            if not torch.equal(got.view(torch.int16), expected.view(torch.int16)):
                failures.append(f"{name}: bits differ from CPU eager")
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name}: raised {type(e).__name__}: {e}")
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
