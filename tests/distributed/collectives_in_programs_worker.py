"""2 ranks (regressions/_two_ranks_spawned.py): a compiled function with functional all_reduce
(sum, avg), all_gather_into_tensor and reduce_scatter_tensor is one program that runs them
(Note [Collectives in programs] in csrc/compile/ProgramCollectives.cpp); its values equal eager's and the
sums over both ranks' inputs computed on the CPU. A compiled tensor-parallel training step with
collectives in its forward and backward graphs equals eager. IN_PROGRAMS=0 in the environment: the graph is
cut at its collectives instead (the same values). Exit 0 when every rank's checks hold."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions"))
from _two_ranks_spawned import run  # noqa: E402


def inputs(rank):
    import torch
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(4, 8, generator=generator), torch.randn(8, 8, generator=generator)


def body(rank):
    import tempfile
    import torch
    import torch_neuronx
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch._dynamo.utils import counters
    torch_neuronx.metrics.set_enabled(True)
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="programs_")  # this rank's: all compiled here
    group = dist.group.WORLD

    def f(x, w):
        h = funcol.all_reduce(torch.relu(x @ w), "sum", group)  # a row-parallel layer's output
        gathered = funcol.all_gather_single(h * 2, 0, group)
        scattered = funcol.reduce_scatter_single(gathered + 1, "sum", 0, group)
        y = torch.sigmoid(h) * 2 + x.sum()
        return funcol.all_reduce(y, "avg", group), h.t(), gathered, scattered

    x, w = inputs(rank)
    eager = [t.cpu() for t in f(x.to("neuron"), w.to("neuron"))]
    compiled = torch.compile(f, backend="neuron")
    for _ in range(3):  # the arena and the works' registry are reused call after call
        got = [t.cpu() for t in compiled(x.to("neuron"), w.to("neuron"))]
        for name, a, b in zip(("avg", "view", "gathered", "scattered"), got, eager):
            torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{name}: {m}")
    # the CPU's sums over both ranks' inputs
    parts = [torch.relu(a @ b) for a, b in map(inputs, range(2))]
    h = parts[0] + parts[1]
    torch.testing.assert_close(got[1], h.t())
    ys = [torch.sigmoid(h) * 2 + inputs(r)[0].sum() for r in range(2)]
    torch.testing.assert_close(got[0], (ys[0] + ys[1]) / 2)
    torch.testing.assert_close(got[2], torch.cat([h * 2, h * 2]))
    torch.testing.assert_close(got[3], (torch.cat([h * 2, h * 2]) + 1)[rank * 4:(rank + 1) * 4] * 2)
    programs = torch_neuronx.metrics.get_counter_value("CompilationCache.TotalCompilations")
    in_programs = os.environ.get("NEURON_SIM_COLLECTIVES_IN_PROGRAMS", "1") != "0"
    assert counters["neuron"]["compiled_graphs"] == 1, dict(counters["neuron"])
    # one program, or one per stretch between the collectives when the graph is cut at them
    assert programs == 1 if in_programs else programs > 1, f"{programs} programs, collectives in programs: {in_programs}"
    training_step(rank)
    return "ok"


def training_step(rank):
    """A compiled tensor-parallel training step (DTensor: colwise then rowwise after a replicated
    layer): its forward graph all-reduces the rowwise output, its backward graph the gradient
    flowing into the replicated layer; both are programs with their collectives. Loss and
    gradients equal eager's."""
    import torch
    import torch_neuronx
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("neuron", (2,))

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 8)).to("neuron")
        return parallelize_module(model, mesh, {"2": ColwiseParallel(), "4": RowwiseParallel()})

    def step(model, x):
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss.detach(), model[0].weight.grad.detach().clone(), model[2].weight.grad.to_local().detach().clone()

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)).to("neuron")
    eager = step(make(), x)
    model = make()
    compiled = torch.compile(step, backend="neuron")
    for _ in range(2):
        for parameter in model.parameters():
            parameter.grad = None
        got = compiled(model, x)
    for name, a, b in zip(("loss", "replicated layer's gradient", "sharded gradient"), got, eager):
        torch.testing.assert_close(a.cpu(), b.cpu(), msg=lambda m, name=name: f"{name}: {m}")
    records = {r.graph_name.rsplit("_", 2)[-2]: r.has_collectives for r in torch_neuronx.get_dynamo_metrics()}
    assert records.get("forward") and records.get("backward"), records


if __name__ == "__main__":
    env = {key: os.environ[key] for key in ("NEURON_LAUNCH_BLOCKING", "NEURON_SIM_COLLECTIVES_IN_PROGRAMS",
                                            "NEURON_SIM_SHARED_CORES") if key in os.environ}
    run(body, timeout=240, env={"PG_TIMEOUT": "60", "OMP_NUM_THREADS": "1", **env})
