"""The same behaviour with asynchronous streams (NEURON_LAUNCH_BLOCKING=0): hot ops are
enqueued on the current stream and the host syncs on reads."""
import os
import subprocess
import sys

from conftest import TESTS


def test_feature_suites_pass_in_asynchronous_mode():
    # The default policy: small ops on an idle stream at the call, the rest queued (Note
    # [Small ops on an idle stream]), so ops at the call and queued ones interleave. `make
    # test` also runs the guarded subset with every op queued (NEURON_SIM_INLINE_BYTES=0), as
    # do the queue-machinery cases of test_async_faults.py.
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_SHARED_CORES="0")
    suites = ["kernels/test_ops.py", "device/test_autograd_amp.py", "device/test_memory.py", "kernels/test_rng.py",
              "device/test_threads_fork.py", "device/test_generate.py::test_forward_logits_match_cpu"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *[os.path.join(TESTS, s) for s in suites], "-k", "llama or not generate"],
        env=env, capture_output=True, text=True, timeout=600, cwd=TESTS)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_hot_ops_run_on_the_stream_thread():
    code = (
        "import torch, torch_neuronx\n"
        "x = torch.randn(512, 512, device='neuron')\n"
        "torch.neuron.synchronize()\n"
        "ys = [x @ x for _ in range(20)]\n"          # enqueued, not yet run
        "pending = not torch.neuron.current_stream().query()\n"
        "torch.neuron.synchronize()\n"
        "print(pending, torch.neuron.current_stream().query())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_SHARED_CORES="0"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


SMALL_OPS = """
import torch, torch_neuronx
from torch_neuron_sim import _C
x = torch.randn(8, 8, device="neuron")
big = torch.randn(512, 512, device="neuron")
x * 2; x + x; big @ big; big * 2                  # first calls of each signature run inline
torch.neuron.synchronize()

def enqueued(f):
    before, _ = _C.stream_counters()
    value = f()
    after, _ = _C.stream_counters()
    return value, after - before
"""


def run_small_ops(code, **env):
    result = subprocess.run([sys.executable, "-c", SMALL_OPS + code], capture_output=True, text=True,
                            env=dict(os.environ, NEURON_LAUNCH_BLOCKING="0", NEURON_SIM_SHARED_CORES="0", **env), timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_small_ops_on_an_idle_stream_run_at_the_call():
    # Note [Small ops on an idle stream]: nothing to hand to the worker for a 256-byte
    # multiply behind an empty queue; the direct path and the generic path both take it.
    out = run_small_ops("""
y, n_direct = enqueued(lambda: x * 2)             # hot op (direct path)
z, n_generic = enqueued(lambda: torch.tanh(x))    # generic path
t, n_upload = enqueued(lambda: torch.tensor([3, 4], device="neuron"))   # host -> device copy
print(n_direct, n_generic, n_upload, torch.equal(y.cpu(), x.cpu() * 2), torch.equal(z.cpu(), torch.tanh(x.cpu())),
      t.tolist() == [3, 4])
""")
    assert out == ["0", "0", "0", "True", "True", "True"]


def test_small_ops_behind_pending_work_are_queued_in_order():
    out = run_small_ops("""
_C._stream_sleep(200_000_000)   # the stream is busy for 0.2 s
w = torch.empty(8, 8, device="neuron")
_, n_copy = enqueued(lambda: w.copy_(x))
y, n_mul = enqueued(lambda: w * 2)               # reads w: must run after the queued copy
pending = not torch.neuron.current_stream().query()
print(n_copy, n_mul, pending, torch.equal(y.cpu(), x.cpu() * 2))
""")
    assert out == ["1", "1", "True", "True"]


def test_large_ops_are_queued_and_the_limit_is_configurable():
    code = """
_, n_big = enqueued(lambda: big * 2)              # 1 MiB operand: queued
torch.neuron.synchronize()
_, n_small = enqueued(lambda: x * 2)
print(n_big, n_small)
"""
    assert run_small_ops(code) == ["1", "0"]
    assert run_small_ops(code, NEURON_SIM_INLINE_BYTES="0") == ["1", "1"]          # queue every op
    assert run_small_ops(code, NEURON_SIM_INLINE_BYTES="4194304") == ["0", "0"]    # 4 MiB: both at the call


def test_a_small_op_at_the_call_raises_there_and_fails_nothing():
    # An error of an op run at the call is raised at the call (as launch-blocking does); the
    # stream is not failed, so later work runs.
    out = run_small_ops("""
x.index_select(0, torch.tensor([1], device="neuron"))
bad = torch.tensor([10], device="neuron")
torch.neuron.synchronize()
try:
    x.index_select(0, bad)
    print("no-error")
except (IndexError, RuntimeError) as e:
    print("raised")
print(torch.equal((x * 3).cpu(), x.cpu() * 3))
""")
    assert out == ["raised", "True"]


def test_kernel_bodies_follow_the_small_ops_policy():
    # Review 11, finding 4: a fused LSTM cell re-ran its whole body on meta tensors at every
    # asynchronous call (50x the blocking cost). A small cell on an idle stream now runs at
    # the call (no meta run, nothing queued); behind pending work it is queued, with the
    # same values.
    out = run_small_ops("""
A = torch.ops.aten
ig, hg, cx = (torch.randn(8, 256, device="neuron"), torch.randn(8, 256, device="neuron"),
              torch.randn(8, 64, device="neuron"))
i, f, g, o = (ig.cpu() + hg.cpu()).chunk(4, 1)
cy = f.sigmoid() * cx.cpu() + i.sigmoid() * g.tanh()
expected = (o.sigmoid() * cy.tanh(), cy)             # CUDA's contract: (hy, cy, workspace)
r, n_idle = enqueued(lambda: A._thnn_fused_lstm_cell(ig, hg, cx))
_C._stream_sleep(50_000_000)
A._thnn_fused_lstm_cell(ig, hg, cx)    # first call behind work: drains, runs, checks its meta run
_C._stream_sleep(50_000_000)
q, n_busy = enqueued(lambda: A._thnn_fused_lstm_cell(ig, hg, cx))
same = all(torch.allclose(a.cpu(), b) for a, b in zip(r, expected)) and all(
    torch.equal(a.cpu(), b.cpu()) for a, b in zip(q, r))
print(n_idle, n_busy >= 1, same)
""")
    assert out == ["0", "True", "True"]
