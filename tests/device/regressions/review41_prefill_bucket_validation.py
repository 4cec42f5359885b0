"""prefill_bucket(..., buckets=) must refuse bad bucket lists with a ValueError that names them:
an empty list, bools, a bare int, numpy ints are accepted or fail obscurely now."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import torch_neuronx  # noqa
from torch_neuron_sim import dry_run as d
failures = []
def refused(buckets, note):
    try:
        got = d.prefill_bucket("nxdi", 100, 8192, buckets)
    except ValueError:
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{note}: {buckets!r} raised {type(e).__name__}: {e} (not a clear ValueError)")
        return
    failures.append(f"{note}: {buckets!r} accepted -> {got!r}")
refused([], "an empty list (falls back to the stack's rule silently)")
refused([True, 8192], "a bool as a bucket")
refused(4096, "a bare int, not a list")
refused([100.0], "a float")  # control: refused today
for f in failures: print("FAIL", f)
assert not failures
