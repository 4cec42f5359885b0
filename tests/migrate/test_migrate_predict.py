"""neuron-migrate predict: the dry run's predicted Trainium latency and cost per platform x TP
degree, from a config folder or a workload file, every figure labelled with the cost model and its
calibration error; bad input exits 2 naming what to give."""
import json
import os
import time

import pytest

from migrate_helpers import ROOT, main, tiny_llama_folder, write
from torch_neuron_sim import dry_run

LLAMA_8B = os.path.join(ROOT, "demo", "configs", "llama-3.1-8b")
LLAMA_70B = os.path.join(ROOT, "demo", "configs", "llama-3.3-70b")
SHORT = ["--input-tokens", "16", "--output-tokens", "3"]  # the figures' shape, not the docs' calibration rows


def _label():
    error = dry_run.calibration_error()
    return (f"predicted (cost model {dry_run.COST_MODEL_VERSION}, calibration error "
            + ("unknown)" if error is None else f"±{error:.0%})"))


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich reads it: headers and notes on one line each


def _printed(capsys):
    return " ".join(capsys.readouterr().out.split())


def _json(capsys, *argv):
    capsys.readouterr()
    status = main(["predict", *argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_llama_folder(tmp_path_factory.mktemp("predict"))  # 4 heads, 2 key-value heads


def test_llama_8b_at_tp_4_is_a_labelled_table(capsys):
    assert main(["predict", LLAMA_8B, "--platform", "trn2", "--tp", "4", *SHORT]) == 0
    printed = _printed(capsys)
    assert _label() + ": llama-3.1-8b, compiled, batch 1, 16 tokens in / 3 out" in printed
    for column in ("platform", "LNC", "TP", "TTFT ms", "per token ms", "tokens/s", "MFU prefill", "MBU decode"):
        assert column in printed, column
    assert "trn2 2 4 " in printed  # platform, its default LNC, the TP degree
    assert "no cost: no price_per_hour" in printed  # a config folder has no prices


def test_json_has_the_dry_runs_figures(tiny, capsys):
    status, result = _json(capsys, tiny, "--tp", "1,2", "--input-tokens", "8", "--output-tokens", "4")
    assert status == 0 and result["refused"] == []
    assert result["label"] == _label()
    assert result["cost_model_version"] == dry_run.COST_MODEL_VERSION
    assert result["calibration_error"] == dry_run.calibration_error()
    assert (result["mode"], result["batch"], result["input_tokens"], result["output_tokens"]) == ("compiled", 1, 8, 4)
    assert [(r["platform"], r["lnc"], r["tp"]) for r in result["rows"]] == [("trn2", 2, 1), ("trn2", 2, 2)]
    expected = dry_run.predict(tiny, platform="trn2", tp=2, logical_nc_config=2, input_tokens=8, output_tokens=4,
                               mode="compiled")
    row = result["rows"][1]
    assert (row["ttft_ms"], row["per_token_ms"], row["mfu_prefill"], row["mbu_decode"]) == (
        expected.ttft_ms, expected.per_token_ms, expected.mfu_prefill, expected.mbu_decode)
    for row in result["rows"]:
        assert row["tokens_per_s"] == pytest.approx(1000 / row["per_token_ms"])
        assert 0 < row["mfu_prefill"] <= 1 and 0 < row["mbu_decode"] <= 1
        assert row["request_latency_ms"] == pytest.approx(row["ttft_ms"] + 3 * row["per_token_ms"])
        assert row["per_million_output_tokens"] is None  # no prices given


def test_eager_is_slower_than_compiled(tiny, capsys):
    _, compiled = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "3")
    _, eager = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "3", "--mode", "eager")
    assert eager["mode"] == "eager" and eager["rows"][0]["per_token_ms"] > compiled["rows"][0]["per_token_ms"]


def test_a_tp_degree_that_does_not_divide_the_model_exits_2_and_keeps_the_others(tiny, capsys):
    assert main(["predict", tiny, "--tp", "2,3", "--input-tokens", "8", "--output-tokens", "2"]) == 2
    printed = _printed(capsys)
    assert "predict: trn2 TP 3: tp 3 must divide the 4 attention heads" in printed
    assert "trn2 2 2 " in printed  # TP 2 is still predicted
    status, result = _json(capsys, tiny, "--tp", "2,3", "--input-tokens", "8", "--output-tokens", "2")
    assert status == 2 and [r["tp"] for r in result["rows"]] == [2]
    assert result["refused"][0]["tp"] == 3 and "must divide" in result["refused"][0]["error"]


@pytest.mark.parametrize("argv, message", [
    (["{empty}", "--tp", "4"], "no config.json there"),
    (["{tiny}", "--tp", "4", "--platform", "trn9"], "--platform: unknown platform 'trn9' (known: trn1, trn2, trn3)"),
    (["{tiny}", "--tp", "1", "--platform", "trn1", "--lnc", "2"], "--lnc: trn1 offers LNC 1, not 2"),
    (["{tiny}", "--tp", "0"], "--tp: expected a non-empty list of positive integers"),
    (["{tiny}"], "--tp: give the tensor-parallel degrees to predict"),
    (["{tiny}", "--tp", "1", "--output-tokens", "-1"], "--output-tokens: expected a positive integer"),
])
def test_bad_input_exits_2_naming_what_to_give(tiny, tmp_path, capsys, argv, message):
    argv = [a.format(empty=str(tmp_path), tiny=tiny) for a in argv]
    assert main(["predict", *argv]) == 2
    assert message in _printed(capsys)


WORKLOAD = """
[workload]
name = "predict-me"
[model]
path = "{model}"
random_init = true
[inputs]
prompt_lengths = [6, 10]
max_new_tokens = 5
[predict]
tp = [1, 2]
[cost]
price_per_hour = {{ trn2 = 40.0, neuron = 1.0 }}
"""


def test_a_workload_gives_its_lengths_degrees_and_prices(tiny, tmp_path, capsys):
    path = write(tmp_path, "w.toml", WORKLOAD.format(model=tiny))
    status, result = _json(capsys, path)
    assert status == 0
    assert (result["input_tokens"], result["output_tokens"], result["currency"]) == (10, 5, "USD")
    assert [r["tp"] for r in result["rows"]] == [1, 2]
    for row in result["rows"]:  # Note [Predicted cost]: the TP group's share of a trn2.48xlarge (64 cores)
        request_tokens_per_s = 5 * 1000 / (row["ttft_ms"] + 4 * row["per_token_ms"])
        assert row["price_key"] == "trn2"
        assert row["per_million_output_tokens"] == pytest.approx(40.0 * row["tp"] / 64 / 3600
                                                                 / request_tokens_per_s * 1e6)
    assert "x TP/64" in result["cost_assumptions"]["trn2"]
    status, result = _json(capsys, path, "--tp", "4", "--output-tokens", "2")  # options override the workload
    assert status == 0 and [r["tp"] for r in result["rows"]] == [4] and result["output_tokens"] == 2
    assert main(["predict", path, "--tp", "1"]) == 0
    printed = _printed(capsys)
    assert "USD/1M output tokens" in printed and "price_per_hour.trn2 as one trn2.48xlarge instance-hour" in printed


def test_a_workload_is_served_as_its_own_prompts_and_chunked_prefill_is_asked_for(tiny, tmp_path, capsys):
    """Issue 41 §1: under load the workload's requests keep their own prompt lengths (6 and 10
    tokens, in turn), and `--chunked-prefill` (or [predict] chunked_prefill) prefills them in chunks."""
    path = write(tmp_path, "w.toml", WORKLOAD.format(model=tiny).replace("tp = [1, 2]", "tp = [1]"))
    status, result = _json(capsys, path, "--concurrency", "2")
    assert status == 0 and result["serving_lengths"] == [[6, 5], [10, 5]] and result["chunked_prefill"] is None
    level, = result["rows"][0]["serving_levels"]
    expected, = dry_run.serve(tiny, "trn2", concurrency=(2,), lengths=[(6, 5), (10, 5)])
    assert level["tokens_per_s"] == pytest.approx(expected.tokens_per_s)
    status, chunked = _json(capsys, path, "--concurrency", "2", "--chunked-prefill", "4")
    level, = chunked["rows"][0]["serving_levels"]
    expected, = dry_run.serve(tiny, "trn2", concurrency=(2,), lengths=[(6, 5), (10, 5)], chunked_prefill=4)
    assert status == 0 and chunked["chunked_prefill"] == 4 and level["ttft_ms"] == pytest.approx(expected.ttft_ms)
    assert main(["predict", path, "--concurrency", "2", "--chunked-prefill", "4"]) == 0
    assert "the workload's 2 prompts in turn (6 to 10 tokens in, 5 out), prompts prefilled in chunks" in _printed(capsys)
    assert main(["predict", path, "--chunked-prefill", "4"]) == 2  # chunks are a served load's
    assert "--chunked-prefill: expected a step's token budget of 1 or more, with --concurrency" in _printed(capsys)


def test_a_workload_without_a_config_is_refused(tmp_path, capsys):
    from migrate_helpers import DATA
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "factory"
[model]
factory = "{os.path.join(DATA, 'custom_models.py')}:filtered"
[inputs]
prompt_lengths = [6]
[predict]
tp = [1]
""")
    assert main(["predict", path]) == 2
    assert "the dry run needs a config.json" in _printed(capsys)


@pytest.mark.parametrize("table, message", [
    ("tp = [0]", "predict.tp: expected a non-empty list of positive integers"),
    ('platforms = ["trn9"]', "predict.platforms: unknown platform 'trn9'"),
    ('mode = "fast"', "predict.mode: expected one of compiled, eager"),
])
def test_the_workloads_predict_table_is_checked(tiny, tmp_path, table, message):
    from neuron_migrate.workload import WorkloadError, load
    text = WORKLOAD.format(model=tiny).replace("tp = [1, 2]", table)
    with pytest.raises(WorkloadError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load(write(tmp_path, "w.toml", text))


def test_llama_70b_at_tp_64_is_answered(capsys):  # ~20 s on a 2-core machine
    start = time.perf_counter()
    assert main(["predict", LLAMA_70B, "--platform", "trn2", "--tp", "64"]) == 0
    seconds = time.perf_counter() - start
    printed = _printed(capsys)
    assert "llama-3.3-70b, compiled, batch 1, 192 tokens in / 192 out" in printed and "trn2 2 64 " in printed
    print(f"neuron-migrate predict llama-3.3-70b --tp 64: {seconds:.1f} s")


def test_a_serving_stack_adds_its_cost_per_step(tiny, capsys):
    _, device = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "3")
    status, served = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "3",
                           "--serving", "vllm-neuron")
    expected = dry_run.predict(tiny, platform="trn2", tp=1, input_tokens=8, output_tokens=3, serving="vllm-neuron")
    assert status == 0 and served["serving"] == "vllm-neuron" and "vllm-neuron serving stack" in served["source"]
    assert served["rows"][0]["per_token_ms"] == expected.per_token_ms > device["rows"][0]["per_token_ms"]


def test_concurrency_levels_are_served_with_continuous_batching(tiny, capsys):
    """Issue 41 §1: `predict --concurrency` serves requests at each level (the dry run's Note
    [Serving under load]); concurrency 2 no longer costs two requests one after the other."""
    status, result = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "4",
                           "--concurrency", "1,2")
    assert status == 0 and result["concurrency"] == [1, 2]
    one, two = result["rows"][0]["serving_levels"]
    assert one["tokens_per_s"] == pytest.approx(result["rows"][0]["request_tokens_per_s"])
    assert two["tokens_per_s"] > one["tokens_per_s"] and set(two["decode_step_ms"]) == {"1", "2"}
    assert main(["predict", tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "4",
                 "--concurrency", "1,2"]) == 0
    assert "served with continuous batching" in _printed(capsys)
    assert main(["predict", tiny, "--tp", "1", "--mode", "eager", "--concurrency", "2"]) == 2
    assert "serving under load is predicted compiled only" in _printed(capsys)


def test_gpt_oss_20b_at_tp_4_is_answered(capsys):  # ~25 s on a 2-core machine
    """Issue 41 §2: the vocabulary shard kept gpt-oss's padding index (199999) beyond its rows.
    (Its experts are still costed as transformers computes them on meta: every expert, densely.)"""
    status, result = _json(capsys, os.path.join(ROOT, "demo", "configs", "gpt-oss-20b"), "--tp", "4",
                           "--input-tokens", "16", "--output-tokens", "3")
    assert status == 0 and result["refused"] == [] and result["rows"][0]["tokens_per_s"] > 0


def test_each_prediction_names_the_loop_it_assumes(tiny, capsys):
    """Issue 41 §5: the dry run's figures are the model's forward alone (or a serving stack's
    loop); the live run's are transformers' generate as run: each says which."""
    status, result = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "4")
    assert status == 0 and result["loop"].startswith("the model's forward alone: one compiled program per step")
    status, result = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "4",
                           "--serving", "vllm-neuron")
    assert result["loop"].startswith("the vllm-neuron serving stack's loop")
    assert main(["predict", tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "4"]) == 0
    assert "loop: the model's forward alone" in _printed(capsys)
    assert dry_run.predict(tiny, "trn2", 1, input_tokens=8, output_tokens=2, mode="eager").loop.startswith(
        "the model's forward alone: the model's eager ops per step")


def test_request_rates_are_served_open_loop(tiny, capsys):
    status, result = _json(capsys, tiny, "--tp", "1", "--input-tokens", "8", "--output-tokens", "4",
                           "--concurrency", "2", "--rate", "1,1e9")
    assert status == 0 and result["rates"] == [1.0, 1e9]
    closed, slow, burst = result["rows"][0]["serving_levels"]
    assert closed["rate_per_s"] is None and (slow["rate_per_s"], slow["concurrency"]) == (1.0, 2)
    assert burst["ttft_ms"]["p95"] > slow["ttft_ms"]["p95"]  # all at once: requests wait for the batch
    assert main(["predict", tiny, "--tp", "1", "--rate", "2"]) == 2  # a rate needs --concurrency (the batch)
    assert "give --concurrency too" in _printed(capsys)
