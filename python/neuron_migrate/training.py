"""Training on one device: loss and gradient norm per step, time per step, and a restart
from a checkpoint file that must reproduce the uninterrupted run's losses."""
import copy
import os
import tempfile
import time
import traceback

import torch

from . import devices, stopping
from .loading import LoadedModel, causal_lm_loss


def _fresh(loaded_cpu, device):
    model = copy.deepcopy(loaded_cpu.model).to(device).train()
    return LoadedModel(model, loaded_cpu.tokenizer, loaded_cpu.config, loaded_cpu.is_hf)


def _steps(loaded, optimizer, batches, device, record):
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


def run(loaded_cpu, device, batches, lr):
    """The uninterrupted run: {loss, grad_norm, step_seconds} per step (or an error)."""
    record = {"loss": [], "grad_norm": [], "step_seconds": []}
    try:
        torch.manual_seed(0)
        loaded = _fresh(loaded_cpu, device)
        optimizer = torch.optim.AdamW(loaded.model.parameters(), lr=lr)
        _steps(loaded, optimizer, batches, device, record)
    except stopping.StopRequested:
        raise
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()
    return record


def restart_from_checkpoint(loaded_cpu, device, batches, lr, checkpoint_at):
    """Runs `checkpoint_at` steps, saves model and optimizer state to a file, drops every
    object, builds fresh ones from the file and runs the remaining steps. Returns the losses
    after the restart. (The restart is in the same process: fresh model and optimizer
    objects, state only from the file.)"""
    record = {"loss": [], "grad_norm": [], "step_seconds": []}
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-ckpt-") as folder:
        path = os.path.join(folder, "checkpoint.pt")
        torch.manual_seed(0)
        loaded = _fresh(loaded_cpu, device)
        optimizer = torch.optim.AdamW(loaded.model.parameters(), lr=lr)
        _steps(loaded, optimizer, batches[:checkpoint_at], device, {"loss": [], "grad_norm": [], "step_seconds": []})
        devices.synchronize(device)
        torch.save({"model": loaded.model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": checkpoint_at}, path)
        checkpoint_bytes = os.path.getsize(path)
        del loaded, optimizer
        loaded = _fresh(loaded_cpu, device)
        optimizer = torch.optim.AdamW(loaded.model.parameters(), lr=lr)
        state = torch.load(path, map_location=device)
        loaded.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        _steps(loaded, optimizer, batches[checkpoint_at:], device, record)
    record["checkpoint_bytes"] = checkpoint_bytes
    return record


def summary(target, baseline, restart, checkpoint_at, loss_target):
    """The training part of the quality and speed sections."""
    result = {"target": target, "baseline": baseline}
    if target["loss"] and baseline["loss"]:
        pairs = list(zip(target["loss"], baseline["loss"]))
        result["loss_max_abs_diff"] = max(abs(a - b) for a, b in pairs)
        result["final_loss"] = {"target": target["loss"][-1], "baseline": baseline["loss"][-1]}
        norms = list(zip(target["grad_norm"], baseline["grad_norm"]))
        result["grad_norm_max_rel_diff"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in norms)
    if restart is not None and target["loss"]:
        after = target["loss"][checkpoint_at:]
        diffs = [abs(a - b) for a, b in zip(restart["loss"], after)]
        result["restart"] = {"checkpoint_at": checkpoint_at, "losses_after_restart": restart["loss"],
                             "uninterrupted_losses": after, "max_abs_diff": max(diffs) if diffs else None,
                             "checkpoint_bytes": restart.get("checkpoint_bytes"), "error": restart.get("error"),
                             "how": "same process: state saved to a file, every object dropped, rebuilt from the file"}
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
