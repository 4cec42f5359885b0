"""Child process of the restart check (`python -m neuron_migrate.resume_worker`).

`first WORKLOAD DEVICE FOLDER PARENT_PID`: builds the workload's model as the run does, trains
`train.checkpoint_at` steps, writes FOLDER/checkpoint.pt (model + optimizer state + random
generator states, written atomically), then keeps training until the parent kills it, or until
the parent is gone (a run killed with SIGKILL cannot kill it: it must not train forever).
`resume WORKLOAD DEVICE FOLDER`: builds the model afresh, loads the checkpoint, trains the
remaining steps and writes their losses to FOLDER/resumed.json."""
import json
import os
import sys

import torch

from . import devices, training
from .loading import build_cpu_model, training_batches
from .workload import load


def main(argv):
    phase, workload_path, device, folder = argv[:4]
    workload = load(workload_path)
    loaded_cpu = build_cpu_model(workload)
    batches = training_batches(loaded_cpu, workload)
    at = workload.train.checkpoint_at
    loaded = training.fresh(loaded_cpu, device)
    optimizer = training.adamw(loaded.model.parameters(), workload.train.lr)
    checkpoint = os.path.join(folder, "checkpoint.pt")
    if phase == "first":
        torch.manual_seed(workload.seed)  # as training.run does
        training.steps(loaded, optimizer, batches[:at], device, training.new_record())
        devices.synchronize(device)
        torch.save({"model": loaded.model.state_dict(), "optimizer": optimizer.state_dict(), "step": at,
                    "rng": devices.rng_state(device)}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)
        parent = int(argv[4])
        while os.getppid() == parent:  # on until killed, as a real job would be; never outlives the run
            training.steps(loaded, optimizer, batches[at:], device, training.new_record())
        return 0
    state = torch.load(checkpoint, map_location=device)
    loaded.model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    devices.set_rng_state(device, state["rng"])  # dropout draws go on where they stopped
    record = training.new_record()
    training.steps(loaded, optimizer, batches[at:], device, record)
    with open(os.path.join(folder, "resumed.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
