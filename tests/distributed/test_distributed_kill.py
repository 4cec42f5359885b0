"""The c10d backend "neuron" when a rank is SIGKILLed in the middle of its work: during a loop
of big allreduces, and during tensor-parallel generation (tp_size=2). The survivor must raise
within the process group's timeout (not hang), with an error naming the collective; its
next collective on the broken group must fail too; `dist.destroy_process_group()`,
`dist.distributed_c10d._abort_process_group()` and the backend's own `abort()` must return;
and the survivor's process must exit.

Two plain processes (not torchrun: its agent would stop the survivor when the other rank
dies) run tests/distributed/distributed_kill_worker.py; each writes OUT_DIR/started<rank> once it is in
its loop, and the test then kills one. The killed rank is not reaped until the survivor has
exited (a zombie meanwhile, as under launchers that wait for rank 0 first): a dead peer must be
noticed all the same. Both transports are covered: shared memory (the default between ranks of
one host) and Gloo (NEURON_SIM_SHM_COLLECTIVES=0; the only one between hosts). Every wait here
has a timeout: a survivor that hangs is killed and the test fails saying where it hung.

Also: aborting a group from another thread ends a collective a live peer never joins."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

# minutes of 2-rank launches: `make test-distributed` runs them, `make test` does not
pytestmark = pytest.mark.distributed_extra

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "distributed_kill_worker.py")
WORLD = 2
GROUP_TIMEOUT = 15.0  # seconds: long enough to tell "at once" from "at the timeout"
START_TIMEOUT = 90.0  # until both ranks are in their loop (start-up, model loading)
EXIT_MARGIN = 20.0  # the survivor's clean-up and exit, past the group timeout
PROMPT = 5.0  # seconds: "at once" for a dead peer, well under GROUP_TIMEOUT
# what a TP generate's error may name (a regular expression)
COLLECTIVES = "allreduce|allgather|_allgather_base|allgather_into_tensor_coalesced|broadcast|reduce_scatter"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_env(rank, port, extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TORCHELASTIC_ERROR_FILE="")
    for name in ("GROUP_RANK", "NEURON_RT_VISIBLE_CORES", "GLOO_SOCKET_IFNAME"):
        env.pop(name, None)
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                "LOCAL_WORLD_SIZE": str(WORLD), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "KILL_TIMEOUT": str(GROUP_TIMEOUT)})
    env.update(extra)
    return env


def read_report(out_dir, rank):
    path = os.path.join(out_dir, f"rank{rank}.json")
    if not os.path.exists(path):
        return {}
    with open(path) as report:
        return json.load(report)


def run_and_kill(out_dir, args, victim, extra_env):
    """Starts both ranks, SIGKILLs `victim` once both are in their loop, waits for the
    survivor; returns (survivor's report, kill time, survivor's exit time, outputs)."""
    port = free_port()
    out_dir = str(out_dir)
    processes = [subprocess.Popen([sys.executable, WORKER, *args, out_dir], env=rank_env(rank, port, extra_env),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(WORLD)]
    survivor = 1 - victim

    def outputs():
        texts = []
        for rank, process in enumerate(processes):
            if process.poll() is None:
                process.kill()
            texts.append(f"--- rank {rank} ({process.wait(timeout=30)}):\n{(process.communicate()[0] or '')[-5000:]}")
        return "\n".join(texts)

    try:
        deadline = time.monotonic() + START_TIMEOUT
        markers = [os.path.join(out_dir, f"started{rank}") for rank in range(WORLD)]
        while not all(os.path.exists(marker) for marker in markers):
            if any(process.poll() is not None for process in processes) or time.monotonic() > deadline:
                pytest.fail(f"the ranks did not both reach their loop within {START_TIMEOUT} s:\n{outputs()}")
            time.sleep(0.02)
        killed_at = time.time()
        os.kill(processes[victim].pid, signal.SIGKILL)
        try:
            output = processes[survivor].communicate(timeout=GROUP_TIMEOUT + EXIT_MARGIN)[0]
        except subprocess.TimeoutExpired:
            report = read_report(out_dir, survivor)
            pytest.fail(f"HANG: rank {survivor} did not exit within {GROUP_TIMEOUT + EXIT_MARGIN} s of rank "
                        f"{victim}'s SIGKILL; its last report: {json.dumps(report, indent=1)[-3000:]}\n{outputs()}")
        exited_at = time.time()
        processes[victim].wait(timeout=30)
        assert processes[victim].returncode == -signal.SIGKILL, processes[victim].returncode
        assert processes[survivor].returncode == 0, \
            f"rank {survivor} exited {processes[survivor].returncode}:\n{output[-6000:]}"
        return read_report(out_dir, survivor), killed_at, exited_at, output
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def assert_survivor_failed_cleanly(report, killed_at, exited_at, survivor, collective, output,
                                   timeout=GROUP_TIMEOUT):
    """The checks every scenario shares; returns a timing summary."""
    assert report.get("error"), f"rank {survivor} raised nothing: {report}\n{output[-3000:]}"
    error = report["error"]
    latency = report["error_time"] - killed_at
    # Within the group's timeout: the Work's deadline is at most that far from the kill (plus
    # the scheduling of a loaded machine).
    assert latency < timeout + 0.5, (latency, error)
    assert report["error_type"] == "DistBackendError", (report["error_type"], error, report["traceback"])
    assert re.match(rf"({collective}) on neuron process group", error), error
    assert f"rank {survivor} of {WORLD}" in error, error
    for name, passed, seconds, detail in report["steps"]:
        assert passed, f"{name} raised after the failure: {detail}"
        assert seconds < 10, f"{name} took {seconds:.1f} s"
    assert report["initialized_after"] is False or not report["steps"], report
    exit_seconds = exited_at - killed_at
    assert exit_seconds < timeout + EXIT_MARGIN, exit_seconds
    summary = {"error after": round(latency, 3), "exit after": round(exit_seconds, 3),
               "steps": [[name, round(seconds, 3)] for name, _, seconds, _ in report["steps"]],
               "error": error.splitlines()[0][:300]}
    print(f"\nrank {survivor}: {json.dumps(summary)}")
    return summary


# ---- killed during a loop of big allreduces ---------------------------------------------------

GLOO = {"NEURON_SIM_SHM_COLLECTIVES": "0"}
SHM = {}  # the default between the ranks of one host (when the build has it)

ALLREDUCE_CASES = {
    # id: (victim, what the survivor does after the failure, extra environment)
    "shm-kill1-destroy": (1, "destroy", SHM),
    "shm-kill1-abort_process_group": (1, "abort", SHM),
    "shm-kill1-backend_abort": (1, "backend-abort", SHM),
    # rank 0 hosts the TCPStore: the survivor's clean-up must not need it
    "shm-kill0-destroy": (0, "destroy", SHM),
    # the survivor blocked in Work.wait() of async_op=True allreduces, ops queued on the stream
    "shm-kill1-async-destroy": (1, "destroy", dict(SHM, KILL_ASYNC="1", NEURON_LAUNCH_BLOCKING="0")),
    "gloo-kill1-destroy": (1, "destroy", GLOO),
    "gloo-kill1-abort_process_group": (1, "abort", GLOO),
    "gloo-kill0-destroy": (0, "destroy", GLOO),
    # other collectives: an all-gather (shared memory), a point-to-point recv (always Gloo,
    # waited for on a completion thread)
    "shm-all_gather-kill1-destroy": (1, "destroy", dict(SHM, KILL_OP="all_gather")),
    # (a shorter timeout: a recv from a dead peer may wait all of it, see below)
    "recv-kill1-destroy": (1, "destroy", dict(SHM, KILL_OP="recv", KILL_TIMEOUT="6")),
}
KILLED_OP_NAMES = {"allreduce": "allreduce", "all_gather": "_allgather_base", "recv": "recv"}


def assert_transport(report, extra):
    """The case ran on the transport it names (a build without shared memory runs Gloo)."""
    if extra is GLOO or extra.get("NEURON_SIM_SHM_COLLECTIVES") == "0":
        assert report["shared_memory"] in (False, None), report["shared_memory"]
    else:
        assert report["shared_memory"] in (True, None), report["shared_memory"]


@pytest.mark.parametrize("case", list(ALLREDUCE_CASES))
def test_rank_killed_during_allreduce(case, tmp_path):
    victim, after, extra = ALLREDUCE_CASES[case]
    survivor = 1 - victim
    report, killed_at, exited_at, output = run_and_kill(tmp_path, ["allreduce"], victim,
                                                        dict(extra, KILL_AFTER=after))
    assert_transport(report, extra)
    op = extra.get("KILL_OP", "allreduce")
    timeout = float(extra.get("KILL_TIMEOUT", GROUP_TIMEOUT))
    summary = assert_survivor_failed_cleanly(report, killed_at, exited_at, survivor, KILLED_OP_NAMES[op], output,
                                             timeout)
    if op != "recv":
        # A dead peer is noticed at once (its connections reset; on one host, its pid is
        # gone), not at the timeout. (A recv posted while no bytes are in flight waits for
        # Gloo's timeout: Gloo does not fail a pending unbound-buffer recv when the pair
        # closes: README, Distributed, Faults.)
        assert summary["error after"] < PROMPT, summary
    assert report["iterations"] >= 2, report
    passed, seconds, detail = report["next_collective"]
    assert passed, "the broken group's next allreduce succeeded"
    assert seconds < timeout + 0.5, (seconds, detail)
    assert "allreduce on neuron process group" in detail, detail


# ---- killed during tensor-parallel generation -------------------------------------------------

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tiny_models import build

    folder = tmp_path_factory.mktemp("kill-model") / "model"
    build("llama").save_pretrained(folder)
    return str(folder)


TP_CASES = {
    "shm-kill1-destroy": (1, "destroy", SHM),
    "shm-kill1-abort_process_group": (1, "abort", SHM),
    "gloo-kill1-destroy": (1, "destroy", GLOO),
}


@pytest.mark.parametrize("case", list(TP_CASES))
def test_rank_killed_during_tensor_parallel_generate(case, model_dir, tmp_path):
    victim, after, extra = TP_CASES[case]
    survivor = 1 - victim
    report, killed_at, exited_at, output = run_and_kill(tmp_path, ["tp", model_dir], victim,
                                                        dict(extra, KILL_AFTER=after))
    assert_transport(report, extra)
    # transformers' row-parallel layers all-reduce their partial outputs; the logits are
    # all-gathered (DTensor redistribute: allgather_into_tensor_coalesced)
    summary = assert_survivor_failed_cleanly(report, killed_at, exited_at, survivor, COLLECTIVES, output)
    assert summary["error after"] < PROMPT, summary
    assert report["tokens"] >= 5, report


# ---- abort ends a pending collective (nobody is killed) ----------------------------------------

def run_abort_pending(out_dir, extra_env):
    port = free_port()
    processes = [subprocess.Popen([sys.executable, WORKER, "abort-pending", str(out_dir)],
                                  env=rank_env(rank, port, extra_env), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for rank in range(WORLD)]
    try:
        outputs = []
        for rank, process in enumerate(processes):
            try:
                outputs.append(process.communicate(timeout=START_TIMEOUT + GROUP_TIMEOUT + EXIT_MARGIN)[0])
            except subprocess.TimeoutExpired:
                pytest.fail(f"HANG: rank {rank} did not exit; rank 0's report: {read_report(out_dir, 0)}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    for rank, process in enumerate(processes):
        assert process.returncode == 0, f"rank {rank} exited {process.returncode}:\n{outputs[rank][-5000:]}"
    return read_report(out_dir, 0)


ABORT_CASES = [
    pytest.param("backend-abort", SHM, id="shm-backend_abort"),
    pytest.param("abort", SHM, id="shm-abort_process_group"),
    pytest.param("backend-abort", GLOO, id="gloo-backend_abort"),
    pytest.param("abort", GLOO, id="gloo-abort_process_group"),
]
ABORT_GROUP_TIMEOUT = 8.0  # the abort comes 1 s after the call: far sooner


@pytest.mark.parametrize("after, extra", ABORT_CASES)
def test_abort_ends_a_pending_collective(after, extra, tmp_path):
    """As ProcessGroupNCCL's abort does: a collective a live peer never joins is ended by
    aborting the group from another thread (the wait raises at once, not at the timeout), and
    the abort itself returns at once."""
    report = run_abort_pending(tmp_path, dict(extra, KILL_AFTER=after, KILL_TIMEOUT=str(ABORT_GROUP_TIMEOUT)))
    assert_transport(report, extra)
    passed, seconds, detail = report["wait"]
    assert passed, detail
    print(f"\nthe collective raised {seconds:.2f} s after the call: {detail[:300]}; abort: {report.get('abort')}")
    assert report["abort_returned"], "the abort call did not return"
    abort_passed, abort_seconds, abort_detail = report["abort"]
    assert abort_passed, abort_detail
    assert abort_seconds < 3, f"the abort call took {abort_seconds:.1f} s"
    assert seconds < 1.0 + 3, f"the collective ended {seconds:.1f} s after the call (the abort came at 1 s): {detail}"
    assert "allreduce on neuron process group" in detail and "abort" in detail, detail
