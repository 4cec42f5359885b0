"""Review 16, finding 1 (the direct form, pack_block and run_direct_rows, with size_rule): the rule bounds k * n (the weight), but the direct form's cost and memory are
those of a weight of 64 * k elements whatever n is: each block of up to 64 weight rows is packed
over ALL of k into a per-thread buffer of k/2 * 64 uint32 (line 255: 128 * k bytes, zero-padded
past n, kept for the life of the thread) and multiplied there. For a narrow weight with a long K
(n < 64: heads with few outputs, a K of a flattened feature map) the product then goes through
the kernel although it is many times slower than at::mm and the buffer is far larger than the
weight; the probe, which runs the kernel up to 3 times per draw, costs seconds, not the 0.1 s the
note's 32M-element limit is meant to ensure. Here: a bfloat16 F.linear on the device, 1 x 262144
activations, an 8 x 262144 weight (4 MiB), against the same F.linear on the CPU. Exit 1 while the
kernel takes that shape and is over 3 times slower than at::mm, or keeps over 16 MiB."""
import os, sys, time
import torch, torch_neuronx
from torch_neuron_sim import _C

torch.set_num_threads(1)   # one thread: the comparison is not the scheduler's
m, k, n = 1, 1 << 16, 8   # the longest k the size rule admits
torch.manual_seed(0)
x, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
xd, wd = x.to("neuron"), w.to("neuron")

def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

def best_of(f, reps=5):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return min(times)

rss0 = rss_mib()
t = time.perf_counter()
got = torch.nn.functional.linear(xd, wd).cpu()        # the first: probes the shape
first = time.perf_counter() - t
before = _C.small_matmul_calls()
neuron = best_of(lambda: torch.nn.functional.linear(xd, wd).cpu())
ran = _C.small_matmul_calls() - before
cpu = best_of(lambda: torch.nn.functional.linear(x, w))
kept = rss_mib() - rss0
equal = torch.equal(got, torch.nn.functional.linear(x, w))
print(f"{m}x{k} @ ({n}x{k})^T, weight {n * k * 2 / 2**20:.0f} MiB: first call (probe) {first:.2f} s; "
      f"then neuron {neuron * 1e3:.2f} ms (kernel runs: {ran}), CPU {cpu * 1e3:.2f} ms, "
      f"ratio {neuron / cpu:.1f}; memory kept since the first call {kept:.0f} MiB; equal to CPU: {equal}")
# For scale (not checked: a 4x ratio is within the noise of a busy 2-core machine): a Mixtral-style
# MoE router at decode, 1 x 4096 @ (8 x 4096)^T, every layer, every token.
xr, wr = torch.randn(1, 4096).bfloat16(), torch.randn(8, 4096).bfloat16()
out = torch.empty(1, 8, dtype=torch.bfloat16)
router = [best_of(lambda: _C.small_matmul(out, xr, wr.t()), 50), best_of(lambda: torch.mm(xr, wr.t(), out=out), 50)]
print(f"(MoE router 1x4096 @ (8x4096)^T on CPU tensors: the kernel {router[0] * 1e6:.0f} us, at::mm {router[1] * 1e6:.0f} us)")
if not equal:
    print("FAIL: not equal to CPU"); sys.exit(1)
if _C.small_matmul_form() == "none":
    print("not applicable: this CPU does not run the small-matmul kernel (no AVX512-BF16, or oneDNN's ISA "
          "limited below avx512_core_bf16): every product is at::mm's")
    sys.exit(77)
if _C.small_matmul_form() != "direct":
    print("not applicable: the transposed (AMX) form packs the activations, not the weight"); sys.exit(77)
# Timings are printed, not checked (a busy 2-core machine); what is checked is that the buffer the
# kernel packs into is bounded by a piece of k, not by k (here 1 MiB of weight: ~8 MiB kept with
# the fix, ~16 before).
if kept > 12:
    print(f"FAIL: the kernel keeps {kept:.0f} MiB for a {n * k * 2 / 2**20:.0f} MiB weight")
    sys.exit(1)
print("OK")
