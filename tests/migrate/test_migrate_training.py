"""neuron-migrate on a training workload: loss curve and gradient norms against the baseline,
time per step, time to the loss target, restart from a checkpoint file, cost per run."""
import os

import pytest

from migrate_helpers import DATA, run, tiny_llama_folder, write


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train")
    model = tiny_llama_folder(folder)
    path = write(folder, "w.toml", f"""
[workload]
name = "train"
task = "train"
[model]
path = "{model}"
random_init = true
[inputs]
prompt_lengths = [8]
[train]
steps = 6
batch_size = 2
seq_len = 16
lr = 0.01
checkpoint_at = 3
loss_target = 100.0
[compile]
enabled = false
[cost]
price_per_hour = {{ neuron = 2.0 }}
training_run_steps = 1000
[predict]
tp = [1]
dp = 2
[gates]
loss_max_abs_diff = 0.001
resume_loss_max_abs_diff = 0.0
""")
    return run(path, str(folder / "r"))


def test_loss_curves_match_the_baseline(trained):
    status, report = trained
    training = report["sections"]["training"]
    assert len(training["target"]["loss"]) == len(training["baseline"]["loss"]) == 6
    assert len(training["target"]["grad_norm"]) == 6
    assert training["loss_max_abs_diff"] <= 1e-3
    assert training["target"]["loss"][-1] < training["target"]["loss"][0]  # it learns
    assert training["grad_norm_max_rel_diff"] < 1e-3


def test_the_predicted_section_is_a_training_step_of_the_workloads_batch(trained):
    """Issue 41 §4: a training workload's dry run predicts its step (torch_neuron_sim.train_dry_run)
    at [predict] dp x tp, its batch and sequence, and the run of training_run_steps steps."""
    prediction = trained[1]["sections"]["prediction"]
    assert prediction["task"] == "train" and not prediction["refused"]
    row, = prediction["rows"]
    assert (row["dp"], row["tp"], row["seq_len"], row["local_batch"]) == (2, 1, 16, 2)
    assert row["tokens_per_step"] == 2 * 2 * 16 and row["step_ms"] > 0 and row["collectives_ms"] > 0
    assert row["hours_to_budget"] == pytest.approx(1000 * row["step_ms"] / 1000 / 3600)
    assert row["cost_to_budget"] == pytest.approx(row["hours_to_budget"] * row["instances"] * 2.0)


def test_restart_from_checkpoint_gives_the_same_losses(trained):
    restart = trained[1]["sections"]["training"]["restart"]
    assert restart["checkpoint_at"] == 3 and len(restart["losses_after_restart"]) == 3
    assert restart["max_abs_diff"] == 0.0 and restart["checkpoint_bytes"] > 0
    assert restart["killed_with"] == "SIGKILL"  # the first training process was killed, not stopped
    verdicts = {v["condition"]: v["verdict"] for v in trained[1]["sections"]["verdict"]}
    assert verdicts == {"loss_max_abs_diff": "go", "resume_loss_max_abs_diff": "go"} and trained[0] == 0


def test_training_census_leaves_out_the_model_upload(trained):
    sections = trained[1]["sections"]
    census = sections["census"]
    weights = sections["load"]["parameters"] * 4  # float32
    batches = 2 * 2 * 16 * 8  # the census's two steps: 2 x 16 int64 token ids each
    # was the weights too: the model was copied to the device inside the census
    assert census["copies_bytes"]["cpu->neuron"] == batches < weights


def test_step_time_target_and_run_cost(trained):
    sections = trained[1]["sections"]
    training = sections["training"]
    assert training["time_per_step_s"] > 0 and training["time_to_loss_target_s"] == training["target"]["step_seconds"][0]
    # host time per step on the simulated device is never priced (Note [Deciding figures])
    assert trained[1]["target_simulated"] and "target" not in sections["cost"]["running"]
    assert "price_per_hour.cpu" in sections["cost"]["missing_price_notes"]["baseline"]
    assert sections["census"]["covers"].startswith("two training steps")
    assert any(o["op"] == "aten::mm" for o in sections["census"]["ops"])
    assert any(op.startswith("aten::_fused_adamw") or op.startswith("aten::_foreach") or op.startswith("aten::addcdiv")
               for op in [o["op"] for o in sections["census"]["ops"]])


def test_fallbacks_predicted_from_a_census_on_another_device_are_the_measured_ones(trained):
    """The second workload of issue 40's check (the demo's is in test_migrate_run.py): a training
    step's ops (backward, AdamW) predicted from the CPU baseline's census and from the device's
    census name the ops torch_neuronx.get_fallback_ops() measured."""
    from neuron_migrate.census import same_ops
    census = trained[1]["sections"]["census"]
    assert census["fallback_source"] == "measured"
    assert same_ops(census["fallback_ops_predicted_on_baseline"], census["fallback_ops"]), census
    assert same_ops(census["fallback_ops_predicted"], census["fallback_ops"]) and census["fallback_prediction_agrees"]


def test_failed_restart_check_keeps_the_loss_curves(tmp_path):
    # the model raises on the evaluated device only: the restart check cannot run there, but the
    # baseline's loss curve and the target's own error must stay in the report
    model = write(tmp_path, "shy.py", """
import torch

class DeviceShy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.head = torch.nn.Linear(16, 64)

    def forward(self, input_ids):
        if input_ids.device.type != "cpu":
            raise NotImplementedError("this model's custom kernel runs on the CPU only")
        return self.head(self.embed(input_ids))

def build():
    torch.manual_seed(0)
    return DeviceShy()
""")
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "shy"
task = "train"
[model]
factory = "{model}:build"
[inputs]
prompt_lengths = [4]
vocab_limit = 64
[train]
steps = 4
checkpoint_at = 2
batch_size = 2
seq_len = 8
[compile]
enabled = false
[gates]
resume_loss_max_abs_diff = 0.0
""")
    status, report = run(path, str(tmp_path / "r"))
    training = report["sections"]["training"]
    assert "error" not in training and len(training["baseline"]["loss"]) == 4
    assert "custom kernel runs on the CPU only" in training["target"]["error"]
    messages = [f["message"] for f in report["findings"] if f["section"] == "training"]
    assert any("target training raised" in m for m in messages)
    assert any("restart check skipped" in m for m in messages)
    assert report["sections"]["verdict"][0]["verdict"] == "not measured" and status == 3


def test_restart_check_that_raises_is_a_finding(tmp_path, monkeypatch):
    from neuron_migrate import training

    def no_checkpoint(workload, device):
        raise RuntimeError("the first training process wrote no checkpoint: disk full")

    monkeypatch.setattr(training, "kill_and_resume", no_checkpoint)
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "restart-fails"
task = "train"
[model]
factory = "{os.path.join(DATA, 'custom_models.py')}:filtered"
[inputs]
prompt_lengths = [4]
vocab_limit = 64
[train]
steps = 4
checkpoint_at = 2
batch_size = 2
seq_len = 8
[compile]
enabled = false
""")
    status, report = run(path, str(tmp_path / "r"), "--on", "cpu")
    training_section = report["sections"]["training"]
    assert len(training_section["target"]["loss"]) == len(training_section["baseline"]["loss"]) == 4
    assert training_section["loss_max_abs_diff"] == 0.0 and "restart" not in training_section
    finding = next(f for f in report["findings"] if f["section"] == "training")
    assert "restart check failed: RuntimeError: the first training process wrote no checkpoint" in finding["message"]


def _restart_children(marker):
    """Pids of restart-check children whose command line names `marker` (the workload file)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().split(b"\0")
        except OSError:
            continue
        if b"neuron_migrate.resume_worker" in command and marker.encode() in command:
            found.append(int(pid))
    return found


def test_restart_child_does_not_outlive_a_killed_run(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from migrate_helpers import ROOT
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "orphan"
task = "train"
[model]
factory = "{os.path.join(DATA, 'custom_models.py')}:filtered"
[inputs]
prompt_lengths = [4]
vocab_limit = 64
[train]
steps = 6
checkpoint_at = 3
batch_size = 2
seq_len = 8
[compile]
enabled = false
""")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), HF_HUB_OFFLINE="1")
    run_process = subprocess.Popen([sys.executable, "-m", "neuron_migrate", "run", path, "--on", "cpu",
                                    "--baseline", "cpu", "--out", str(tmp_path / "r"), "--no-progress"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not _restart_children(path) and run_process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _restart_children(path), "the restart check never started"
    run_process.kill()  # the run dies without clean-up (OOM killer, CI timeout)
    run_process.wait()
    deadline = time.monotonic() + 120  # a liveness bound, not a timing: the child needs seconds
    while _restart_children(path) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _restart_children(path)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the restart check's child outlived the run (it trained forever)"


def _gpt2_with_dropout(folder):
    from transformers import AutoConfig
    path = os.path.join(folder, "gpt2")
    # GPT-2's default config: dropout 0.1 in embeddings, attention and residuals
    AutoConfig.for_model("gpt2", vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                          bos_token_id=1, eos_token_id=2).save_pretrained(path)
    return path


def test_dropout_draws_repeat_in_every_run_and_after_a_restart(tmp_path):
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "dropout-restart"
task = "train"
[model]
path = "{_gpt2_with_dropout(tmp_path)}"
random_init = true
[inputs]
prompt_lengths = [4]
[train]
steps = 4
checkpoint_at = 2
batch_size = 2
seq_len = 8
[compile]
enabled = false
[fit]
platforms = ["trn2"]
tp = [1]
[gates]
resume_loss_max_abs_diff = 0.0
""")
    status, report = run(path, str(tmp_path / "r"), "--baseline", "neuron")
    training_section = report["sections"]["training"]
    # the same device twice: the same dropout draws, the same losses
    assert training_section["loss_max_abs_diff"] == 0.0, training_section["target"]["loss"]
    restart = training_section["restart"]
    assert restart["max_abs_diff"] == 0.0 and len(restart["losses_after_restart"]) == 2, restart
