"""Review 44, finding 1: the one-row kernel (a decode step's product, Note [Small bfloat16
matmuls]) added each piece of a long K as total + piece, where brgemm's add_C (and so at::mm)
computes piece + total. Of two NaNs x86 returns the first operand's, so with NaNs of different
bits in two pieces of one dot product the neuron result carried the earlier NaN and CPU the
later; in plain eager use, inf * 0 in one piece and a +NaN in another gave NaNs of opposite sign
(torch.signbit differed). Exits 1 while the bug exists (kept as a regression test)."""
import sys

import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

torch.set_num_threads(1)
if _C.small_matmul_form() == "none":
    print("the small-matmul kernel does not run on this CPU: nothing to compare")
    sys.exit(0)
bits = lambda t: t.reshape(-1)[0].view(torch.int16).item() & 0xFFFF  # noqa: E731
bad = []
for m, k, n in [(1, 768, 64), (1, 1536, 64), (1, 4096, 64), (2, 1536, 64)]:
    a = torch.ones(m, k, dtype=torch.bfloat16)
    w = torch.ones(n, k, dtype=torch.bfloat16)
    w.view(torch.int16)[:, 20] = 0x7FC1   # the first piece of K: a quiet NaN, payload 1
    w.view(torch.int16)[:, 600] = 0x7FC2  # the second (elements 512..1023): payload 2
    expected = torch.mm(a, w.t())
    got = (a.to("neuron") @ w.to("neuron").t()).cpu()
    print(f"{m}x{k}x{n}: CPU {bits(expected):#x}, neuron {bits(got):#x}")
    if not torch.equal(expected.view(torch.int16), got.view(torch.int16)):
        bad.append((m, k, n))
a = torch.ones(1, 1536, dtype=torch.bfloat16)
a[0, 20] = float("inf")
w = torch.ones(64, 1536, dtype=torch.bfloat16)
w[:, 20] = 0.0
w[:, 700] = float("nan")
expected, got = torch.mm(a, w.t()), (a.to("neuron") @ w.to("neuron").t()).cpu()
print(f"inf * 0, then a NaN, 1x1536x64: CPU {bits(expected):#x}, neuron {bits(got):#x}")
if not torch.equal(expected.view(torch.int16), got.view(torch.int16)):
    bad.append("inf * 0")
sys.exit(1 if bad else 0)
