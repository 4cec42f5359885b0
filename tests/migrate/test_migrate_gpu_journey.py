"""Issue 40: neuron-migrate against the team's own GPU. Device modules that initialise lazily
(CUDA raises before its first call) or lack functions (MPS) are used without crashing; the gates,
the cost and `compare` judge a simulated target on its predicted Trainium figures, never on the
simulator's host time; `compare` of a GPU report and a Neuron report prints the decision.

CI has no GPU: a fake module that behaves as torch.cuda does before initialisation stands in
for it (FakeCudaLike), and one end-to-end run measures the simulated device through such a
module, as a real (not simulated) device."""
import copy
import json
import os
import textwrap

import pytest
import torch

from conftest import run_python
from migrate_helpers import DEMO_MODEL, ROOT, FakeCudaLike, main, run, write
from neuron_migrate import compare as compare_module
from neuron_migrate import devices, figures, verdict
from neuron_migrate.workload import Gates, WorkloadError, load


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCudaLike()
    monkeypatch.setattr(torch, "cuda", fake)
    devices._LIMITS.clear()
    return fake


def test_every_device_call_initialises_a_lazy_module_first(fake_cuda):
    devices.check("cuda")
    assert fake_cuda.calls == ["init"]  # checking the device initialised it, as its first tensor would
    fake_cuda.initialised, fake_cuda.calls = False, []
    devices.reset_peak("cuda")  # was: RuntimeError: Invalid device argument (issue 40)
    assert fake_cuda.calls == ["init", "reset_peak_memory_stats", "reset_peak_memory_stats"]
    fake_cuda.peaks[1] = 2**20
    assert devices.peak_per_core("cuda") == [{"core": 1, "peak_bytes": 2**20, "total_bytes": 141 * 2**30}]
    assert devices.device_name("cuda") == "cuda: Fake H200, 2 visible device(s)"
    assert devices.memory_allocated("cuda:1") == 0
    devices.synchronize("cuda")
    state = devices.rng_state("cuda")
    devices.set_rng_state("cuda", state)
    assert set(state) == {"cpu", "device"} and devices.limits() == []
    with pytest.raises(devices.DeviceUnavailable, match=r"'cuda:2' is not available: 2 cuda device\(s\) visible"):
        devices.check("cuda:2")


def test_a_missing_function_leaves_its_figure_unmeasured_with_the_reason(monkeypatch):
    """torch.mps has no reset_peak_memory_stats, max_memory_allocated or get_device_properties."""
    fake = FakeCudaLike(missing=("reset_peak_memory_stats", "max_memory_allocated", "get_device_properties",
                                 "memory_allocated", "get_rng_state"))
    monkeypatch.setattr(torch, "mps", fake)
    devices._LIMITS.clear()
    devices.check("mps")
    devices.reset_peak("mps")
    assert devices.peak_per_core("mps") == [] and devices.memory_allocated("mps") is None
    assert devices.device_name("mps") == "mps: ?, 2 visible device(s)"
    assert set(devices.rng_state("mps")) == {"cpu"}
    reasons = {item["function"]: item["reason"] for item in devices.limits()}
    assert set(reasons) == {"reset_peak_memory_stats", "max_memory_allocated", "memory_allocated", "get_rng_state"}
    assert reasons["max_memory_allocated"] == "torch.mps has no max_memory_allocated(): peak memory per device not " \
                                              "measured on mps"


def test_a_device_that_fails_to_initialise_is_a_clear_device_error(monkeypatch):
    fake = FakeCudaLike()

    def broken():
        raise RuntimeError("CUDA driver initialization failed")
    fake.init = broken
    monkeypatch.setattr(torch, "cuda", fake)
    with pytest.raises(devices.DeviceUnavailable, match="did not initialise: CUDA driver initialization failed"):
        devices.check("cuda")


# ---- the workload: one file for both sides --------------------------------------------------

def test_compile_backend_and_prices_per_device(tmp_path):
    workload = load(write(tmp_path, "w.toml", """
[workload]
name = "w"
[model]
path = "m"
[inputs]
prompt_lengths = [4]
[compile]
backend = { neuron = "neuron", cuda = "inductor" }
mode = { cuda = "reduce-overhead" }
[cost]
price_per_hour = { trn2 = 40.0, cuda = { per_hour = 63.2, instance = "p5en.48xlarge", devices = 8 } }
tokens_per_month = 1e9
"""))
    assert workload.compile.backend_for("cuda") == "inductor" and workload.compile.mode_for("cuda") == "reduce-overhead"
    assert workload.compile.backend_for("neuron") == "neuron" and workload.compile.mode_for("neuron") is None
    assert workload.compile.backend_for("xpu") == "inductor"  # the default for a device not named
    assert workload.cost.price_per_hour == {"trn2": 40.0, "cuda": 63.2}
    assert workload.cost.instances["cuda"] == {"per_hour": 63.2, "instance": "p5en.48xlarge", "devices": 8}
    from neuron_migrate.cost import _device_price
    price, how = _device_price(workload, "cuda")
    assert price == pytest.approx(63.2 / 8) and "p5en.48xlarge" in how and "/ its 8 device(s)" in how
    price, how = _device_price(workload, "cpu")
    assert price is None and "add price_per_hour.cpu" in how
    assert load(write(tmp_path, "d.toml", "[workload]\nname = \"d\"\n[model]\npath = \"m\"\n[inputs]\n"
                                           "prompt_lengths = [4]\n")).compile.backend_for("neuron") == "neuron"


@pytest.mark.parametrize("text, message", [
    ('[compile]\nbackend = 3', "compile.backend: expected a string or a table, got 3"),
    ('[compile]\nbackend = { cuda = 1 }', "compile.backend.cuda: expected a string, got 1"),
    ('[cost]\nprice_per_hour = { cuda = { per_hour = 1.0, gpus = 8 } }', "cost.price_per_hour.cuda: expected a number or"),
    ('[cost]\nprice_per_hour = { cuda = { per_hour = 1.0, devices = 0 } }', "cost.price_per_hour.cuda.devices: expected a "
                                                                           "positive integer"),
    ('[cost]\ntokens_per_month = -1', "cost.tokens_per_month: expected a positive number"),
])
def test_bad_per_device_tables_are_named(tmp_path, text, message):
    head = '[workload]\nname = "w"\n[model]\npath = "m"\n[inputs]\nprompt_lengths = [4]\n'
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(write(tmp_path, "w.toml", head + text))


# ---- deciding figures: predicted on the simulator, never host time --------------------------

def _report(simulated, host_p95, predicted_p95, target="neuron"):
    level = {"concurrency": 1, "tokens_per_s": 1000.0 / host_p95, "error_rate": 0.0,
             "latency_ms": {"p50": host_p95, "p95": host_p95}, "ttft_ms": {"p95": host_p95 / 4},
             "latencies_ms": [host_p95]}
    if predicted_p95 is not None:
        level["predicted"] = {"tokens_per_s": 1000.0 / predicted_p95, "latency_ms": {"p50": predicted_p95,
                                                                                      "p95": predicted_p95},
                              "ttft_ms": {"p95": predicted_p95 / 4}, "latencies_ms": [predicted_p95]}
    price = 7.0 * level["tokens_per_s"] * 3600 / 1e6  # 7 USD per 1M tokens at the level's tokens/s
    return {"target": target, "baseline": "cpu", "target_simulated": simulated, "conditions": {"seed": 0},
            "sections": {"speed": {"target": {"levels": [level], "platform": "trn2",
                                              "predicted_label": "predicted (cost model v2, calibration error ±20%)"}},
                         "cost": {"currency": "USD", "running": {"target": {
                             "price_per_hour": price, "per_million_tokens": 7.0,
                             "predicted": {"per_million_tokens": 3.0}}}}}}


GATES = Gates(p95_latency_ms=500.0, ttft_p95_ms=1000.0, cost_per_million_tokens_max=5.0)


@pytest.mark.parametrize("host_p95, predicted_p95, expected", [(10.0, 900.0, "no-go"), (900.0, 10.0, "go")])
def test_a_simulated_target_is_gated_on_its_predicted_figures(host_p95, predicted_p95, expected):
    verdicts = {v["condition"]: v for v in verdict.decide(GATES, _report(True, host_p95, predicted_p95))}
    p95 = verdicts["p95_latency_ms"]
    assert (p95["verdict"], p95["measured"], p95["source"]) == (expected, predicted_p95, "predicted")
    assert "calibration error ±20%" in p95["label"]
    cost = verdicts["cost_per_million_tokens_max"]  # 3.0 predicted, never the 7.0 from host throughput
    assert (cost["verdict"], cost["measured"], cost["source"]) == ("go", 3.0, "predicted")


def test_no_host_figure_reaches_a_gate_when_the_prediction_is_missing():
    """The device clock off: the timed gates are not measured, never decided on host time."""
    verdicts = {v["condition"]: v for v in verdict.decide(GATES, _report(True, 10.0, None))}
    assert verdicts["p95_latency_ms"]["verdict"] == "not measured"
    assert verdicts["ttft_p95_ms"]["verdict"] == "not measured"


def test_a_real_device_is_gated_on_its_measured_figures():
    verdicts = {v["condition"]: v for v in verdict.decide(GATES, _report(False, 900.0, 10.0, target="cuda"))}
    assert (verdicts["p95_latency_ms"]["measured"], verdicts["p95_latency_ms"]["source"]) == (900.0, "measured")
    assert verdicts["cost_per_million_tokens_max"]["measured"] == 7.0


def test_compare_sets_measured_beside_predicted_and_host_only_beside_host():
    gpu = _report(False, 40.0, None, target="cuda")
    trn = _report(True, 300.0, 120.0)
    rows = {r["metric"]: r for r in compare_module.compare(gpu, trn)["metrics"]}
    p95 = rows["P95 latency ms at concurrency 1"]
    assert (p95["a"], p95["b"], p95["source_a"], p95["source_b"]) == (40.0, 120.0, "measured", "predicted")
    assert p95["error_band"] == pytest.approx(0.2)
    assert rows["cost per 1M tokens"]["b"] == 3.0  # predicted, not host
    assert not [name for name in rows if figures.HOST in name]  # host time is never set beside a device's
    both = {r["metric"]: r for r in compare_module.compare(trn, copy.deepcopy(trn))["metrics"]}
    host = both[f"P95 latency ms at concurrency 1 ({figures.HOST})"]
    assert (host["a"], host["b"], host["source_a"]) == (300.0, 300.0, figures.HOST)


def test_a_prediction_within_its_calibration_error_is_not_a_regression():
    a, b = _report(True, 100.0, 100.0), _report(True, 100.0, 125.0)  # +25% < 10% slack + 2 x 20% band
    result = compare_module.compare(a, b)
    assert "P95 latency ms at concurrency 1" not in result["regressions"]
    b = _report(True, 100.0, 160.0)
    assert "P95 latency ms at concurrency 1" in compare_module.compare(a, b)["regressions"]


def test_decision_and_break_even():
    gpu = _report(False, 40.0, None, target="cuda")
    trn = _report(True, 300.0, 120.0)
    trn["sections"]["cost"].update(one_time={"engineering": 1000.0, "engineering_hours": 10}, tokens_per_month=1e8)
    trn["sections"]["prediction"] = {"label": "predicted (cost model v2, calibration error ±20%)",
                                     "calibration_error": 0.2, "rows": [
                                         {"platform": "trn2", "tp": 1, "lnc": 2, "request_tokens_per_s": 40.0,
                                          "request_latency_ms": 200.0, "ttft_ms": 20.0,
                                          "per_million_output_tokens": 2.0, "price_key": "trn2"}]}
    d = compare_module.decision(gpu, trn)
    assert d["cost_per_million"]["measured"] == 7.0 and d["cost_per_million"]["predicted"] == 3.0
    assert d["cost_per_million"]["predicted_range"] == pytest.approx([2.5, 3.75])
    # (7 - 3) USD per 1M x 100M tokens = 400 USD a month against 1000 USD once
    assert d["break_even"]["months"] == pytest.approx(2.5)
    assert d["platforms"][0]["break_even"]["months"] == pytest.approx(1000 / 500)
    trn["sections"]["cost"]["tokens_per_month"] = None
    assert "tokens_per_month" in compare_module.decision(gpu, trn)["break_even"]["line"]
    assert compare_module.decision(gpu, copy.deepcopy(gpu)) is None  # two measured runs: no decision


# ---- end to end ----------------------------------------------------------------------------

FAKE_GPU_RUN = r"""
import json, sys
import torch, torch_neuronx
sys.path.insert(0, {test_dir!r})
from migrate_helpers import FakeCudaLike
real = torch.neuron


class MeasuredNeuron(FakeCudaLike):
    '''The simulated device seen as a real one: CUDA-like before init, no tracking of fallbacks.'''
    def __init__(self):
        super().__init__()
    def device_count(self):
        return 1
    def get_device_properties(self, index=0):
        self._ready("get_device_properties", index)
        return real.get_device_properties(index)
    def max_memory_allocated(self, index=0):
        self._ready("max_memory_allocated", index)
        return real.max_memory_allocated(index)
    def reset_peak_memory_stats(self, index=0):
        self._ready("reset_peak_memory_stats", index)
        real.reset_peak_memory_stats(index)
    def synchronize(self):
        self._ready("synchronize")
        real.synchronize()


fake = MeasuredNeuron()
torch.neuron = fake
torch_neuronx.is_simulated = lambda: False  # measured as a real device
del torch_neuronx.get_fallback_ops  # a TorchNeuron without op tracking: fallbacks predicted
from neuron_migrate.cli import main
status = main(["run", {workload!r}, "--on", "neuron", "--baseline", "cpu", "--out", {out!r}, "--no-progress"])
print(json.dumps({{"status": status, "calls": sorted(set(fake.calls))}}))
"""


def test_a_run_on_a_cuda_like_device_module_goes_end_to_end(tmp_path):
    workload = write(tmp_path, "w.toml", f"""
[workload]
name = "fake-gpu"
[model]
path = "{DEMO_MODEL}"
dtype = "bfloat16"
[inputs]
prompt_lengths = [12]
max_new_tokens = 4
[serve]
requests = 2
[compile]
enabled = false
[cost]
price_per_hour = {{ neuron = 4.0 }}
[gates]
p95_latency_ms = 1e9
""")
    out = str(tmp_path / "r")
    script = FAKE_GPU_RUN.format(test_dir=os.path.dirname(os.path.abspath(__file__)), workload=workload, out=out)
    result = run_python(textwrap.dedent(script), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == 0 and {"init", "reset_peak_memory_stats", "max_memory_allocated"} <= set(summary["calls"])
    with open(os.path.join(out, "report.json")) as handle:
        report = json.load(handle)
    assert report["target_simulated"] is False and report["status"] == "complete"
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    census = report["sections"]["census"]
    assert census["fallback_source"] == "predicted" and census["fallback_ops"]  # argmax, isin
    cost = report["sections"]["cost"]["running"]["target"]
    level = max(report["sections"]["speed"]["target"]["levels"], key=lambda l: l["tokens_per_s"])
    assert cost["per_million_tokens"] == pytest.approx(4.0 / 3600 / level["tokens_per_s"] * 1e6)
    gate = report["sections"]["verdict"][0]
    assert gate["source"] == "measured" and gate["verdict"] == "go"


def test_compare_of_a_gpu_report_and_a_neuron_report_prints_the_decision(tmp_path, capsys):
    """A measured run (the CPU here, standing in for the GPU; same workload file) against the
    simulated device's run: the decision table, the error band and the break-even line."""
    text = open(os.path.join(ROOT, "demo", "migrate", "workload.toml")).read()
    text = text.replace('model]\npath = "../model"', f'model]\npath = "{DEMO_MODEL}"')
    text = text.replace('script = "serve.py"', f'script = "{os.path.join(ROOT, "demo", "migrate", "serve.py")}"')
    text = text.replace("tp = [1, 2]", "tp = [1]").replace("concurrency = [1, 2]", "concurrency = [1]")
    workload = write(tmp_path, "w.toml", text.replace("requests = 4", "requests = 2"))
    status_gpu, gpu = run(workload, str(tmp_path / "gpu"), "--on", "cpu", "--baseline", "cpu")
    status_trn, trn = run(workload, str(tmp_path / "trn"), "--on", "neuron", "--baseline", "cpu")
    assert gpu["sections"]["compiles"]["backend"] == "inductor" and trn["sections"]["compiles"]["backend"] == "neuron"
    # what the measured run predicts of Trainium is what the neuron run finds: the same compile
    # problems (graphs, recompiles, graph breaks: Dynamo's, whatever the backend) and fallbacks
    for key in ("graphs_compiled", "recompiles", "graph_breaks"):
        assert gpu["sections"]["compiles"][key] == trn["sections"]["compiles"][key], key
    assert gpu["sections"]["census"]["fallback_source"] == "predicted"
    from neuron_migrate.census import same_ops
    assert same_ops(gpu["sections"]["census"]["fallback_ops"], trn["sections"]["census"]["fallback_ops"])
    capsys.readouterr()
    main(["compare", str(tmp_path / "gpu"), str(tmp_path / "trn")])
    out = " ".join(capsys.readouterr().out.split())
    assert "cpu measured vs Trainium predicted (error band ±" in out
    assert "break-even:" in out and "one-time cost: 1600 USD" in out
    assert "Trainium per platform and TP degree" in out
    d = compare_module.compare(gpu, trn)["decision"]
    assert d["levels"][0]["measured"]["tokens_per_s"] == gpu["sections"]["speed"]["target"]["levels"][0]["tokens_per_s"]
    predicted = trn["sections"]["speed"]["target"]["levels"][0]["predicted"]
    assert d["levels"][0]["predicted"]["tokens_per_s"] == predicted["tokens_per_s"]  # never the host's
    assert d["break_even"]["months"] is not None or "never" in d["break_even"]["line"]
    # issue 41 §1: the run's dry run serves the workload's concurrency with continuous batching,
    # set beside the measured run at the same concurrency
    served = trn["sections"]["prediction"]["rows"][0]["serving_levels"]
    assert [level["concurrency"] for level in served] == [1]
    assert d["served"][0]["tokens_per_s"] == served[0]["tokens_per_s"]
    assert d["served"][0]["measured_tokens_per_s"] == d["levels"][0]["measured"]["tokens_per_s"]
    assert "served with continuous batching at the workload's concurrency" in out
