"""Review 45, finding 2: torch.set_flush_denormal(True) sets FTZ/DAZ on the calling thread only; at::mm (gemm_transa_,
parallel_for over weight rows in num_threads equal chunks) and the dot form (blocks of 64 rows per
thread) give different rows to the calling thread, so with 2 threads the rows between the two split
points are flushed by one and not the other. The per-shape probe ran before the flag was set and
its verdict (keyed on m, k, n, threads) stays. Fixed: the dot form splits the rows with
at::parallel_for(0, n, 1) as gemm_transa_ does. Exits 1 on any bit difference. The brgemm forms
follow oneDNN's sums, not its thread split: this case is not claimed for them (skipped)."""
import sys, torch, torch_neuronx
from torch_neuron_sim import _C
if _C.small_matmul_form() != "dot":
    print("not applicable: the dot form (AVX2 without AVX-512) is the one that splits rows as at::mm does")
    sys.exit(77)
torch.set_num_threads(2)
m, k, n = 1, 256, 300          # k*n >= 65536: rows split; at::mm at row 150, the kernel at 192
assert _C.small_matmul_applies(m, k, n)          # probed now, flag off (creates the OpenMP pool)
a = torch.full((m, k), 2.0 ** -70).bfloat16()
w = torch.full((n, k), 2.0 ** -70).bfloat16()    # every product 2^-140: float32 denormal
assert torch.set_flush_denormal(True)
expected = torch.mm(a, w.t())
out = torch.empty_like(expected)
before = _C.small_matmul_calls()
_C.small_matmul(out, a, w.t())
ran = _C.small_matmul_calls() - before
lin = torch.nn.functional.linear(a.to("neuron"), w.to("neuron")).cpu()
torch.set_flush_denormal(False)
diff = (out.view(torch.int16) != expected.view(torch.int16)).nonzero()[:, 1].tolist()
diff_lin = (lin.view(torch.int16) != expected.view(torch.int16)).nonzero()[:, 1].tolist()
print("kernel ran:", ran, "| small_matmul differs in", len(diff), "outputs, first/last column",
      (diff[0], diff[-1]) if diff else None, "| neuron linear differs in", len(diff_lin))
print("at::mm col 149, 150, 191, 192:", [hex(v & 0xFFFF) for v in expected.view(torch.int16)[0, [149, 150, 191, 192]].tolist()],
      " kernel:", [hex(v & 0xFFFF) for v in out.view(torch.int16)[0, [149, 150, 191, 192]].tolist()])
if diff or diff_lin: print("FAIL"); sys.exit(1)
print("OK")
