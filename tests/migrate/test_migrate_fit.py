"""neuron-migrate fit: parameters + KV cache per core on the meta device, for a 27B model
far larger than this machine, and for the demo model."""
import json

import pytest

from migrate_helpers import DEMO_MODEL, QWEN_27B, main
from neuron_migrate import platforms
from neuron_migrate.fit import cache_bytes, fit


@pytest.fixture(scope="module")
def qwen():
    return fit(QWEN_27B, dtype="bfloat16", platforms=["trn1", "trn2", "trn3"], lnc=[1, 2], tp=[1, 2, 4, 5, 8],
               batch_per_core=1, max_seq_len=4096, headroom=0.1)


def test_27b_parameters_from_config_alone(qwen):
    assert qwen["architecture"] == "Qwen3_5ForCausalLM"
    assert 26.5e9 < qwen["parameters"] < 27.5e9  # the text decoder of Qwen3.5-27B
    assert qwen["parameter_bytes"] == pytest.approx(qwen["parameters"] * 2, rel=0.01)  # bf16


def test_27b_hybrid_cache_grows_only_in_full_attention_layers(qwen):
    # 16 full-attention layers x 2 (K, V) x 4 KV heads x head_dim 256 x 2 bytes per token;
    # 48 linear-attention layers add a constant recurrent + convolution state.
    per_token = 16 * 2 * 4 * 256 * 2
    constant = qwen["cache_bytes_per_core_at_tp1"] - per_token * 4096
    assert constant > 0
    assert "meta device" in qwen["cache_method"]


def test_27b_smallest_fitting_tp(qwen):
    rows = {(r["platform"], r["lnc"], r["tp"]): r for r in qwen["rows"]}
    # trn2 LNC=2: 24 GiB per core; 50 GiB of weights need 4 cores.
    assert rows[("trn2", 2, 1)]["hbm_per_core_bytes"] == 24 * 2**30
    assert not rows[("trn2", 2, 2)]["fits"] and rows[("trn2", 2, 4)]["fits"]
    assert qwen["smallest_fitting_tp"]["trn2 LNC=2"] == {"tp": 4, "among": "the listed degrees"}
    assert qwen["smallest_fitting_tp"]["trn2 LNC=1"]["tp"] == 8  # 12 GiB per core
    assert qwen["smallest_fitting_tp"]["trn3 LNC=2"]["tp"] == 2  # 36 GiB per core
    assert qwen["smallest_fitting_tp"]["trn1 LNC=1"]["tp"] == 4  # 16 GiB per core
    assert ("trn1", 2, 1) not in rows  # trn1 has no LNC=2
    for row in qwen["rows"]:
        assert row["total_bytes_per_core"] == row["parameter_bytes_per_core"] + row["cache_bytes_per_core"]


def test_tp_degree_must_split_the_heads(qwen):
    row = next(r for r in qwen["rows"] if r["platform"] == "trn3" and r["lnc"] == 2 and r["tp"] == 5)
    assert not row["fits"] and "24 attention heads do not split 5 ways" in row["problems"]


def test_platform_budgets_come_from_the_data_file():
    assert platforms.hbm_bytes_per_core("trn2", 2) == 24 * 2**30
    assert platforms.hbm_bytes_per_core("trn2", 1) == 12 * 2**30
    assert platforms.hbm_bytes_per_core("trn1", 1) == 16 * 2**30
    assert platforms.hbm_bytes_per_core("trn3", 2) == 36 * 2**30
    assert platforms.platforms()["trn2"]["hbm_bandwidth_bytes_per_s"] == 2.9e12


def test_demo_model_kv_cache_matches_its_shape():
    result = fit(DEMO_MODEL, dtype="bfloat16", platforms=["trn2"], lnc=[2], tp=[1], batch_per_core=4, max_seq_len=512)
    # 4 layers x 2 x 2 KV heads x head_dim 64 x 2 bytes, 512 tokens, 4 sequences
    assert result["cache_bytes_per_core_at_tp1"] == 4 * 2 * 2 * 64 * 2 * 512 * 4
    assert result["rows"][0]["fits"]


def test_cache_bytes_caps_sliding_windows():
    cache = {"layers": [{"constant_bytes": 10, "bytes_per_token": 2, "window": 100},
                        {"constant_bytes": 0, "bytes_per_token": 2, "window": None}]}
    assert cache_bytes(cache, 1000) == 10 + 200 + 2000


def test_fit_command_json(capsys):
    assert main(["fit", QWEN_27B, "--platform", "trn2", "--tp", "1,2,4", "--lnc", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["tp"] for r in result["rows"]] == [1, 2, 4]
    assert result["smallest_fitting_tp"]["trn2 LNC=2"]["tp"] == 4


def test_fit_command_table_and_bad_input(capsys):
    assert main(["fit", QWEN_27B, "--platform", "trn2", "--tp", "4", "--lnc", "2"]) == 0
    assert "Qwen3_5ForCausalLM" in capsys.readouterr().out
    assert main(["fit", "/nonexistent/model"]) == 2
    assert main(["fit", QWEN_27B, "--platform", "trn9"]) == 2
    assert "unknown platform 'trn9'" in capsys.readouterr().out


def test_smallest_fitting_tp_whatever_the_listed_order():
    result = fit(DEMO_MODEL, platforms=["trn2"], lnc=[2], tp=[8, 4, 2, 1], max_seq_len=512)
    assert [r["tp"] for r in result["rows"]] == [8, 4, 2, 1]  # rows keep the order asked for
    assert result["smallest_fitting_tp"]["trn2 LNC=2"] == {"tp": 1, "among": "the listed degrees"}


@pytest.mark.parametrize("args, message", [
    (["--tp", "0"], "--tp: expected a non-empty list of positive integers, got [0]"),
    (["--batch", "-1"], "--batch: expected a positive integer, got -1"),
    (["--max-seq-len", "0"], "--max-seq-len: expected a positive integer, got 0"),
    (["--headroom", "1.5"], "--headroom: expected a fraction of the HBM kept free, 0 <= headroom < 1, got 1.5"),
    (["--platform", "trn1", "--lnc", "2"], "--lnc: no platform offers LNC 2 (trn1 offers 1)"),
])
def test_fit_command_refuses_bad_numbers(capsys, args, message):
    assert main(["fit", DEMO_MODEL, "--json", *args]) == 2
    assert message in " ".join(capsys.readouterr().out.split())


def test_fit_refuses_bad_arguments_before_building_the_model():
    with pytest.raises(ValueError, match=r"tp: expected a non-empty list of positive integers, got \[0\]"):
        fit("/nonexistent/model", tp=[0])


def test_lnc_a_platform_lacks_is_named_not_an_error():
    result = fit(DEMO_MODEL, platforms=["trn1", "trn2"], lnc=[2], tp=[1], max_seq_len=512)
    assert [(r["platform"], r["lnc"]) for r in result["rows"]] == [("trn2", 2)]
    assert result["not_offered"] == ["trn1 has no LNC=2"]
