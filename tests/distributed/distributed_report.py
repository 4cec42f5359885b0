"""The report a distributed test worker writes (one JSON file per rank): every check's
[passed, detail], read back by the test. Shared by the workers run under torchrun."""
import json
import os
import traceback

import torch.distributed as dist

RESULTS = {}


def check(name):
    """Decorator: runs the check now and records [passed, detail]."""
    def run(function):
        try:
            detail = function()
            RESULTS[name] = [True, detail if detail is not None else ""]
        except Exception:  # noqa: BLE001 - the report carries it
            RESULTS[name] = [False, traceback.format_exc(limit=8)]
        return function
    return run


def write(out_dir):
    """Writes this rank's report (atomically: a test may read it while a rank is killed)."""
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"])
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as out:
        json.dump(RESULTS, out, indent=1)
    os.replace(path + ".tmp", path)
