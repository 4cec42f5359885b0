"""neuron-migrate run on the simulated device: predicted Trainium figures beside the host timings,
read from torch_neuronx.device_time() around each request; the dry run's table when the workload
asks for it; compare on reports with and without these fields."""
import copy
import json
import os

import pytest
import torch_neuronx

from migrate_helpers import main, run, tiny_llama_folder, write
from neuron_migrate.compare import compare

WORKLOAD = """
[workload]
name = "predicted"
[model]
path = "{model}"
random_init = true
[inputs]
prompt_lengths = [6, 10]
max_new_tokens = 4
vocab_limit = 64
[serve]
requests = 3
concurrency = [1, 2]
[compile]
enabled = false
[predict]
tp = [1, 3]
[cost]
price_per_hour = {{ trn2 = 40.0, neuron = 1.0, cpu = 0.5 }}
"""


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """A run whose every torch_neuronx.device_time() reading is recorded, in order."""
    folder = tmp_path_factory.mktemp("predicted")
    path = write(folder, "w.toml", WORKLOAD.format(model=tiny_llama_folder(folder)))
    readings, original = [], torch_neuronx.device_time
    patch = pytest.MonkeyPatch()

    def recorded(device=None):
        readings.append(original(device))
        return readings[-1]
    patch.setattr(torch_neuronx, "device_time", recorded)
    try:
        status, report = run(path, str(folder / "report"))
    finally:
        patch.undo()
    return status, report, readings, folder / "report"


def test_each_requests_predicted_time_is_its_device_time_delta(predicted):
    _, report, readings, _ = predicted
    target = report["sections"]["speed"]["target"]
    assert target["predicted_label"].startswith("predicted (cost model ")
    assert target["platform"] == "trn2" and target["lnc"] == 2
    level = target["levels"][0]
    assert level["concurrency"] == 1
    # concurrency 1 reads, after the clock's probe: the level's start, each request's start, first
    # token and end in turn, the level's end
    start = 1
    requests = level["predicted"]["requests"]
    for index, request in enumerate(requests):
        begin, first, end = readings[start + 1 + 3 * index:start + 4 + 3 * index]
        assert request["latency_ms"] == end - begin and request["ttft_ms"] == first - begin
        assert request["per_token_ms"] == pytest.approx((end - first) / 3)
    span = readings[start + 1 + 3 * len(requests)] - readings[start]
    assert level["predicted"]["device_span_ms"] == span
    assert level["predicted"]["tokens_per_s"] == pytest.approx(level["tokens"] / span * 1000)
    assert sum(r["latency_ms"] for r in requests) == pytest.approx(span)  # nothing else ran on the device
    p = level["predicted"]
    assert 0 < p["ttft_ms"]["p50"] < p["latency_ms"]["p50"] <= p["latency_ms"]["p95"]
    assert p["latencies_ms"] != level["latencies_ms"]  # predicted, not the host's
    assert 0 < p["mfu"] < 1 and 0 < p["mbu"] < 1  # torch_neuronx.device_counters() over the level


def test_cost_from_the_predicted_throughput_and_the_host_figure_unpriced(predicted):
    _, report, _, _ = predicted
    entry = report["sections"]["cost"]["running"]["target"]
    # the host throughput is kept, labelled, and never priced (Note [Deciding figures])
    assert "per_million_tokens" not in entry and entry["host"]["label"] == "simulator host time: not priced"
    assert entry["host"]["tokens_per_s"] == max(level["tokens_per_s"]
                                                for level in report["sections"]["speed"]["target"]["levels"])
    p = entry["predicted"]
    best = max(level["predicted"]["tokens_per_s"] for level in report["sections"]["speed"]["target"]["levels"])
    assert p["tokens_per_s"] == best and p["price_key"] == "trn2" and p["tp"] == 1
    assert p["per_million_tokens"] == pytest.approx(40.0 / 64 / 3600 / best * 1e6)  # one of 64 cores
    assert p["label"] == report["sections"]["speed"]["target"]["predicted_label"]


def test_the_dry_run_table_is_in_the_report(predicted):
    status, report, _, folder = predicted
    prediction = report["sections"]["prediction"]
    assert [r["tp"] for r in prediction["rows"]] == [1] and prediction["refused"][0]["tp"] == 3
    assert (prediction["input_tokens"], prediction["output_tokens"]) == (10, 4)
    assert any(f["section"] == "prediction" and "TP 3" in f["message"] for f in report["findings"])
    assert status == 0  # a refused degree is a finding of the run, not a failed gate
    markdown = (folder / "report.md").read_text()
    assert prediction["label"] in markdown and "Predicted at other TP degrees (dry run)" in markdown
    assert "per token P50 | MFU | MBU" in markdown
    assert (folder / "plots" / "predicted_vs_host.png").stat().st_size > 1000
    assert "predicted_vs_host.png" in markdown


def test_the_run_option_asks_for_the_dry_run(tmp_path):
    path = write(tmp_path, "w.toml", WORKLOAD.format(model=tiny_llama_folder(tmp_path))
                 .replace("tp = [1, 3]", "tp = []").replace("concurrency = [1, 2]", "concurrency = [1]"))
    _, report = run(path, str(tmp_path / "a"))
    assert "no TP degrees asked for" in report["sections"]["prediction"]["skipped"]
    _, report = run(path, str(tmp_path / "b"), "--predict-tp", "2")
    assert [r["tp"] for r in report["sections"]["prediction"]["rows"]] == [2]


def _without_predictions(report):
    """The report as the tool wrote it before the device clock."""
    old = copy.deepcopy(report)
    sections = old["sections"]
    sections.pop("prediction")
    target = sections["speed"]["target"]
    for key in ("predicted_label", "platform", "lnc", "predicted_note"):
        target.pop(key)
    for level in target["levels"]:
        level.pop("predicted")
    sections["cost"]["running"]["target"].pop("predicted")
    return old


def test_compare_reports_with_and_without_predictions(predicted, tmp_path, capsys):
    _, new, _, folder = predicted
    old = _without_predictions(new)
    forward = compare(old, new)
    assert not forward["refused"] and forward["regressions"] == []
    rows = {r["metric"]: r for r in forward["metrics"]}
    # a simulated run's speed and cost rows are its predicted figures (Note [Deciding figures])
    p95 = rows["P95 latency ms at concurrency 1"]
    assert p95["a"] is None and p95["b"] > 0 and p95["source_b"] == "predicted"
    assert rows["cost per 1M tokens"]["b"] > 0
    assert rows["P95 latency ms at concurrency 1 (simulator host time)"]["a"] > 0  # host beside host only
    backward = compare(new, old)  # predictions measured before, not any more
    predicted_rows = {r["metric"] for r in backward["metrics"] if r["source_a"] == "predicted"}
    assert backward["regressions"] and set(backward["regressions"]) <= predicted_rows
    os.makedirs(tmp_path / "old")
    (tmp_path / "old" / "report.json").write_text(json.dumps(old))
    assert main(["compare", str(tmp_path / "old"), str(folder)]) == 0
    assert main(["report", str(tmp_path / "old")]) == 0  # an old report still renders
    assert "predicted_vs_host.png" not in os.listdir(tmp_path / "old" / "plots")


def test_a_new_cost_model_is_a_change_not_a_regression(predicted):
    _, a, _, _ = predicted
    b = copy.deepcopy(a)
    b["sections"]["speed"]["target"]["predicted_label"] = "predicted (cost model v99, calibration error ±5%)"
    for level in b["sections"]["speed"]["target"]["levels"]:
        level["predicted"]["latency_ms"]["p95"] *= 3
    result = compare(a, b)
    assert result["regressions"] == []
    assert result["cost_model"] == [("predicted_label", a["sections"]["speed"]["target"]["predicted_label"],
                                     b["sections"]["speed"]["target"]["predicted_label"])]
    row = next(r for r in result["metrics"] if r["metric"] == "P95 latency ms at concurrency 1")
    assert row["note"] == "cost model changed"
