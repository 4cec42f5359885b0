"""neuron-migrate on tiny random models whose migration problems must show: an op from
TorchNeuron's CPU-fallback set, and int64 values beyond 2**31 that 32-bit computation wraps."""
import os


from migrate_helpers import DATA, run, write

FACTORY = os.path.join(DATA, "custom_models.py")


def _workload(factory, gates):
    return f"""
[workload]
name = "{factory}"
[model]
factory = "{FACTORY}:{factory}"
[inputs]
prompt_lengths = [6]
batch_sizes = [1, 2]
max_new_tokens = 3
vocab_limit = 64
[serve]
requests = 2
[compile]
enabled = false
[gates]
{gates}
"""


def test_int64_beyond_int32_is_found_and_breaks_the_output(tmp_path):
    path = write(tmp_path, "w.toml", _workload("hashed", "logits_max_abs_error = 0.01\ngreedy_agreement_min = 0.99"))
    status, report = run(path, str(tmp_path / "r"))
    wide = report["sections"]["census"]["wide_values"]
    assert wide and wide[0]["dtype"] == "int64" and wide[0]["sample_value"] > 2**31
    assert wide[0]["op"] == "aten::mul.Tensor"
    # on the neuron device int64 is computed in 32 bits: the hashed buckets differ
    quality = report["sections"]["quality"]
    assert quality["logits_max_abs_error"] > 0.01
    verdicts = {v["condition"]: v["verdict"] for v in report["sections"]["verdict"]}
    assert verdicts["logits_max_abs_error"] == "no-go" and status == 3
    assert "64-bit values that 32-bit computation would not keep" in (tmp_path / "r" / "report.md").read_text()


def test_fallback_op_is_found_and_output_still_right(tmp_path):
    path = write(tmp_path, "w.toml", _workload("filtered", "logits_max_abs_error = 1e-6\nfallback_ops_max = 1"))
    status, report = run(path, str(tmp_path / "r"))
    census = report["sections"]["census"]
    assert any(op.startswith("aten::isin") for op in census["fallback_ops"])
    detail = next(d for d in census["fallback_detail"] if d["op"].startswith("aten::isin"))
    assert detail["count"] >= 1 and detail["signatures"]
    assert report["sections"]["quality"]["logits_max_abs_error"] == 0.0
    verdicts = {v["condition"]: v for v in report["sections"]["verdict"]}
    assert verdicts["logits_max_abs_error"]["verdict"] == "go"
    assert verdicts["fallback_ops_max"]["measured"] == len(census["fallback_ops"]) >= 2  # isin + argmax
    assert verdicts["fallback_ops_max"]["verdict"] == "no-go"


def test_model_that_fails_to_load_is_a_finding(tmp_path):
    broken = write(tmp_path, "broken.py", "def build():\n    raise RuntimeError('weights are corrupt')\n")
    path = write(tmp_path, "w.toml", _workload("x", "").replace(f"{FACTORY}:x", f"{broken}:build"))
    status, report = run(path, str(tmp_path / "r"))
    assert report["status"] == "complete" and status == 0
    finding = next(f for f in report["findings"] if f["section"] == "load")
    assert "weights are corrupt" in finding["message"] and "Traceback" in finding["traceback"]
    assert report["sections"]["quality"] == {"skipped": "the model did not load (see findings)"}
    assert "fit" in report["sections"] and "lock" in report["sections"]


def test_op_that_raises_is_a_finding(tmp_path):
    model = write(tmp_path, "raising.py", """
import torch

class Raising(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 8)

    def forward(self, input_ids):
        if input_ids.shape[1] > 6:
            raise ValueError("sequence too long for this model")
        return self.embed(input_ids) @ self.embed.weight.T

def build():
    return Raising()
""")
    path = write(tmp_path, "w.toml", _workload("x", "error_rate_max = 0").replace(f"{FACTORY}:x", f"{model}:build"))
    status, report = run(path, str(tmp_path / "r"))
    # a prompt of 6 tokens passes the forward, generation of the 2nd new token raises
    errors = [f for f in report["findings"] if f["section"] == "quality"]
    assert errors and "sequence too long" in errors[0]["message"] and errors[0]["traceback"]
    verdict = next(v for v in report["sections"]["verdict"] if v["condition"] == "error_rate_max")
    assert verdict["measured"] == 1.0 and verdict["verdict"] == "no-go"


def test_gate_not_measured_is_not_a_go_for_the_exit_status(tmp_path):
    broken = write(tmp_path, "broken.py", "def build():\n    raise RuntimeError('weights are corrupt')\n")
    path = write(tmp_path, "w.toml", _workload("x", "logits_max_abs_error = 0.01\nerror_rate_max = 0")
                 .replace(f"{FACTORY}:x", f"{broken}:build"))
    status, report = run(path, str(tmp_path / "r"))
    assert {v["verdict"] for v in report["sections"]["verdict"]} == {"not measured"}
    assert status == 3  # was 0, the status of "every stop condition go"


def test_nan_on_the_device_is_the_worst_error_not_dropped():
    import math

    import torch

    from neuron_migrate import quality, training
    from neuron_migrate.compare import compare
    fine = {"label": "b1xL4", "logits": torch.zeros(1, 4, 8), "tokens": torch.zeros(1, 2, dtype=torch.long)}
    nan = {"label": "b2xL4", "logits": torch.full((2, 4, 8), float("nan")),
           "tokens": torch.zeros(2, 2, dtype=torch.long)}
    compared = quality.compare([fine, nan], [fine, dict(nan, logits=torch.zeros(2, 4, 8))])
    assert math.isnan(compared["logits_max_abs_error"])  # Python's max() gave 0.0: a "go"
    from neuron_migrate.verdict import decide
    from neuron_migrate.workload import Gates
    assert decide(Gates(logits_max_abs_error=0.05), {"sections": {"quality": compared}})[0]["verdict"] == "no-go"
    target = {"loss": [2.0, 1.5, float("nan")], "grad_norm": [1.0, 1.0, float("nan")], "step_seconds": [0.1] * 3}
    baseline = {"loss": [2.0, 1.5, 1.2], "grad_norm": [1.0, 1.0, 1.0], "step_seconds": [0.1] * 3}
    summary = training.summary(target, baseline, {"loss": [float("nan")]}, 2, None)
    assert math.isnan(summary["loss_max_abs_diff"]) and math.isnan(summary["grad_norm_max_rel_diff"])
    assert math.isnan(summary["restart"]["max_abs_diff"])
    before = {"conditions": {}, "sections": {"quality": {"logits_max_abs_error": 0.01}}}
    after = {"conditions": {}, "sections": {"quality": {"logits_max_abs_error": float("nan")}}}
    assert compare(before, after)["regressions"] == ["logits max abs error"]
    assert compare(after, after)["regressions"] == [] and compare(after, before)["regressions"] == []
