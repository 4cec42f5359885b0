"""Fits platforms.toml's `tensor_utilization` (the share of TensorE's peak a matmul achieves) to
the two TTFT figures among the rows given for calibration (docs/device-clock.md, "Prefill"): the
value for which their errors are equal and opposite (the smaller largest |error|; both fall as the
value rises). Each trial runs the dry run in a fresh process whose device clock reads a copy of
the platform data file with the trial value (the clock caches its cost models once built);
bisection to 0.1%.

    .venv/bin/python scripts/fit_tensor_utilization.py      # prints the value (about 2 minutes)

The value goes into platforms.toml by hand, labelled fitted with this row as its source; every
other calibration row is a check of it."""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "python", "torch_neuron_sim", "data", "platforms.toml")
ROWS = (("Llama-3.3-70B", "ttft_ms"), ("Llama-3.1-8B", "ttft_ms"))  # the rows given (torchneuron-2.33-delta.md 2.2)

TRIAL = """
import json, os, sys
import torch_neuron_sim
from torch_neuron_sim import _C, calibration, dry_run
_C._start_device_clock(sys.argv[1])  # before any cost model is built: the trial's constants
row = next(r for r in calibration.rows() if r["model"] == sys.argv[2] and sys.argv[3] in r)
p = dry_run.predict(os.path.join(calibration.ROOT, row["config"]), **calibration.row_arguments(row))
print(json.dumps({"predicted": getattr(p, sys.argv[3]), "published": row[sys.argv[3]]}))
"""


def error(value, folder):
    """The rows' errors (predicted / published - 1) with tensor_utilization = value."""
    with open(DATA) as f:
        text = f.read()
    path = os.path.join(folder, "platforms.toml")
    with open(path, "w") as f:
        f.write(re.sub(r"(?m)^tensor_utilization = \{ value = [0-9.]+",
                       f"tensor_utilization = {{ value = {value!r}", text))
    errors = []
    for row in ROWS:
        done = subprocess.run([sys.executable, "-c", TRIAL, path, *row], capture_output=True, text=True, check=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        result = json.loads(done.stdout.strip().splitlines()[-1])
        errors.append(result["predicted"] / result["published"] - 1)
    return errors


def main():
    low, high = 0.05, 1.0
    with tempfile.TemporaryDirectory() as folder:
        while high - low > 0.001:
            middle = (low + high) / 2
            errors = error(middle, folder)
            print(f"tensor_utilization {middle:.4f}: errors " + ", ".join(f"{e:+.1%}" for e in errors))
            if sum(errors) > 0:  # both too slow on balance: TensorE is faster than this
                low = middle
            else:
                high = middle
    print(f"fitted tensor_utilization = {round((low + high) / 2, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
