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


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("[gates]", "batch_sizes = []\n[gates]"),
     "inputs.batch_sizes: expected a non-empty list of positive integers, got []"),
    (GOOD.replace("[gates]", "max_new_tokens = 0\n[gates]"),
     "inputs.max_new_tokens: expected a positive integer, got 0"),
    (GOOD.replace("[gates]", "vocab_limit = 0\n[gates]"), "inputs.vocab_limit: expected a positive integer, got 0"),
    (GOOD + "[serve]\nrequests = 0\n", "serve.requests: expected a positive integer, got 0"),
    (GOOD + "[serve]\ntimeout_s = -1\n", "serve.timeout_s: expected a positive number, got -1.0"),
    (GOOD + "[train]\nbatch_size = 0\n", "train.batch_size: expected a positive integer, got 0"),
    (GOOD + "[train]\nseq_len = 1\n", "train.seq_len: expected at least 2 tokens"),
    (GOOD + "[train]\nlr = 0\n", "train.lr: expected a positive number, got 0.0"),
    (GOOD + "[fit]\ntp = [0]\n", "fit.tp: expected a non-empty list of positive integers, got [0]"),
    (GOOD + "[fit]\nplatforms = ['trn9']\n", "fit.platforms: unknown platform 'trn9'"),
    (GOOD + "[fit]\nplatforms = ['trn1']\nlnc = [2]\n", "fit.lnc: no platform offers LNC 2 (trn1 offers 1)"),
    (GOOD + "[fit]\nheadroom = 1.5\n", "fit.headroom: expected a fraction of the HBM kept free"),
    (GOOD + "[cost]\nprice_per_hour = { neuron = -1.0 }\n",
     "cost.price_per_hour.neuron: expected a price of zero or more"),
    (GOOD + "[cost]\ntraining_run_steps = 0\n", "cost.training_run_steps: expected a positive integer, got 0"),
    (GOOD.replace('name = "w"', 'name = "w"\nscript = ["a.py", 1]'), "workload.script[]: expected a string, got 1"),
    (GOOD.replace('path = "m"', 'path = "m"\nfactory = "f.py:build"'),
     "model.factory: expected model.path or model.factory, not both"),
    (GOOD + "[serve]\nengine = 'tgi'\n", "serve.engine: expected one of 'generate', 'vllm', got 'tgi'"),
])
def test_out_of_range_values_are_refused_when_the_file_is_read(tmp_path, text, message):
    # before: these loaded, then failed inside a section (ZeroDivisionError, TypeError) or gave nonsense
    with pytest.raises(WorkloadError) as error:
        load(write(tmp_path, "w.toml", text))
    assert str(error.value).startswith(message)


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


@pytest.mark.parametrize("device, message", [
    ("gpu", "device 'gpu' is not a device name (expected one of cuda, xpu, mps, cpu, neuron, optionally with :index)"),
    ("neuron:99", "device 'neuron:99' is not available:"),
])
def test_unknown_device_or_core_exits_2(tmp_path, capsys, device, message):
    path = write(tmp_path, "w.toml", GOOD)
    assert main(["run", path, "--on", device, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert message in " ".join(capsys.readouterr().out.split())


def test_vllm_engine_refused_at_start_where_it_cannot_run(tmp_path, capsys):
    """[serve] engine = "vllm" (Note [Serving engines]): a run that cannot start vLLM says so before
    measuring anything (tests/vllm_serving runs the engine itself where vLLM is installed)."""
    import importlib.util
    from neuron_migrate import vllm_serve
    workload = load(write(tmp_path, "w.toml", GOOD + "[serve]\nengine = 'vllm'\n"))
    assert workload.serve.engine == "vllm" and workload.conditions()["serve"]["engine"] == "vllm"
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed in this Python: the refusal for a missing vLLM cannot be shown")
    with pytest.raises(vllm_serve.EngineError, match="make vllm-venv"):
        vllm_serve.check(workload)
    path = write(tmp_path, "w.toml", GOOD + "[serve]\nengine = 'vllm'\n")
    assert main(["run", path, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    out = capsys.readouterr().out
    assert "serving engine error" in out and "vLLM is not installed" in out
    assert not (tmp_path / "r").exists()  # nothing measured


def test_vllm_engine_needs_a_model_folder(tmp_path):
    from neuron_migrate import vllm_serve
    text = GOOD.replace('path = "m"', 'factory = "f.py:build"') + "[serve]\nengine = 'vllm'\n"
    with pytest.raises(vllm_serve.EngineError, match="needs model.path"):
        vllm_serve.check(load(write(tmp_path, "w.toml", text)))


def test_vllm_kv_cache_size_falls_back_to_vllms_where_the_config_has_no_attention_shape(tmp_path):
    """review 42 #5: a config without num_attention_heads (a state-space model) made the level's KV
    cache size raise AttributeError before vLLM started; vLLM sizes the cache itself there."""
    import json
    from neuron_migrate import vllm_serve
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 64,
                                                              "num_hidden_layers": 2, "vocab_size": 128}))
    workload = load(write(tmp_path, "w.toml", GOOD + "[serve]\nengine = 'vllm'\n"))
    assert vllm_serve._kv_cache_bytes(workload, 4) is None
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                              "num_attention_heads": 4, "num_key_value_heads": 2,
                                                              "num_hidden_layers": 2, "vocab_size": 128}))
    assert vllm_serve._kv_cache_bytes(workload, 4) == 64 << 20  # small: the 64 MiB floor


class _RefusingEngine:
    """vLLM's engine, as far as the closed loop uses it: refuses prompts of 3 tokens, serves the rest
    in two steps each."""

    def __init__(self):
        self.running = {}

    def add_request(self, request_id, prompt, params):
        if len(prompt["prompt_token_ids"]) == 3:
            raise ValueError("the prompt is longer than max_model_len")
        self.running[request_id] = 0

    def has_unfinished_requests(self):
        return bool(self.running)

    def step(self):
        import types
        outputs = []
        for request_id in list(self.running):
            self.running[request_id] += 1
            finished = self.running[request_id] == 2
            outputs.append(types.SimpleNamespace(request_id=request_id, finished=finished,
                                                 outputs=[types.SimpleNamespace(token_ids=[1] * self.running[request_id])]))
            if finished:
                del self.running[request_id]
        return outputs


def test_vllm_closed_loop_serves_the_others_when_vllm_refuses_a_request():
    """review 42 #4: a request vLLM's add_request refused ended the whole level with a traceback;
    it is now that request's error and the level goes on."""
    from neuron_migrate import vllm_serve
    queue = [("a", [1, 2]), ("bad", [1, 2, 3]), ("b", [4, 5]), ("c", [6, 7])]
    times = vllm_serve._closed_loop(_RefusingEngine(), None, queue, 2, "timed-")
    assert len(times) == 4
    errors = [t for t in times.values() if "error" in t]
    assert [t["label"] for t in errors] == ["bad"] and "max_model_len" in errors[0]["error"]
    served = [t for t in times.values() if "error" not in t]
    assert all(t["tokens"] == 2 and "end" in t and "first" in t for t in served)


def test_vllm_predicted_says_how_many_timed_requests_the_clock_report_lists():
    """review 42 #3: the serving clock's report lists its latest RECENT requests; a level with more
    timed requests has its percentiles of fewer, and the result says of how many."""
    from neuron_migrate import vllm_serve
    report = {"summary": {"timeline_ms": 100.0, "output_tokens": 40, "model_ms": 10.0},
              "requests": [{"id": f"timed-{i}-x", "latency_ms": 5.0, "ttft_ms": 1.0, "tpot_ms": 0.5}
                           for i in range(2, 4)]}
    predicted = vllm_serve._predicted(None, report, [f"timed-{i}-" for i in range(4)])
    assert predicted["requests_counted"] == 2 and predicted["requests_timed"] == 4
    assert predicted["tokens_per_s"] == 400.0 and predicted["latency_ms"]["p50"] == 5.0
