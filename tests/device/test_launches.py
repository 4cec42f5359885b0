"""Note [Launches]: every piece of work the device runs passes one seam, once, with its path.
The device clock and the profiler's device track hook in there, so a path that skips it would
run work the clock never sees."""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, sys, torch, torch_neuronx
    from torch_neuron_sim import _C
    mode = sys.argv[1]
    a = torch.randn(8, 8, device="neuron")
    b = torch.randn(8, 8, device="neuron")
    big = torch.randn(256, 1024, device="neuron")   # 1 MiB: queued in asynchronous mode
    f = torch.compile(lambda x, y: (x @ y).relu() + 1, backend="neuron")
    f(a, b); torch.neuron.synchronize()              # compiled before counting

    def counted(fn):
        torch.neuron.synchronize()
        _C._count_launches(True)
        fn()
        torch.neuron.synchronize()
        counts = dict(_C._launch_counts())
        _C._count_launches(False)
        return counts

    print(json.dumps({
        "mm": counted(lambda: a @ b),                     # a direct kernel
        "erf": counted(lambda: torch.erf(a)),             # the generic path
        "big": counted(lambda: torch.erf(big)),           # queued when asynchronous
        "to_cpu": counted(lambda: big.cpu()),             # a copy
        "program": counted(lambda: f(a, b)),              # one compiled program
        "three": counted(lambda: [a + b, a * b, a - b]),  # three ops, three launches
    }))
""")


def run(mode):
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING="1" if mode == "blocking" else "0")
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def only(counts, **want):
    """The counts are exactly `want` on the named paths and 0 elsewhere."""
    full = {path: 0 for path in counts}
    full.update(want)
    return counts == full


@pytest.mark.parametrize("mode", ["blocking", "asynchronous"])
def test_each_launch_passes_the_seam_once_with_its_path(mode):
    c = run(mode)
    assert only(c["mm"], direct=1), c["mm"]
    assert only(c["erf"], generic=1), c["erf"]
    assert only(c["big"], **({"generic": 1} if mode == "blocking" else {"queued": 1})), c["big"]
    assert only(c["to_cpu"], copy=1), c["to_cpu"]
    assert only(c["program"], program=1), c["program"]
    assert sum(c["three"].values()) == 3, c["three"]


def test_nothing_is_counted_while_counting_is_off():
    from torch_neuron_sim import _C
    import torch
    import torch_neuronx  # noqa: F401
    _C._count_launches(False)
    before = dict(_C._launch_counts())
    torch.randn(4, device="neuron").add_(1).cpu()
    assert dict(_C._launch_counts()) == before
