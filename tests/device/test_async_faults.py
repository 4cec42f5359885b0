"""Asynchronous mode (NEURON_LAUNCH_BLOCKING=0): failures, waits and memory ordering.
Each case is a review finding (../shared/review/review-2026-11-30.md, items 6-11) that hung,
crashed or gave wrong data; each runs in its own process with a time limit, since the
failure mode is a hang. A kernel that fails on the stream's worker is made with an
out-of-range index: its meta kernel accepts it, its CPU kernel raises."""
import textwrap

import pytest

from conftest import run_python

# Every op that can be queued is queued (NEURON_SIM_INLINE_BYTES=0): these cases test the
# queue itself, and small ops on an idle stream would otherwise run at the call (Note [Small
# ops on an idle stream], tests/device/test_async.py).
ASYNC = {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_INLINE_BYTES": "0"}
FAIL_ON_WORKER = """
import torch, torch_neuronx, threading, os
x = torch.randn(4, 4, device="neuron")
y = torch.randn(256, 256, device="neuron")
# The first call of a dtype signature runs inline (Note [Asynchronous kernels]): make every
# signature used below once before the failure, so that they are queued after it.
x.index_select(0, torch.tensor([1], device="neuron")); x * 2; y * 2; torch.ones(4, device="neuron") * 3
torch.neuron.synchronize()
bad = x.index_select(0, torch.tensor([10], device="neuron"))   # queued: fails on the stream's worker
"""


def run(*parts, env=ASYNC, timeout=60):
    return run_python("\n".join(textwrap.dedent(part) for part in parts), env=env, timeout=timeout)


def test_shape_errors_are_raised_at_the_call():
    result = run("""
        import torch, torch_neuronx
        a, b = torch.randn(2, 3, device="neuron"), torch.randn(4, 5, device="neuron")
        try:
            a @ b
        except RuntimeError as e:
            print("at the call:", "cannot be multiplied" in str(e))
        print("later op:", (torch.ones(3, device="neuron") + 1).cpu().tolist())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["at the call: True", "later op: [2.0, 2.0, 2.0]"]


def test_failed_stream_skips_work_without_deadlock_and_keeps_its_error():
    # item 7: skipped tasks were destroyed under the stream's lock; 8c: the error cleared
    result = run(FAIL_ON_WORKER, """
        for _ in range(200):
            t = x * 2          # skipped; dropping it releases its buffers
            del t
        z = y * 2              # skipped: its output was never computed
        for attempt in range(2):
            try:
                torch.neuron.synchronize()
                print("no error")
            except RuntimeError as e:
                print("sync raised:", "index out of range" in str(e))
        try:
            print("read:", z.cpu()[0, 0].item())
        except RuntimeError as e:
            print("read raised:", "index out of range" in str(e))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["sync raised: True", "sync raised: True", "read raised: True"]


def test_events_after_a_failure_fail_instead_of_hanging_and_exit_is_clean():
    # item 8a: Event.synchronize never returned; a stream waiting on it aborted the exit
    result = run(FAIL_ON_WORKER, """
        ev = torch.Event(device="neuron")
        ev.record()
        try:
            ev.synchronize()
        except RuntimeError as e:
            print("event:", "index out of range" in str(e))
        s = torch.neuron.Stream()
        s.wait_event(ev)
        try:
            s.synchronize()
        except RuntimeError as e:
            print("waiting stream:", "index out of range" in str(e))
        print("exiting")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["event: True", "waiting stream: True", "exiting"]
    assert "terminate" not in result.stderr and "Abort" not in result.stderr


def test_synchronize_drains_every_stream_after_one_fails():
    # item 8e: Runtime::synchronize stopped at the first failing stream
    result = run(FAIL_ON_WORKER, """
        side = torch.neuron.Stream()
        with torch.neuron.stream(side):
            torch.neuron._sleep(200_000_000)      # 0.2 s of work on the side stream
            done = torch.ones(4, device="neuron") * 3
        try:
            torch.neuron.synchronize()
        except RuntimeError:
            pass
        print("side drained:", side.query())
    """)
    assert result.returncode == 0, result.stderr
    assert "side drained: True" in result.stdout


@pytest.mark.parametrize("path", ["empty_cache", "acc_empty", "save", "storage_cpu", "tolist", "item",
                                  "event_sync", "nonzero", "resize"])
def test_host_waits_holding_the_gil_do_not_deadlock(path):
    # item 6: a task dropping a Python-owned tensor needed the GIL the waiting thread held
    result = run(f"""
        import torch, torch_neuronx, io
        x = torch.randn(512, 512, device="neuron")
        torch.neuron.synchronize()
        for _ in range(10):
            y = x @ x
        what = {path!r}
        if what == "empty_cache": torch.neuron.empty_cache()
        elif what == "acc_empty": torch.accelerator.empty_cache()
        elif what == "save": torch.save(y, io.BytesIO())
        elif what == "storage_cpu": y.untyped_storage().cpu()
        elif what == "tolist": y[0, :2].tolist()
        elif what == "item": y[0, 0].item()
        elif what == "event_sync":
            e = torch.Event(device="neuron"); e.record(); e.synchronize()
        elif what == "nonzero": (y > 0).nonzero()
        elif what == "resize": y.resize_(1024, 512)
        print(what, "ok")
    """, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"{path} ok" in result.stdout


def test_pinned_source_freed_right_after_a_non_blocking_copy():
    # item 9: the queued copy read the freed pinned buffer
    result = run("""
        import torch, torch_neuronx, gc
        x = torch.randn(1024, 1024, device="neuron")
        torch.neuron.synchronize()
        for _ in range(20):
            y = x @ x
        src = torch.full((8 << 20,), 7.0).pin_memory()
        dst = torch.empty(8 << 20, device="neuron")
        dst.copy_(src, non_blocking=True)
        del src; gc.collect()
        junk = [torch.full((8 << 20,), -1.0).pin_memory() for _ in range(2)]
        print("dst all 7:", bool((dst.cpu() == 7.0).all()))
    """)
    assert result.returncode == 0, result.stderr
    assert "dst all 7: True" in result.stdout


def test_memory_used_by_a_side_stream_is_not_reused_early():
    # item 10: frees were ordered on stream 0 only; record_stream raised
    result = run("""
        import torch, torch_neuronx
        N = 4 << 20
        x = torch.randn(1024, 1024, device="neuron")
        src = torch.full((N,), 7.0, device="neuron"); dst = torch.empty(N, device="neuron")
        torch.neuron.synchronize()
        s = torch.neuron.Stream()
        with torch.neuron.stream(s):
            for _ in range(20):
                y = x @ x
            dst.copy_(src, non_blocking=True)
        src.record_stream(s)
        del src
        torch.neuron.current_stream().synchronize()
        z = torch.full((N,), -1.0, device="neuron")
        torch.neuron.synchronize()
        print("dst == 7:", bool((dst.cpu() == 7).all()))
    """)
    assert result.returncode == 0, result.stderr
    assert "dst == 7: True" in result.stdout


def test_record_stream_delays_reuse_until_the_stream_passes():
    result = run("""
        import torch, torch_neuronx
        s = torch.neuron.Stream()
        t = torch.ones(1 << 20, device="neuron")
        torch.neuron.synchronize()
        with torch.neuron.stream(s):
            torch.neuron._sleep(300_000_000)     # s is busy for 0.3 s
        t.record_stream(s)
        ptr = t.data_ptr()
        del t
        u = torch.empty(1 << 20, device="neuron")
        print("reused while s is busy:", u.data_ptr() == ptr)
        print("pending:", torch.neuron.memory_stats()["pending_frees"])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["reused while s is busy: False", "pending: 1"]


def test_no_spurious_out_of_memory_while_frees_are_queued():
    # item 11: the allocator raised before queued work had freed the previous results
    result = run("""
        import torch, torch_neuronx
        x = torch.randn(1024, 1024, device="neuron")          # 4 MiB of a 24 MiB budget
        torch.neuron.synchronize()
        for i in range(50):
            y = x @ x
        torch.neuron.synchronize()
        print("ok", torch.neuron.memory_stats()["num_ooms"])
    """, env=dict(ASYNC, NEURON_SIM_HBM_BYTES_PER_CORE=str(24 << 20)))
    assert result.returncode == 0, result.stderr
    assert "ok 0" in result.stdout


def test_a_forward_waits_on_the_host_only_where_a_value_is_read():
    # review 3c: 250 enqueues and 68 host waits per forward of the 2-layer tiny Llama
    result = run("""
        import sys, torch, torch_neuronx
        sys.path.insert(0, "tests")
        from tiny_models import build
        from torch_neuron_sim import _C
        m = build("llama").to("neuron")
        ids = torch.randint(0, 128, (1, 32), device="neuron")
        with torch.no_grad():
            m(ids); torch.neuron.synchronize()            # first calls check meta against the CPU
            e0, w0 = _C.stream_counters()
            logits = m(ids).logits
            e1, w1 = _C.stream_counters()
            logits.sum().item()
            e2, w2 = _C.stream_counters()
        print(e1 - e0, w1 - w0, w2 - w1)
    """)
    assert result.returncode == 0, result.stderr
    enqueues, waits_in_forward, waits_on_read = map(int, result.stdout.split())
    assert enqueues > 50 and waits_in_forward == 0 and waits_on_read <= 1  # none if the stream was done


# ---- review 7 (docs: ../shared/review is the model; repros kept as these tests) ------------

def test_a_failure_is_the_devices_so_no_stream_reads_skipped_outputs():
    # review 7, item 2: the failure was per stream; a side stream read skipped outputs as zeros
    result = run(FAIL_ON_WORKER, """
        z = torch.ones(4, device="neuron") * 3       # skipped
        try:
            torch.neuron.synchronize()
        except RuntimeError:
            pass
        side = torch.neuron.Stream()
        with torch.neuron.stream(side):
            try:
                print("read:", z.cpu().tolist())
            except RuntimeError as e:
                print("side stream raised:", "index out of range" in str(e))
    """)
    assert result.returncode == 0, result.stderr
    assert "side stream raised: True" in result.stdout


def test_queued_kernels_do_not_run_out_of_memory_the_host_took_meanwhile():
    # review 7, item 3: a queued kernel's own allocations came from the device and could not
    # wait for memory, so the loop below failed the stream in asynchronous mode
    result = run("""
        import torch, torch_neuronx
        x = torch.randn(1024, 1024, device="neuron", dtype=torch.float64)
        (x @ x).sum(); torch.neuron.synchronize()
        sums = [(x @ x).sum() for i in range(12)]
        print("ok", sum(s.item() for s in sums) == sum(s.item() for s in sums), torch.neuron.memory_stats()["num_ooms"])
    """, env=dict(ASYNC, NEURON_SIM_HBM_BYTES_PER_CORE=str(64 << 20)))
    assert result.returncode == 0, result.stderr
    assert "ok True 0" in result.stdout


def test_overlapping_out_arguments_raise_at_the_call():
    # review 7, item 7: the overlap error surfaced on the worker and failed the stream
    result = run("""
        import torch, torch_neuronx
        x = torch.arange(8.0, device="neuron")
        y = torch.empty(7, device="neuron")
        torch.add(x[:-1], x[1:], out=y); torch.neuron.synchronize()
        try:
            torch.add(x[:-1], x[1:], out=x[1:])
            print("no error at the call")
        except RuntimeError as e:
            print("raised at the call:", "unsupported operation" in str(e))
        print("later:", (torch.ones(2, device="neuron") * 3).cpu().tolist())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["raised at the call: True", "later: [3.0, 3.0]"]


def test_changing_scalars_do_not_make_calls_wait():
    # review 7, item 8: every new scalar value counted as a first call (a host wait each)
    result = run("""
        import torch, torch_neuronx
        from torch_neuron_sim import _C
        x = torch.randn(256, 256, device="neuron"); p = torch.randn(256, 256, device="neuron")
        p.add_(x @ x, alpha=-0.5); torch.neuron.synchronize()
        e0, w0 = _C.stream_counters()
        for i in range(1, 50):
            p.add_(x @ x, alpha=-(0.5 + i * 1e-3))
        e1, w1 = _C.stream_counters()
        m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to("neuron")
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        inp = torch.randn(32, 64, device="neuron")
        for step in range(3):
            opt.zero_grad(); m(inp).sum().backward(); opt.step()
        torch.neuron.synchronize()
        e2, w2 = _C.stream_counters()
        for step in range(10):
            opt.zero_grad(); m(inp).sum().backward(); opt.step()
        e3, w3 = _C.stream_counters()
        print(w1 - w0, w3 - w2, e1 - e0 > 90)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "0", "True"]
