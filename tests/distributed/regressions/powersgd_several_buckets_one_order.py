"""Review of issue 9 by a test-writing helper, finding 2. PowerSGD's DDP comm hook with more than one gradient bucket: the ranks issue their
collectives in different orders, Gloo pairs an allreduce of one size with another's and
aborts the process (std::terminate: gloo::EnforceNotMet "op.preamble.length <= op.nbytes ...
Received data size doesn't match expected size. Is there a distributed collective mismatch
in your code?"), or a collective fails with "Connection reset by peer".

Why: the hook chains collectives in future callbacks (allreduce of the uncompressed tensors
.then(allreduce of P, wait) .then(allreduce of Q, wait)). With NCCL a Work's future is
completed when the collective is enqueued, so each callback runs at once, inline, on the
thread that issued the hook (the autograd thread): every rank issues bucket 0's chain, then
bucket 1's... in the same order. ProcessGroupNeuron completes the future when the result is in
device memory and runs the callbacks on its completion threads, so bucket k's P/Q allreduces
(completion thread) race with bucket k+1's first allreduce (autograd thread), differently on
each rank. With one bucket (bucket_cap_mb large) there is no race and it trains.
DEV=cpu BACKEND=gloo runs the same on CPU/Gloo (its futures also complete asynchronously).
BUCKET_CAP_MB (default 0.05) sets the buckets. Exits 1 while the bug exists."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def fn(rank):
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as P
    dev = os.environ.get("DEV", "neuron")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)]).to(dev)
    ddp = DDP(model, bucket_cap_mb=float(os.environ.get("BUCKET_CAP_MB", "0.05")))
    state = P.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                            min_compression_rate=2, random_seed=0)
    ddp.register_comm_hook(state, P.powerSGD_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(10):
        x = torch.randn(8, 64, generator=g).to(dev)
        optimizer.zero_grad()
        ddp(x).square().mean().backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    both = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(both, flat)
    assert torch.equal(both[0].cpu(), both[1].cpu()), "the ranks' parameters differ"
    return f"{len(ddp.reducer._get_zeros_like_grad_buckets())} buckets, ok" if hasattr(ddp.reducer, "_get_zeros_like_grad_buckets") else "ok"

if __name__ == "__main__":
    run(fn, timeout=90, env={"PG_TIMEOUT": "30", "DEV": os.environ.get("DEV", "neuron")})
