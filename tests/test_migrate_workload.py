"""neuron-migrate: the workload file is validated with errors that name the field."""
import pytest

from migrate_helpers import main, write
from neuron_migrate.workload import WorkloadError, load

GOOD = """
[workload]
name = "w"
[model]
path = "m"
dtype = "bfloat16"
[inputs]
prompt_lengths = [4, 8]
[gates]
p95_latency_ms = 100
"""


def test_valid_file_loads_with_defaults(tmp_path):
    workload = load(write(tmp_path, "w.toml", GOOD))
    assert workload.name == "w" and workload.task == "generate"
    assert workload.model.dtype == "bfloat16" and workload.inputs.prompt_lengths == [4, 8]
    assert workload.gates.p95_latency_ms == 100.0 and workload.gates.compiles_max is None
    assert workload.resolve("m") == str(tmp_path / "m")
    assert workload.conditions()["model"]["dtype"] == "bfloat16"


@pytest.mark.parametrize("text, field, expected", [
    ("[workload]\nname='w'\n[inputs]\nprompt_lengths=[4]\n", "model.path", "config.json"),
    ("[workload]\n[model]\npath='m'\n[inputs]\nprompt_lengths=[4]\n", "workload.name", "a string"),
    (GOOD.replace('dtype = "bfloat16"', 'dtype = "float8"'), "model.dtype", "float32, bfloat16, float16"),
    (GOOD.replace("prompt_lengths = [4, 8]", 'prompt_lengths = "4, 8"'), "inputs.prompt_lengths", "a list"),
    (GOOD.replace("prompt_lengths = [4, 8]", 'prompt_lengths = [4, "8"]'), "inputs.prompt_lengths[]", "an integer"),
    (GOOD.replace("p95_latency_ms = 100", "p95_latency = 100"), "gates.p95_latency", "unknown field"),
    (GOOD + "[train]\nsteps = 4\ncheckpoint_at = 4\n", "train.checkpoint_at", "0 < checkpoint_at < steps"),
    (GOOD + "[cost]\nprice_per_hour = { neuron = 'cheap' }\n", "cost.price_per_hour.neuron", "a number"),
    (GOOD.replace("[gates]", "[gate]"), "[gate]", "unknown table"),
    (GOOD.replace('name = "w"', 'name = "w"\ntask = "serve"'), "workload.task", "generate, train"),
])
def test_bad_field_is_named_with_expected_form(tmp_path, text, field, expected):
    with pytest.raises(WorkloadError) as error:
        load(write(tmp_path, "w.toml", text))
    assert field in str(error.value) and expected in str(error.value)


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match="not valid TOML"):
        load(write(tmp_path, "w.toml", "[workload\nname="))
    with pytest.raises(WorkloadError, match="cannot read"):
        load(str(tmp_path / "absent.toml"))


def test_run_with_bad_workload_exits_2_with_the_message(tmp_path, capsys):
    path = write(tmp_path, "w.toml", GOOD.replace('dtype = "bfloat16"', "dtype = 16"))
    assert main(["run", path, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "model.dtype: expected a string, got 16" in capsys.readouterr().out


def test_unavailable_device_exits_2(tmp_path, capsys):
    path = write(tmp_path, "w.toml", GOOD)
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA: the unavailable-device path cannot be shown with it")
    assert main(["run", path, "--baseline", "cuda", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "device 'cuda' is not available" in capsys.readouterr().out
