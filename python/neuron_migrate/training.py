"""Training on one device: loss and gradient norm per step, time per step, and a restart
from a checkpoint after a kill that must reproduce the uninterrupted run's losses."""
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch

from . import stopping
from .loading import LoadedModel, causal_lm_loss
from .quality import worst


def new_record():
    return {"loss": [], "grad_norm": [], "step_seconds": []}


def fresh(loaded_cpu, device):
    """A copy of the CPU model on `device`, in training mode."""
    model = copy.deepcopy(loaded_cpu.model).to(device).train()
    return LoadedModel(model, loaded_cpu.tokenizer, loaded_cpu.config, loaded_cpu.is_hf)


def adamw(parameters, lr):
    """AdamW as CUDA and TorchNeuron run it by default (foreach: multi-tensor ops), on every device:
    PyTorch picks the single-tensor form (addcdiv_, addcmul_ per parameter) on the CPU, so the
    baseline would run other ops; with one form the losses compare devices, not implementations,
    and a census on any device names the ops the device runs (Note [Predicted fallbacks])."""
    return torch.optim.AdamW(parameters, lr=lr, foreach=True)


def steps(loaded, optimizer, batches, device, record):
    """One optimizer step per batch; appends loss, gradient norm and seconds to `record`."""
    for batch in batches:
        stopping.check()
        start = time.perf_counter()
        loss = causal_lm_loss(loaded, batch.to(device))
        loss.backward()
        grads = [p.grad for p in loaded.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        record["loss"].append(loss.item())
        record["grad_norm"].append(norm.item())
        record["step_seconds"].append(time.perf_counter() - start)


def run(loaded_cpu, device, batches, lr, seed, loaded=None):
    """The uninterrupted run: {loss, grad_norm, step_seconds} per step (or an error). Random
    draws (dropout) start from `seed` on every device and in the restart check's processes.
    `loaded`: the model already copied to `device` (default: a fresh copy of the CPU model)."""
    record = new_record()
    try:
        loaded = loaded or fresh(loaded_cpu, device)
        optimizer = adamw(loaded.model.parameters(), lr)
        torch.manual_seed(seed)  # the CPU's and every device's generator
        steps(loaded, optimizer, batches, device, record)
    except stopping.StopRequested:
        raise
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()
    return record


def kill_and_resume(workload, device, timeout_s=600):
    """The restart check with a real kill: a child process trains to the checkpoint, writes it
    and trains on; it is killed (SIGKILL) once the checkpoint is on disk; a second child loads
    it into fresh objects and trains the remaining steps. Returns their losses."""
    import neuron_migrate
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(neuron_migrate.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-restart-") as folder:
        command = [sys.executable, "-m", "neuron_migrate.resume_worker"]
        first = subprocess.Popen(command + ["first", workload.path, device, folder, str(os.getpid())], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        checkpoint = os.path.join(folder, "checkpoint.pt")
        deadline = time.monotonic() + timeout_s
        try:
            while not os.path.exists(checkpoint) and first.poll() is None and time.monotonic() < deadline:
                stopping.check()
                time.sleep(0.05)
        finally:  # also when the run stops here: the child trains until killed
            first.kill()  # SIGKILL: no clean-up in the child
            _, error = first.communicate()
        if not os.path.exists(checkpoint):
            raise RuntimeError(f"the first training process wrote no checkpoint: {error.decode()[-2000:]}")
        checkpoint_bytes = os.path.getsize(checkpoint)
        second = subprocess.run(command + ["resume", workload.path, device, folder], env=env,
                                capture_output=True, text=True, timeout=timeout_s)
        if second.returncode != 0:
            raise RuntimeError(f"the resumed training process failed: {second.stderr[-2000:]}")
        with open(os.path.join(folder, "resumed.json"), encoding="utf-8") as handle:
            record = json.load(handle)
    record["checkpoint_bytes"] = checkpoint_bytes
    record["killed_with"] = "SIGKILL" if first.returncode == -signal.SIGKILL else f"exit {first.returncode}"
    return record


def summary(target, baseline, restart, checkpoint_at, loss_target):
    """The training part of the quality and speed sections."""
    result = {"target": target, "baseline": baseline}
    if target["loss"] and baseline["loss"]:
        pairs = list(zip(target["loss"], baseline["loss"]))
        result["loss_max_abs_diff"] = worst(abs(a - b) for a, b in pairs)  # a NaN loss is not hidden
        result["final_loss"] = {"target": target["loss"][-1], "baseline": baseline["loss"][-1]}
        norms = list(zip(target["grad_norm"], baseline["grad_norm"]))
        result["grad_norm_max_rel_diff"] = worst(abs(a - b) / max(abs(b), 1e-12) for a, b in norms)
    if restart is not None and target["loss"]:
        after = target["loss"][checkpoint_at:]
        diffs = [abs(a - b) for a, b in zip(restart["loss"], after)]
        result["restart"] = {"checkpoint_at": checkpoint_at, "losses_after_restart": restart["loss"],
                             "uninterrupted_losses": after, "max_abs_diff": worst(diffs),
                             "checkpoint_bytes": restart.get("checkpoint_bytes"),
                             "killed_with": restart.get("killed_with"),
                             "how": "a training process killed after writing its checkpoint; a new process "
                                    "resumed from the file"}
    seconds = target["step_seconds"]
    if len(seconds) > 1:
        ordered = sorted(seconds[1:])
        result["time_per_step_s"] = ordered[len(ordered) // 2]
        result["first_step_s"] = seconds[0]
    if loss_target is not None and target["loss"]:
        elapsed = 0.0
        result["time_to_loss_target_s"] = None
        for loss, step_time in zip(target["loss"], seconds):
            elapsed += step_time
            if loss <= loss_target:
                result["time_to_loss_target_s"] = elapsed
                break
    return result
