"""neuron-migrate: cost from measured throughput and the team's prices; verdict per stop
condition. Synthetic measurements, so the arithmetic is checked exactly."""
import pytest

from migrate_helpers import write
from neuron_migrate.cost import estimate
from neuron_migrate.verdict import decide
from neuron_migrate.workload import load

WORKLOAD = """
[workload]
name = "c"
[model]
path = "m"
[inputs]
prompt_lengths = [4]
[cost]
currency = "EUR"
price_per_hour = { neuron = 7.2 }
engineering_hours = 3
engineering_rate_per_hour = 100
training_run_steps = 3600
[gates]
p95_latency_ms = 100
greedy_agreement_min = 0.95
compiles_max = 4
cost_per_million_tokens_max = 1.0
"""


def _speed(tokens_per_s_by_level, p95):
    return {"target": {"levels": [{"concurrency": c, "tokens_per_s": t, "latency_ms": {"p95": p95},
                                   "ttft_ms": {"p95": None}, "error_rate": 0.0}
                                  for c, t in tokens_per_s_by_level.items()]}}


def test_cost_uses_best_throughput_and_no_built_in_prices(tmp_path):
    workload = load(write(tmp_path, "w.toml", WORKLOAD))
    result = estimate(workload, {"target": "neuron", "baseline": "cpu"}, _speed({1: 1000.0, 4: 2000.0}, 50),
                      {"target": {"time_per_step_s": 0.5}}, {"warmup_cold_s": 360.0}, simulated=False)
    target = result["running"]["target"]  # a real Trainium device: measured throughput is priced
    assert target["at_concurrency"] == 4
    assert target["per_million_tokens"] == pytest.approx(7.2 / 3600 / 2000 * 1e6)  # 1.0 EUR
    assert target["per_training_run"] == pytest.approx(0.5 * 3600 / 3600 * 7.2)
    assert result["prices_missing_for"] == ["cpu"] and "baseline" not in result["running"]
    assert result["one_time"] == {"engineering": 300.0, "engineering_hours": 3.0, "compile_warmup": pytest.approx(0.72)}
    assert result["currency"] == "EUR" and "measured" in result["note"]
    assert "price_per_hour.cpu" in result["missing_price_notes"]["baseline"]  # the key to add is named


def test_verdict_go_no_go_and_not_measured(tmp_path):
    workload = load(write(tmp_path, "w.toml", WORKLOAD))
    report = {"sections": {"speed": _speed({1: 10.0, 2: 12.0}, 150.0),
                           "quality": {"greedy_agreement": 0.97},
                           "cost": {"running": {"target": {"per_million_tokens": 1.0}}}}}
    verdicts = {v["condition"]: v for v in decide(workload.gates, report)}
    assert verdicts["p95_latency_ms"]["verdict"] == "no-go" and verdicts["p95_latency_ms"]["measured"] == 150.0
    assert verdicts["greedy_agreement_min"]["verdict"] == "go" and verdicts["greedy_agreement_min"]["comparison"] == ">="
    assert verdicts["compiles_max"]["verdict"] == "not measured"
    assert verdicts["cost_per_million_tokens_max"]["verdict"] == "go"  # equal to the limit
    assert set(verdicts) == {"p95_latency_ms", "greedy_agreement_min", "compiles_max", "cost_per_million_tokens_max"}
