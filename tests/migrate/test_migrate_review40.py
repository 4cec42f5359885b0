"""The review of issue 40's change (neuron-migrate against the team's GPU), one test per finding:
fallback predictions for in-place, composite and host-side ops; gates, prices and rows a
simulated run leaves out by design; old reports; the per-platform break-even; Trainium price
tables; device limits of an earlier run."""
import copy

import pytest
import torch
import torch_neuronx

from migrate_helpers import DEMO_MODEL, main, write
from neuron_migrate import compare as compare_module
from neuron_migrate import devices, verdict
from neuron_migrate.census import OpCensus, predicted_fallbacks, same_ops
from neuron_migrate.workload import Gates, WorkloadError, load


def _predicted_and_measured(step, census_device="cpu"):
    """The prediction from a census on `census_device` (the CPU stands in for a GPU box), and
    what torch_neuronx.get_fallback_ops() measures of the same step on neuron."""
    with OpCensus() as mode:
        step(census_device)
    predicted = [entry["op"] for entry in predicted_fallbacks(mode.summary())]
    torch_neuronx.clear_op_tracking()
    step("neuron")
    return predicted, torch_neuronx.get_fallback_ops()


@pytest.mark.parametrize("name, step", [
    ("exp_", lambda d: torch.ones(4, device=d).exp_()),  # structured in-place: its out= kernel, native
    ("sqrt_", lambda d: torch.ones(4, device=d).sqrt_()),
    ("clamp_", lambda d: torch.ones(4, device=d).clamp_(0, 1)),
    ("cumsum_", lambda d: torch.ones(4, device=d).cumsum_(0)),
    ("sort", lambda d: torch.arange(4.0, device=d).sort()),  # composite outer calls: the inner op falls back
    ("randn", lambda d: torch.randn(4, device=d)),
    ("rand", lambda d: torch.rand(4, device=d)),
    ("randint", lambda d: torch.randint(0, 5, (4,), device=d)),
])
def test_fallbacks_predicted_for_in_place_and_composite_ops(name, step):
    predicted, measured = _predicted_and_measured(step)
    assert same_ops(predicted, measured), (name, predicted, measured)


def test_host_side_ops_of_a_device_run_are_not_predicted_fallbacks():
    torch_neuronx.clear_op_tracking()
    with OpCensus() as mode:
        x = torch.arange(4.0, device="neuron")
        (x * 2).cpu().cumprod(0)  # post-processing on the host
    assert predicted_fallbacks(mode.summary()) == [] == torch_neuronx.get_fallback_ops()


def _simulated(error_rate=0.0, price=1.0, predicted=True):
    level = {"concurrency": 1, "tokens_per_s": 100.0, "error_rate": error_rate,
             "latency_ms": {"p50": 10.0, "p95": 10.0}, "ttft_ms": {"p95": 2.0}, "latencies_ms": [10.0]}
    if predicted:
        level["predicted"] = {"tokens_per_s": 20.0, "latency_ms": {"p50": 50.0, "p95": 50.0},
                              "ttft_ms": {"p95": 5.0}, "latencies_ms": [50.0]}
    return {"target": "neuron", "baseline": "cpu", "target_simulated": True,
            "conditions": {"seed": 0, "compile": {"enabled": True, "backend": None}},
            "sections": {"speed": {"target": {"levels": [level], "platform": "trn2",
                                              "predicted_label": "predicted (cost model v2, calibration error ±10%)"}},
                         "training": {"time_per_step_s": 0.5},
                         "cost": {"currency": "USD", "running": {"target": {
                             "device": "neuron", "price_per_hour": None, "figures": "predicted",
                             "predicted": {"price_per_hour": price, "price_key": "neuron",
                                           "per_million_tokens": price / 64 / 3600 / 20.0 * 1e6}}}}}}


def test_a_measured_error_rate_is_gated_when_the_device_clock_is_off():
    verdicts = {v["condition"]: v for v in verdict.decide(Gates(error_rate_max=0.0),
                                                          _simulated(error_rate=0.5, predicted=False))}
    assert (verdicts["error_rate_max"]["verdict"], verdicts["error_rate_max"]["measured"]) == ("no-go", 0.5)


def test_a_new_trainium_price_is_a_change_not_a_cost_regression():
    result = compare_module.compare(_simulated(price=1.0), _simulated(price=2.0))
    assert result["prices"] == [("price_per_hour.neuron (target, predicted)", 1.0, 2.0)]
    row = next(r for r in result["metrics"] if r["metric"] == "cost per 1M tokens")
    assert row["b"] == pytest.approx(2 * row["a"]) and not row["regression"] and row["note"] == "prices changed"


def test_a_figure_left_out_by_design_is_not_a_regression():
    gpu = copy.deepcopy(_simulated())
    gpu.update(target="cuda", target_simulated=False)
    gpu["sections"]["training"] = {"time_per_step_s": 0.05}
    rows = {r["metric"]: r for r in compare_module.compare(gpu, _simulated())["metrics"]}
    step = rows["time per training step (s)"]
    assert (step["a"], step["b"], step["source_b"], step["regression"]) == (0.05, None, "not predicted", False)


@pytest.mark.parametrize("old_compile", [{"enabled": True, "backend": "neuron"},
                                         {"enabled": True, "backend": {"neuron": "neuron"}}])
def test_reports_that_compile_alike_are_compared(old_compile):
    """A report made before per-device tables ("backend": "neuron", the old default) and one made
    with the new default compile alike on neuron: compared, not refused."""
    old = _simulated()
    old["conditions"]["compile"] = old_compile
    assert not compare_module.compare(old, _simulated())["refused"]
    gpu = copy.deepcopy(_simulated())
    gpu.update(target="cuda", target_simulated=False)
    assert not compare_module.compare(gpu, _simulated())["refused"]  # one file: inductor on cuda, neuron on neuron
    gpu["conditions"]["compile"] = {"enabled": True, "backend": {"cuda": "eager"}}
    refused = compare_module.compare(gpu, _simulated())
    assert refused["refused"] and refused["condition_changes"][0][0] == "compile.backend.cuda"


def test_the_per_platform_break_even_uses_the_measured_cost_at_concurrency_1():
    def level(c, tokens_per_s):
        return {"concurrency": c, "tokens_per_s": tokens_per_s, "error_rate": 0.0,
                "latency_ms": {"p50": 1.0, "p95": 1.0}, "ttft_ms": {"p95": 1.0}, "latencies_ms": [1.0]}
    price = 3.6  # per hour: 1 USD per 1M tokens at 1000 tokens/s
    gpu = {"target": "cuda", "baseline": "cpu", "target_simulated": False, "conditions": {},
           "sections": {"speed": {"target": {"levels": [level(1, 100.0), level(4, 400.0)]}},
                        "cost": {"currency": "USD", "running": {"target": {
                            "price_per_hour": price, "per_million_tokens": price / 3600 / 400.0 * 1e6}}}}}
    trn = _simulated()
    trn["sections"]["cost"].update(one_time={"engineering": 1000.0}, tokens_per_month=1e8)
    trn["sections"]["prediction"] = {"label": "predicted", "rows": [
        {"platform": "trn2", "tp": 1, "lnc": 2, "per_million_output_tokens": 5.0}]}
    d = compare_module.decision(gpu, trn)
    assert d["measured_cost_at_concurrency_1"] == pytest.approx(10.0)  # batch 1 beside batch 1
    assert d["platforms"][0]["break_even"]["months"] == pytest.approx(1000 / ((10.0 - 5.0) * 100))


def test_a_table_for_a_trainium_price_is_refused(tmp_path):
    head = '[workload]\nname = "w"\n[model]\npath = "m"\n[inputs]\nprompt_lengths = [4]\n'
    with pytest.raises(WorkloadError, match=r"cost.price_per_hour.trn2: a Trainium price is a number"):
        load(write(tmp_path, "w.toml", head + '[cost]\nprice_per_hour = { trn2 = { per_hour = 2.2, devices = 1 } }'))


def test_the_device_limits_of_an_earlier_run_are_forgotten(tmp_path, capsys):
    devices._LIMITS[("mps", "max_memory_allocated")] = "left by an earlier run"
    path = write(tmp_path, "w.toml", f'[workload]\nname = "w"\n[model]\npath = "{DEMO_MODEL}"\n[inputs]\n'
                                     'prompt_lengths = [4]\n')
    assert main(["run", path, "--on", "neuron:99", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert devices.limits() == []
