"""Review 27, finding 1 (fixed: a failed call waits for the collectives it issued,
ProgramExecutor::settle_collectives). 2 ranks, asynchronous mode (shared cores and not). A compiled
program issues all_reduce, then a step fails (index out of range) before the wait. Rank 0 catches the error and calls the program again; rank 1 (2 s late) calls it twice
with valid inputs. The failed call's all_reduce is still in flight on rank 0's arena slot when
the retry reuses that slot. Exit 0 when both ranks' second results equal the CPU's sums."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions"))
from _two_ranks_spawned import run


def body(rank):
    import tempfile, time
    import torch
    import torch.distributed as dist
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="r27_")
    fc = torch.ops._c10d_functional
    name = dist.group.WORLD.group_name

    def f(x, idx):
        ar = fc.all_reduce(x * 1, "sum", name)
        z = torch.index_select(x, 0, idx)
        w = fc.wait_tensor(ar)
        return w + z.sum()

    c = torch.compile(f, backend="neuron")
    xs = {(r, i): torch.full((4, 4), float(10 ** (2 * r + i))) for r in range(2) for i in range(2)}  # 1,10 / 100,1000
    good = torch.tensor([0])
    # compile both ranks first (same graph, valid inputs): one all_reduce each
    warm = c(torch.zeros(4, 4, device="neuron"), good.to("neuron")).cpu()
    dist.barrier()
    results = []
    if rank == 0:
        try:
            c(xs[(0, 0)].to("neuron"), torch.tensor([100]).to("neuron"))
            note = "call 1 did not fail"
        except Exception as e:
            note = f"call 1 failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        results.append(c(xs[(0, 1)].to("neuron"), good.to("neuron")).cpu())
    else:
        time.sleep(2)
        note = "late"
        results.append(c(xs[(1, 0)].to("neuron"), good.to("neuron")).cpu())
        results.append(c(xs[(1, 1)].to("neuron"), good.to("neuron")).cpu())
    last = results[-1]
    z = xs[(rank, 1)][0].sum()
    want = xs[(0, 1)] + xs[(1, 1)] + z
    first_ok = rank == 0 or torch.equal(results[0], xs[(0, 0)] + xs[(1, 0)] + xs[(1, 0)][0].sum())
    assert first_ok, f"rank 1 first call: {results[0][0, 0].item()} != {(xs[(0, 0)] + xs[(1, 0)] + xs[(1, 0)][0].sum())[0, 0].item()}"
    assert torch.equal(last, want), f"{note}; second call: {last[0, 0].item()} != {want[0, 0].item()} (x0={xs[(0, 1)][0, 0].item()} + x1={xs[(1, 1)][0, 0].item()} + z={z.item()})"
    return f"{note}; results {[r[0, 0].item() for r in results]}"


if __name__ == "__main__":
    if "NEURON_SIM_SHARED_CORES" not in os.environ:  # both asynchronous modes, one process each
        import subprocess
        codes = [subprocess.run([sys.executable, __file__], env=dict(os.environ, NEURON_LAUNCH_BLOCKING="0",
                                                                     NEURON_SIM_SHARED_CORES=shared)).returncode
                 for shared in ("0", "1")]
        sys.exit(max(codes))
    env = {k: os.environ[k] for k in ("NEURON_LAUNCH_BLOCKING", "NEURON_SIM_SHARED_CORES") if k in os.environ}
    run(body, timeout=120, env={"PG_TIMEOUT": "30", "OMP_NUM_THREADS": "1", **env})
