"""Adaptive Eager Execution (Note [Adaptive Eager Execution], csrc/Launch.h; Note [Concatenation
buffer], runtime/stream.h): queued elementwise and reduction ops buffered per stream and run as
one group, bit-exact with unfused execution, in stream order, off under deterministic
algorithms; on the device clock a group is one launch. Each case runs in a fresh process: the
asynchronous mode and the switch are read when the runtime starts."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, TESTS

ASYNC = {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_SHARED_CORES": "0"}
AEE = dict(ASYNC, TORCH_NEURONX_ENABLE_CONCATENATION="1")


def child(code, env, timeout=300):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                            env=dict(os.environ, HF_HUB_OFFLINE="1", **env))
    return result


def last_json(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_opinfo_elementwise_op_gives_the_same_bits_fused_and_unfused():
    # Every op queued (NEURON_SIM_INLINE_BYTES=0), so that the fused side groups every sample.
    result = subprocess.run([sys.executable, os.path.join(TESTS, "device", "aee_pointwise_worker.py")],
                            capture_output=True, text=True, timeout=1200,
                            env=dict(os.environ, NEURON_SIM_INLINE_BYTES="0",
                                     TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD="0", **ASYNC))
    report = last_json(result)
    assert report["differences"] == [], report["differences"]
    assert report["samples"] > 3000, report
    # the fused side grouped them: several ops per group on average
    assert report["grouped"] >= report["samples"] and report["grouped"] > 3 * report["groups"], report


CHAIN = """
import json, torch, torch_neuronx
from torch_neuron_sim import _C
x = torch.randn(64, 64, device="neuron")
w = torch.randn(64, 64, device="neuron")
(x * 2 + 1).relu().sum().item(); (x @ w).item() if False else None   # first calls of each signature
torch.neuron.synchronize()
def step():
    y = (x * 3 - 1).sigmoid() * x      # 4 pointwise ops: one group
    z = y @ w                          # a matmul ends it
    return (z.relu() + 1).mean(dim=-1)  # 3 ops: another group
_C._count_launches(True)
before = torch_neuronx.device_time()
out = step().cpu()
spent = torch_neuronx.device_time() - before
counts = _C._launch_counts()
_C._count_launches(False)
print(json.dumps({"counts": counts, "ms": spent, "groups": list(_C.concatenation_counters()),
                  "concatenating": _C.concatenating(), "sum": float(out.double().sum())}))
"""


def test_a_group_is_one_launch_on_the_device_clock():
    fused = last_json(child(CHAIN, AEE))
    plain = last_json(child(CHAIN, ASYNC))
    assert fused["concatenating"] and not plain["concatenating"]
    assert plain["counts"]["fused"] == 0
    # 7 admitted ops in two groups: 5 join the groups their first ops opened
    assert fused["counts"]["fused"] == 5, fused["counts"]
    launches = lambda counts: sum(counts.values()) - counts["fused"]  # noqa: E731
    assert launches(fused["counts"]) == launches(plain["counts"]) - 5
    assert fused["ms"] < plain["ms"]  # 5 eager launches fewer, the same work
    assert fused["sum"] == plain["sum"]


OVERLOADS = """
import json, torch, torch_neuronx
from torch_neuron_sim import _C
x = torch.randn(64, 64, device="neuron")
def step():
    y = (x * 2).relu()         # 2 pointwise ops: 1 joins
    m = y.max()                # aten::max (its default overload, a reduction the groups do not admit)
    z = (y + 1).sigmoid()      # add (the direct path names it "aten::add", no overload) opens, sigmoid joins
    return torch.max(z, y), m  # aten::max.other is pointwise: joins
step(); torch.neuron.synchronize()
_C._count_launches(True)
step(); torch.neuron.synchronize()
counts = _C._launch_counts()
_C._count_launches(False)
print(json.dumps({"counts": counts}))
"""


def test_an_op_name_without_overload_is_its_default_overload():
    """A launch's name without an overload means the op's default overload where it has one
    (aten::max: the reduction, not aten::max.other's elementwise maximum), and any overload of
    the name where it has none (the direct path's aten::add)."""
    counts = last_json(child(OVERLOADS, AEE))["counts"]
    assert counts["fused"] == 3, counts


def test_deterministic_algorithms_turn_it_off():
    code = CHAIN.replace("_C._count_launches(True)",
                         "torch.use_deterministic_algorithms(True)\n_C._count_launches(True)")
    report = last_json(child(code, AEE))
    assert not report["concatenating"]
    assert report["counts"]["fused"] == 0
    # set_deterministic_debug_mode sets the same flag
    code = CHAIN.replace("_C._count_launches(True)",
                         "torch.set_deterministic_debug_mode('warn')\n_C._count_launches(True)")
    assert last_json(child(code, AEE))["counts"]["fused"] == 0


def test_launch_blocking_mode_has_nothing_to_buffer():
    report = last_json(child(CHAIN, dict(AEE, NEURON_LAUNCH_BLOCKING="1")))
    assert not report["concatenating"] and report["counts"]["fused"] == 0 and report["groups"] == [0, 0]


BUFFER = """
import json, torch, torch_neuronx
from torch_neuron_sim import _C
x = torch.randn(256, 256, device="neuron")
y = x + 1; torch.neuron.synchronize()
stream = torch.neuron.current_stream()
big = torch.randn(1024, 1024, device="neuron"); big2 = big @ big   # queued: the stream has work
for _ in range(43):
    y = y + 1
buffered = _C.concatenation_buffered()
pending = not stream.query()
_C._count_launches(True)
for _ in range(40):
    y = y * 1
counts = _C._launch_counts()
_C._count_launches(False)
value = float(y[0, 0].item())       # a host read flushes and waits
expected = x.cpu() + 1
for _ in range(43):
    expected = expected + 1
groups, grouped = _C.concatenation_counters()
print(json.dumps({"buffered": buffered, "pending": pending, "groups": groups, "grouped": grouped,
                  "fused": counts["fused"], "value": value, "expected": float(expected[0, 0]),
                  "after": _C.concatenation_buffered()}))
"""


def test_buffer_limit_and_host_reads():
    report = last_json(child(BUFFER, dict(AEE, TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT="8",
                                          TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD="0",
                                          NEURON_SIM_CONCATENATION_QUIET_US="10000000")))
    assert report["value"] == report["expected"]
    assert report["pending"] and report["buffered"] == 3, report  # 43 = 5 groups of 8, and 3 waiting
    assert report["after"] == 0  # the read flushed it
    # groups of at most 8: the 83 admitted ops (less any that found the stream idle) in >= 11 groups
    assert report["grouped"] >= 80 and report["groups"] >= report["grouped"] / 8, report
    # on the clock too: of 40 ops, at most 7 of each 8 join a group
    assert 30 <= report["fused"] <= 35, report


def test_quiet_interval_flushes_without_a_wait():
    code = """
import json, time, torch, torch_neuronx
from torch_neuron_sim import _C
x = torch.randn(256, 256, device="neuron")
y = x + 1; torch.neuron.synchronize()
big = torch.randn(1024, 1024, device="neuron"); big2 = big @ big
for _ in range(5):
    y = y + 1
before = _C.concatenation_buffered()
deadline = time.time() + 20
while _C.concatenation_buffered() and time.time() < deadline:
    time.sleep(0.01)
print(json.dumps({"before": before, "after": _C.concatenation_buffered()}))
"""
    report = last_json(child(code, dict(AEE, NEURON_SIM_CONCATENATION_QUIET_US="1000",
                                        TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD="0")))
    assert report["before"] >= 1 and report["after"] == 0, report


def test_streams_and_events_keep_their_order():
    code = """
import json, torch, torch_neuronx
x = torch.randn(512, 512, device="neuron")
(x + 1).sum().item()
side = torch.neuron.Stream()
done = torch.neuron.Event()
results = []
for step in range(20):
    a = x @ x                                  # queued: the chain below is buffered behind it
    b = (a * 0.5 + step).tanh() * 2            # a group on the default stream
    done.record()                              # ends the group: the event is after it
    with torch.neuron.stream(side):
        side.wait_event(done)
        c = b.sum(dim=0) * 3                   # reads b on the other stream
        c = c + 0                              # buffered on the side stream
    torch.neuron.current_stream().wait_stream(side)
    results.append(c)
fused = torch.stack(results).cpu()
expected = []
xc = x.cpu()
for step in range(20):
    expected.append((((xc @ xc) * 0.5 + step).tanh() * 2).sum(dim=0) * 3 + 0)
expected = torch.stack(expected)
print(json.dumps({"max_error": float((fused - expected).abs().max())}))
"""
    # Against the unfused run: the same bits; against the CPU: close (matmul blocking may differ)
    fused = last_json(child(code, AEE))
    plain = last_json(child(code, ASYNC))
    assert fused["max_error"] == plain["max_error"]
    assert fused["max_error"] < 1e-2


def test_a_kernel_error_names_its_op():
    code = """
import torch, torch_neuronx
x = torch.arange(1, 4097, device="neuron")
zero = torch.zeros(4096, dtype=torch.long, device="neuron")
(x + 1).sum().item(); torch.div(x, x, rounding_mode="floor").sum().item()  # first calls of each signature (run at the call, checked)
big = torch.randn(1024, 1024, device="neuron"); big2 = big @ big   # the stream has work
try:
    y = x + 1
    z = torch.div(y, zero, rounding_mode="floor")   # integer division by zero: raises on the worker
    w = z * 2
    w.cpu()
except RuntimeError as error:
    print("ERROR:", error)
"""
    result = child(code, dict(AEE, NEURON_SIM_INLINE_BYTES="0"))
    assert result.returncode == 0, result.stderr[-3000:]
    message = result.stdout
    assert "ERROR:" in message and "aten::div" in message and "in a fused group" in message, message
    assert "ZeroDivisionError" in message or "division by zero" in message, message


def test_demo_decode_same_tokens_and_at_most_half_the_predicted_eager_time():
    code = """
import json, torch, torch_neuronx
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(%r, dtype=torch.bfloat16, device_map="neuron")
ids = torch.tensor([[1, 300, 301, 302, 303, 304, 305, 306]], device="neuron")
model.generate(ids, max_new_tokens=4, do_sample=False)
before = torch_neuronx.device_time()
out = model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
print(json.dumps({"tokens": out[0].tolist(), "ms": torch_neuronx.device_time() - before}))
""" % os.path.join(ROOT, "demo", "model")
    fused = last_json(child(code, AEE))
    plain = last_json(child(code, {"NEURON_LAUNCH_BLOCKING": "1"}))
    assert fused["tokens"] == plain["tokens"]
    assert fused["ms"] <= 0.5 * plain["ms"], (fused["ms"], plain["ms"])


@pytest.mark.parametrize("suite", ["kernels/test_ops.py", "device/test_autograd_amp.py", "device/test_streams.py"])
def test_feature_suites_pass_with_aee(suite):
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(TESTS, suite)],
                            env=dict(os.environ, **AEE), capture_output=True, text=True, timeout=900, cwd=TESTS)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
