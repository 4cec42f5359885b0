"""Review 27, finding 2 (fixed: NeuronProgramCode keeps has_collectives). 2 ranks, run twice with the same R27_WARM dir (program cache + AOTAutograd cache): the
second run's compiled graph (one program with an all_reduce) comes from AOTAutograd's cache; its
dynamo-metrics record must still say has_collectives=True. Exit 0 when every record says so."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions"))
from _two_ranks_spawned import run


def body(rank):
    import torch, torch_neuronx
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch_neuron_sim import dynamo_metrics
    g = dist.group.WORLD

    def f(x):
        return funcol.all_reduce(x * 2, "sum", g) + 1

    y = torch.compile(f, backend="neuron")(torch.ones(4, device="neuron")).cpu()
    assert torch.equal(y, torch.full((4,), 5.0)), y
    recs = [(m.graph_name, m.has_collectives, m.cache_hit) for m in dynamo_metrics.get_dynamo_metrics()]
    assert recs and all(r[1] for r in recs), f"records (name, has_collectives, cache_hit): {recs}"
    return f"records {recs}"


if __name__ == "__main__":
    if "R27_WARM" not in os.environ:  # a cold run, then a warm one from its caches
        import subprocess, tempfile
        warm = tempfile.mkdtemp(prefix="warm_metrics_")
        codes = [subprocess.run([sys.executable, __file__], env=dict(os.environ, R27_WARM=warm)).returncode
                 for _ in range(2)]
        sys.exit(max(codes))
    d = os.environ["R27_WARM"]
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": d + "/neff", "TORCHINDUCTOR_CACHE_DIR": d + "/inductor"}
    run(body, timeout=120, env={"PG_TIMEOUT": "30", "OMP_NUM_THREADS": "1", **env})
