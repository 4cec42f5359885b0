"""neuron-migrate compile census: graphs compiled and recompiles with Dynamo's reasons over
the workload's shape distribution, through public Dynamo surfaces. torch.compile(backend=
"neuron") is not built yet, so the mechanism is tested with the "eager" backend."""
import os


from migrate_helpers import DATA, run, tiny_llama_folder, write
from neuron_migrate.compiles import backend_available


def _workload(model_lines, backend="eager"):
    return f"""
[workload]
name = "compiles"
[model]
{model_lines}
[inputs]
prompt_lengths = [5, 9]
batch_sizes = [1]
max_new_tokens = 2
vocab_limit = 64
[serve]
requests = 1
[compile]
backend = "{backend}"
[gates]
compiles_max = 1
"""


def test_hf_model_on_cpu_one_graph_per_shape(tmp_path):
    folder = tiny_llama_folder(tmp_path)
    path = write(tmp_path, "w.toml", _workload(f'path = "{folder}"\nrandom_init = true'))
    status, report = run(path, str(tmp_path / "r"), "--on", "cpu", "--baseline", "cpu")
    compiles = report["sections"]["compiles"]
    assert compiles["available"] and compiles["errors"] == []
    assert compiles["graphs_compiled"] == 2 and compiles["recompiles"] == 1
    reason = next(r for r in compiles["recompile_reasons"] if r["pass"] == "cold")
    assert reason["request"] == "b1xL9" and "size mismatch at index 1. expected 5, actual 9" in reason["reason"]
    assert [g["request"] for g in compiles["graphs"] if g["pass"] == "cold"] == ["b1xL5", "b1xL9"]
    assert set(compiles["passes"]) == {"cold", "warm", "steady"}
    assert not any(g["pass"] == "steady" for g in compiles["graphs"])  # steady pass: no compile
    verdict = {v["condition"]: v for v in report["sections"]["verdict"]}
    assert verdict["compiles_max"]["verdict"] == "no-go" and status == 3
    plan = next(p for p in compiles["buckets"]["plans"] if p["plan"].startswith("1 bucket"))
    assert plan["buckets"] == [9] and plan["graphs"] == 1 and plan["padded_tokens"] == 4


def test_factory_model_on_neuron(tmp_path):
    factory = os.path.join(DATA, "custom_models.py") + ":filtered"
    path = write(tmp_path, "w.toml", _workload(f'factory = "{factory}"'))
    _, report = run(path, str(tmp_path / "r"))
    compiles = report["sections"]["compiles"]
    assert compiles["graphs_compiled"] == 2 and compiles["recompiles"] == 1, compiles["errors"]
    assert "not a Trainium prediction" in compiles["timing"]
    assert compiles["neuron_dynamo_metrics"] == []  # no neuron backend: nothing recorded


def test_unknown_backend_is_reported_not_raised():
    backend, problem = backend_available("no-such-backend")
    assert backend is None and "no-such-backend" in problem


def test_training_step_compile_on_cpu():
    import torch

    import tiny_models
    from neuron_migrate.compiles import measure
    from neuron_migrate.loading import LoadedModel, Request
    model = tiny_models.build("llama").train()
    loaded = LoadedModel(model, None, model.config, True)
    batch = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    result = measure(loaded, "cpu", [Request(batch, "b2xL12")], "aot_eager", training=True)
    assert result["compiled"] == "training step (forward and backward)" and result["errors"] == []
    assert result["graphs_compiled"] == 1 and result["recompiles"] == 0
    assert model.model.embed_tokens.weight.grad is None  # gradients cleared after each step


def test_dynamo_metrics_are_those_of_the_measurement_only(tmp_path):
    """Records of graphs compiled before the measurement (earlier in the process) are not
    reported as the workload's."""
    import torch
    import torch_neuronx

    torch.compile(lambda t: t * 2, backend="neuron")(torch.ones(3, device="neuron"))
    assert torch_neuronx.get_dynamo_metrics()
    factory = os.path.join(DATA, "custom_models.py") + ":filtered"
    path = write(tmp_path, "w.toml", _workload(f'factory = "{factory}"'))
    _, report = run(path, str(tmp_path / "r"))
    assert report["sections"]["compiles"]["neuron_dynamo_metrics"] == []
