"""Review 15, finding 2: the per-shape verdict is cached for the process, but oneDNN's at::mm picks a
different summation (work split) depending on the intra-op thread count. A shape first met
with torch.set_num_threads(1) is accepted; after torch.set_num_threads(2) at::mm sums in
another order, the kernel does not, and neuron eager no longer equals CPU eager.
Exits 1 while the bug exists (review 15, kept as a regression test)."""
import sys

import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

m, k, n = 32, 768, 31  # e.g. a 31-class head on 768 features, batch 32
if torch.get_num_threads() < 2 and (__import__("os").cpu_count() or 1) < 2:
    sys.exit("needs 2 cores")

torch.set_num_threads(1)
torch.mm(torch.randn(m, k).bfloat16().to("neuron"), torch.randn(n, k).bfloat16().to("neuron").t())  # probe at 1 thread
print(f"accepted at 1 thread: {_C.small_matmul_applies(m, k, n)}")

torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
bad = 0
for _ in range(50):
    a = torch.randn(m, k, generator=g).bfloat16()
    w = torch.randn(n, k, generator=g).bfloat16()
    expected = torch.mm(a, w.t())                                    # CPU eager, 2 threads
    got = torch.mm(a.to("neuron"), w.to("neuron").t()).cpu()         # neuron eager, 2 threads
    bad += int((expected.view(torch.int16) != got.view(torch.int16)).sum())
print(f"threads now {torch.get_num_threads()}: {bad} output elements differ from CPU eager over 50 randn draws")
sys.exit(1 if bad else 0)
