"""neuron-migrate run, end to end on the demo model: every question answered in one report
(JSON with a versioned schema, Markdown, a self-contained HTML page with plots)."""
import hashlib
import json
import os
import re

import pytest
import torch

from migrate_helpers import DEMO_MODEL, run, write
from neuron_migrate import REPORT_SCHEMA, REPORT_SCHEMA_VERSION

WORKLOAD = f"""
[workload]
name = "demo"
script = "{os.path.join(os.path.dirname(DEMO_MODEL), 'migrate', 'serve.py')}"
[model]
path = "{DEMO_MODEL}"
dtype = "bfloat16"
[inputs]
prompts = ["To read a file, use"]
prompt_lengths = [12]
batch_sizes = [1, 2]
max_new_tokens = 6
max_seq_len = 256
[serve]
requests = 4
concurrency = [1, 2]
[fit]
platforms = ["trn2"]
tp = [1, 2]
[cost]
price_per_hour = {{ neuron = 3.6, cpu = 0.36 }}
engineering_hours = 10
engineering_rate_per_hour = 50
[gates]
logits_max_abs_error = 0.05
greedy_agreement_min = 0.99
p95_latency_ms = 1e9
memory_headroom_min = 0.5
compiles_max = 8
fallback_ops_max = 0
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo")
    status, report = run(write(folder, "demo.toml", WORKLOAD), str(folder / "report"))
    return status, report, folder / "report"


def test_report_is_complete_and_versioned(demo):
    status, report, _ = demo
    assert report["schema"] == REPORT_SCHEMA and report["schema_version"] == REPORT_SCHEMA_VERSION
    assert report["status"] == "complete" and report["target"] == "neuron" and report["baseline"] == "cpu"
    for name in ("lock", "licence", "cuda_scan", "fit", "roofline", "load", "census", "quality", "compiles",
                 "speed", "training", "memory", "cost", "verdict"):
        assert name in report["sections"], name
    assert report["target_simulated"] is True
    assert status == 3  # fallback_ops_max = 0 is a no-go: greedy generate uses argmax


def test_will_it_run(demo):
    census = demo[1]["sections"]["census"]
    assert "aten::argmax" in census["fallback_ops"]
    assert census["fallback_tracking"] and census["distinct_ops"] > 20
    mm = next(o for o in census["ops"] if o["op"] == "aten::mm")
    assert any("bfloat16[" in signature for signature in mm["signatures"])
    assert census["wide_values"] == []
    scan = demo[1]["sections"]["cuda_scan"]
    assert {f["kind"] for f in scan["findings"]} >= {".cuda()", "torch.cuda API", "cuda-only compile mode"}


def test_fallbacks_predicted_from_a_census_on_another_device_are_the_measured_ones(demo):
    """Issue 40: "will it run on Trainium?" answered on any device (Note [Predicted fallbacks]):
    predicted from the CPU baseline's census (what a GPU box's run reports) and from the device's,
    the same ops as torch_neuronx.get_fallback_ops() measured (argmax, isin: generation's)."""
    from neuron_migrate.census import same_ops
    census = demo[1]["sections"]["census"]
    assert census["fallback_source"] == "measured" and census["fallback_ops"]
    assert same_ops(census["fallback_ops_predicted_on_baseline"], census["fallback_ops"]), census
    assert same_ops(census["fallback_ops_predicted"], census["fallback_ops"]) and census["fallback_prediction_agrees"]


def test_output_is_right_against_the_baseline(demo):
    quality = demo[1]["sections"]["quality"]
    assert quality["logits_max_abs_error"] <= 0.05
    assert quality["greedy_agreement"] == 1.0
    assert {r["label"] for r in quality["requests"]} == {"b1xL7", "b1xL12", "b2xL7", "b2xL12"}  # <s> + 6 tokens of text


def test_compiles_are_counted_with_their_reasons(demo):
    compiles = demo[1]["sections"]["compiles"]
    assert compiles["available"] is True and compiles["errors"] == []
    assert compiles["buckets"]["distinct_shapes"] == 4
    # One program per input shape (static shapes): 4 shapes, 3 recompiles with their reasons.
    assert compiles["graphs_compiled"] == 4
    assert compiles["recompiles"] == 3 and all(r["reason"] for r in compiles["recompile_reasons"])
    assert compiles["warmup_cold_s"] > 0 and compiles["warmup_warm_s"] > 0


def test_speed_levels_and_timing_label(demo):
    speed = demo[1]["sections"]["speed"]
    for role in ("target", "baseline"):
        levels = speed[role]["levels"]
        assert [l["concurrency"] for l in levels] == [1, 2]
        for level in levels:
            assert level["requests"] == 4 and level["error_rate"] == 0.0
            assert level["tokens"] == sum(6 * int(label[1]) for label in ["b1", "b2", "b1", "b2"])
            assert level["latency_ms"]["p50"] <= level["latency_ms"]["p95"] <= level["latency_ms"]["p99"]
            assert level["ttft_ms"]["p50"] is not None
    assert "not a Trainium prediction" in speed["target"]["timing"]
    assert speed["target"]["loop"].startswith("transformers' generate() as this run calls it")  # issue 41 §5


def test_fit_memory_and_roofline(demo):
    sections = demo[1]["sections"]
    cores = sections["memory"]["target_peak_per_core"]
    assert cores and cores[0]["peak_bytes"] > 0 and cores[0]["total_bytes"] == torch.neuron.get_device_properties(0).total_memory
    assert sections["memory"]["host_device_bytes"]["neuron->cpu"] > 0
    assert len(sections["memory"]["timeline"]) >= 2
    assert sections["fit"]["smallest_fitting_tp"]["trn2 LNC=2"]["tp"] == 1
    roof = sections["roofline"]
    # about 2 FLOPs per parameter per generated token (plus attention)
    assert 2 * sections["load"]["parameters"] * 0.8 < roof["flops_per_token"] < 2 * sections["load"]["parameters"] * 2
    assert {r["platform"] for r in roof["rows"]} == {"trn2", "trn3"} and "not a measurement" in roof["label"]


def test_cost_follows_predicted_throughput_on_the_simulator(demo):
    """Note [Deciding figures]: the simulated target's cost is priced from its best predicted
    tokens/s (one logical core's share of price_per_hour.neuron); its host throughput is kept,
    labelled, and not priced."""
    sections = demo[1]["sections"]
    target = sections["cost"]["running"]["target"]
    levels = sections["speed"]["target"]["levels"]
    best = max(l["predicted"]["tokens_per_s"] for l in levels)
    predicted = target["predicted"]
    assert predicted["tokens_per_s"] == best and predicted["price_key"] == "neuron"
    cores = predicted["per_million_tokens"] * best * 3600 / 1e6 / 3.6  # the share of the instance-hour
    assert 0 < cores <= 1
    assert "per_million_tokens" not in target and target["host"]["tokens_per_s"] == max(l["tokens_per_s"] for l in levels)
    assert sections["cost"]["one_time"]["engineering"] == 500 and "compile_warmup" not in sections["cost"]["one_time"]
    assert "host throughput is not priced" in sections["cost"]["note"]
    verdicts = {v["condition"]: v for v in sections["verdict"]}
    worst = max(l["predicted"]["latency_ms"]["p95"] for l in levels)
    assert verdicts["p95_latency_ms"]["measured"] == worst and verdicts["p95_latency_ms"]["source"] == "predicted"


def test_lock_record_and_licence(demo):
    status, report, folder = demo
    lock = report["sections"]["lock"]
    assert lock["versions"]["torch"] == torch.__version__.split("+")[0] or lock["versions"]["torch"] == torch.__version__
    with open(os.path.join(DEMO_MODEL, "config.json"), "rb") as handle:
        assert lock["model"]["files"]["config.json"]["sha256"] == hashlib.sha256(handle.read()).hexdigest()
    assert "[gates]" in lock["workload"]["text"]
    with open(folder / "inputs.json", "rb") as handle:
        data = handle.read()
    assert report["sections"]["load"]["inputs_sha256"] == hashlib.sha256(data).hexdigest()
    assert json.loads(data)["b2xL12"][0] == json.loads(data)["b2xL12"][0][:12]
    licence = report["sections"]["licence"]["model"]
    assert licence == {"licence": "psf-2.0", "source": "LICENSE-PSF.txt", "status": "permissive"}


def test_verdict_per_stop_condition(demo):
    verdicts = {v["condition"]: v for v in demo[1]["sections"]["verdict"]}
    assert verdicts["logits_max_abs_error"]["verdict"] == "go"
    assert verdicts["fallback_ops_max"]["verdict"] == "no-go" and verdicts["fallback_ops_max"]["measured"] >= 1
    assert verdicts["compiles_max"]["verdict"] == "go" and verdicts["compiles_max"]["measured"] == 4  # 4 <= 8
    assert verdicts["memory_headroom_min"]["verdict"] == "go"


def test_markdown_and_self_contained_html(demo):
    folder = demo[2]
    markdown = (folder / "report.md").read_text()
    page = (folder / "report.html").read_text()
    for text in ("## Will it run?", "## Is the output still right?", "## How many compiles?", "## How fast?",
                 "## Does it fit?", "## What does it cost?", "## Can we go back?", "## May we use it?", "## Verdict"):
        assert text in markdown
    assert "not a Trainium prediction" in markdown and "not a Trainium prediction" in page
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(images) >= 3 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r'(src|href)="https?:', page)
    assert (folder / "plots" / "latency_distribution.png").exists()


def test_compare_with_itself_and_with_other_conditions(demo, tmp_path, capsys):
    from migrate_helpers import main
    folder = str(demo[2])
    assert main(["compare", folder, folder]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
    other = dict(demo[1], conditions=dict(demo[1]["conditions"], seed=1))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "report.json").write_text(json.dumps(other))
    assert main(["compare", folder, str(tmp_path / "other")]) == 2
    assert "seed: 0 -> 1" in capsys.readouterr().out


def test_requests_of_the_same_shape_keep_their_own_labels_and_inputs(tmp_path):
    from neuron_migrate import loading
    from neuron_migrate.workload import load
    # the demo tokenizer makes 7 ids of this text (<s> + 6), the same length as the random prompt
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "labels"
[model]
path = "{DEMO_MODEL}"
[inputs]
prompts = ["To read a file, use"]
prompt_lengths = [7]
""")
    workload = load(path)
    requests = loading.requests(loading.build_cpu_model(workload), workload)
    assert [r.label for r in requests] == ["b1xL7", "b1xL7#2"]  # was "b1xL7" twice: inputs.json kept one
    assert not torch.equal(requests[0].input_ids, requests[1].input_ids)
