"""Review 9b, finding 7 (in the fix f354ef0, not in d54de8e). reduce_scatter_tensors() stages a non-contiguous
input for shared memory, but with PREMUL_SUM it then replaces the staged copy with
reduction.scaled(input_views): `view * factor` keeps a transposed (dense, non-contiguous)
layout, and the transport reads data_ptr() as if it were contiguous.
Both ranks: input = a (2, 4) tensor transposed to (4, 2); reduce_scatter_tensor into (2, 2)
with PREMUL_SUM(2.0). Expected: 2 * (sum over ranks) of the rank's block, as SUM then * 2
gives. Bug: the blocks are taken in the transposed tensor's memory order (exit 1)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def body(rank):
    import torch, torch.distributed as dist
    base = (torch.arange(8.0) + 10 * rank).view(2, 4)
    inp = base.to("neuron").t()                       # (4, 2), non-contiguous
    assert not inp.is_contiguous()
    out = torch.zeros(2, 2, device="neuron")
    dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(2.0))
    total = sum((torch.arange(8.0) + 10 * r).view(2, 4).t() for r in range(2)) * 2
    expect = total[2 * rank: 2 * rank + 2]
    ref = torch.zeros(2, 2, device="neuron")
    dist.reduce_scatter_tensor(ref, inp)               # SUM: staged, right
    assert torch.equal(ref.cpu() * 2, expect), (ref.cpu(), expect)
    assert torch.equal(out.cpu(), expect), f"PREMUL_SUM gave {out.cpu().tolist()}, expected {expect.tolist()}"
    return "ok"

if __name__ == "__main__":
    run(body, timeout=40, env={"OMP_NUM_THREADS": "1"})
