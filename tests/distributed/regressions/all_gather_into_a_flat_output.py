"""(Review of issue 9 by a test-writing helper, finding 1; runs Gloo only: NEURON_SIM_SHM_COLLECTIVES=0.)
all_gather_into_tensor / _allgather_base with an output whose shape is not
(world * input.shape[0], *input.shape[1:]) but has world * input.numel() elements, as NCCL
accepts (NCCL only needs the numel). Accelerate's gather() does exactly this for every
non-gloo backend (accelerate/utils/operations.py _gpu_gather_one: a flat output of
num_processes * tensor.numel() elements), so `accelerate test` fails in
"Test split between processes as a tensor". ProcessGroupNeuron::_allgather_base hands the
views to Gloo's _allgather_base, which chunks the output and insists each chunk has the
input's shape: "ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (1, 2),
got (2))". DEV=cpu: the control with Gloo (which refuses it too: Gloo is not NCCL-like;
accelerate uses all_gather (list) for gloo). Exits 1 while the bug exists."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _two_ranks_spawned import run

def fn(rank):
    import torch, torch.distributed as dist
    dev = "neuron"
    failures = []

    def case(name, body):
        try:
            body()
        except Exception as error:  # noqa: BLE001
            failures.append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0]}")

    def one():
        inp = torch.tensor([[rank, 10 + rank]], dtype=torch.int64, device=dev)
        out = torch.empty(2 * inp.numel(), dtype=torch.int64, device=dev)
        dist.all_gather_into_tensor(out, inp)
        assert out.cpu().tolist() == [0, 10, 1, 11], out

    def two():
        inp = torch.full((3,), float(rank), device=dev)
        out = torch.empty(2, 3, device=dev)
        dist.all_gather_into_tensor(out, inp)
        assert out.cpu().tolist() == [[0.0] * 3, [1.0] * 3], out

    def three():
        outs = [torch.empty(4, device=dev)]
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.all_gather_into_tensor(outs[0], torch.full((1, 2), float(rank), device=dev))
        cm.wait()
        assert outs[0].cpu().tolist() == [0.0, 0.0, 1.0, 1.0], outs

    case("input (1, 2) into a flat output (4,) (accelerate's gather)", one)
    case("input (3,) into an output (2, 3)", two)
    case("coalesced: input (1, 2) into a flat output (4,)", three)
    assert not failures, "\n".join(failures)
    return "ok"
    # 1) accelerate's pattern: input (1, 2), flat output (4,)
    inp = torch.tensor([[rank, 10 + rank]], dtype=torch.int64, device=dev)
    out = torch.empty(2 * inp.numel(), dtype=torch.int64, device=dev)
    dist.all_gather_into_tensor(out, inp)
    assert out.cpu().tolist() == [0, 10, 1, 11], out
    # 2) input (3,), output (2, 3) (stacked rather than concatenated: NCCL accepts it)
    inp = torch.full((3,), float(rank), device=dev)
    out = torch.empty(2, 3, device=dev)
    dist.all_gather_into_tensor(out, inp)
    assert out.cpu().tolist() == [[0.0] * 3, [1.0] * 3], out
    # 3) the coalesced form
    outs = [torch.empty(4, device=dev)]
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], torch.full((1, 2), float(rank), device=dev))
    cm.wait()
    assert outs[0].cpu().tolist() == [0.0, 0.0, 1.0, 1.0], outs
    return "ok"

if __name__ == "__main__":
    run(fn, timeout=60, env={"NEURON_SIM_SHM_COLLECTIVES": "0"})
