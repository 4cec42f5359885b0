"""One rank of tests/distributed/test_distributed_kill.py: a plain process (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT set by the test; not torchrun, whose agent would stop the survivor
when its peer dies). The test SIGKILLs one rank once it wrote OUT_DIR/started<rank>; the other
rank must fail, name the collective, clean up and exit.

    distributed_kill_worker.py allreduce OUT_DIR        a loop of big allreduces (KILL_OP:
        "allreduce", the default; "all_gather": all_gather_into_tensor; "recv": rank 0
        receives what rank 1 sends, point to point)
    distributed_kill_worker.py tp MODEL OUT_DIR         a loop of tensor-parallel generates
    distributed_kill_worker.py abort-pending OUT_DIR    nobody is killed: rank 1 does not call
        an allreduce (it sleeps), rank 0 waits for it, and another thread of rank 0 aborts the
        group (KILL_AFTER: "abort" or "backend-abort") one second later; the wait must end then

Environment:
    KILL_TIMEOUT   the process group's timeout in seconds
    KILL_AFTER     what the survivor does after the failure: "destroy"
                   (dist.destroy_process_group()), "abort" (dist.distributed_c10d.
                   _abort_process_group()), "backend-abort" (the default group's neuron
                   backend's abort(), then destroy_process_group()), "none"
    KILL_ASYNC     "1": the allreduces are async_op=True and waited for with wait()
    NEURON_SIM_SHM_COLLECTIVES  "0": Gloo even between the ranks of one host

The survivor writes OUT_DIR/rank<r>.json with what happened and when (time.time(), the clock
the test kills by), then exits 0; 3 if the loop ended without an error.
"""
import datetime
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

NEURON = torch.device("neuron")
REPORT = {}
LOOP_SECONDS = 90  # the loop's bound when nobody is killed (the test kills within seconds)


def write(out_dir):
    path = os.path.join(out_dir, f"rank{os.environ['RANK']}.json")
    with open(path + ".tmp", "w") as out:
        json.dump(REPORT, out, indent=1)
    os.replace(path + ".tmp", path)


def started(out_dir):
    """Tells the test this rank is inside its loop of collectives."""
    path = os.path.join(out_dir, f"started{os.environ['RANK']}")
    with open(path, "w") as marker:
        marker.write(str(time.time()))


def record_error(error, when):
    REPORT["error_type"] = type(error).__name__
    REPORT["error"] = str(error)
    REPORT["error_time"] = when
    REPORT["traceback"] = traceback.format_exc(limit=12)


def after_failure(out_dir):
    """The survivor's clean-up, each step timed; then a report."""
    action = os.environ.get("KILL_AFTER", "destroy")
    steps = []
    if action == "destroy":
        steps = [("destroy_process_group", dist.destroy_process_group)]
    elif action == "abort":
        steps = [("_abort_process_group", dist.distributed_c10d._abort_process_group)]
    elif action == "backend-abort":
        steps = [("backend abort", lambda: dist.group.WORLD._get_backend(NEURON).abort()),
                 ("destroy_process_group", dist.destroy_process_group)]
    REPORT["steps"] = []
    write(out_dir)
    for name, step in steps:
        start = time.time()
        try:
            step()
            REPORT["steps"].append([name, True, time.time() - start, ""])
        except Exception as error:  # noqa: BLE001 - the report carries it
            REPORT["steps"].append([name, False, time.time() - start, f"{type(error).__name__}: {error}"])
        write(out_dir)
    REPORT["initialized_after"] = dist.is_initialized()
    REPORT["done_time"] = time.time()
    write(out_dir)


def note_transport():
    """Whether the group talks through shared memory (None: a build without it)."""
    from torch_neuron_sim import _C
    if not hasattr(_C, "_process_group_uses_shared_memory"):
        REPORT["shared_memory"] = None
    else:
        REPORT["shared_memory"] = bool(_C._process_group_uses_shared_memory(dist.group.WORLD._get_backend(NEURON)))


def allreduce_scenario(out_dir):
    timeout = float(os.environ["KILL_TIMEOUT"])
    asynchronous = os.environ.get("KILL_ASYNC") == "1"
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=timeout))
    note_transport()
    rank = dist.get_rank()
    op = os.environ.get("KILL_OP", "allreduce")
    t = torch.ones(1 << 22, device=NEURON)  # 16 MiB: the loop is mostly inside collectives
    gathered = torch.empty(2 << 22, device=NEURON) if op == "all_gather" else None
    dist.all_reduce(t)

    def one():
        if op == "all_gather":
            return dist.all_gather_into_tensor(gathered, t, async_op=asynchronous)
        if op == "recv":
            return (dist.irecv if asynchronous else dist.recv)(t, src=1) if rank == 0 else \
                (dist.isend if asynchronous else dist.send)(t, dst=0)
        return dist.all_reduce(t, async_op=asynchronous)

    REPORT["iterations"] = 0
    end = time.monotonic() + LOOP_SECONDS
    try:
        while time.monotonic() < end:
            t.fill_(1.0)
            work = one()
            if asynchronous:
                work.wait()
            REPORT["iterations"] += 1
            if REPORT["iterations"] == 2:
                started(out_dir)
    except Exception as error:  # noqa: BLE001 - the report carries it
        record_error(error, time.time())
        # The broken group's next collective fails too, within the timeout (no hang).
        start = time.time()
        try:
            dist.all_reduce(torch.ones(4, device=NEURON))
            REPORT["next_collective"] = [False, time.time() - start, "no error"]
        except Exception as again:  # noqa: BLE001
            REPORT["next_collective"] = [True, time.time() - start, f"{type(again).__name__}: {again}"]
        after_failure(out_dir)
        return 0
    REPORT["error"] = None
    write(out_dir)
    return 3


def tp_scenario(model_dir, out_dir):
    from transformers import AutoModelForCausalLM, StoppingCriteria, StoppingCriteriaList
    from transformers.distributed import DistributedConfig

    timeout = float(os.environ["KILL_TIMEOUT"])
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=timeout))
    note_transport()
    model = AutoModelForCausalLM.from_pretrained(model_dir, distributed_config=DistributedConfig(tp_size=2))
    prompt = torch.tensor([[1, 5, 9, 17, 33, 2, 77]], device=model.device)
    REPORT["tokens"] = 0

    class Tell(StoppingCriteria):
        """Counts the generated tokens; tells the test once generation is under way."""
        def __call__(self, input_ids, scores, **kwargs):
            REPORT["tokens"] += 1
            if REPORT["tokens"] == 5:
                started(out_dir)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    end = time.monotonic() + LOOP_SECONDS
    try:
        while time.monotonic() < end:
            model.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=False,
                           stopping_criteria=StoppingCriteriaList([Tell()]))
    except Exception as error:  # noqa: BLE001 - the report carries it
        record_error(error, time.time())
        after_failure(out_dir)
        return 0
    REPORT["error"] = None
    write(out_dir)
    return 3


def abort_pending_scenario(out_dir):
    import threading

    timeout = float(os.environ["KILL_TIMEOUT"])
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=timeout))
    note_transport()
    dist.all_reduce(torch.ones(4, device=NEURON))  # connected
    if dist.get_rank() == 1:
        # alive, never calls the allreduce rank 0 waits for; leaves once rank 0 is done
        done = os.path.join(out_dir, "done0")
        end = time.monotonic() + timeout + 3
        while not os.path.exists(done) and time.monotonic() < end:
            time.sleep(0.05)
        return 0
    action = os.environ["KILL_AFTER"]
    backend = dist.group.WORLD._get_backend(NEURON)

    def abort():
        time.sleep(1.0)
        start = time.time()
        REPORT["abort_started"] = start
        try:
            if action == "abort":
                dist.distributed_c10d._abort_process_group()
            else:
                backend.abort()
            REPORT["abort"] = [True, time.time() - start, ""]
        except Exception as error:  # noqa: BLE001 - the report carries it
            REPORT["abort"] = [False, time.time() - start, f"{type(error).__name__}: {error}"]

    # The aborting thread starts first: in launch-blocking mode (NEURON_LAUNCH_BLOCKING=1, the
    # default) even an async_op=True collective returns only once it ended, as a NCCL call
    # does under CUDA_LAUNCH_BLOCKING=1, so the call itself may be what blocks.
    aborter = threading.Thread(target=abort, daemon=True)
    start = time.time()
    aborter.start()
    try:
        dist.all_reduce(torch.ones(1 << 10, device=NEURON), async_op=True).wait()
        REPORT["wait"] = [False, time.time() - start, "returned without an error"]
    except Exception as error:  # noqa: BLE001
        REPORT["wait"] = [True, time.time() - start, f"{type(error).__name__}: {error}"]
    write(out_dir)
    aborter.join(timeout=timeout + 10)
    REPORT["abort_returned"] = not aborter.is_alive()
    write(out_dir)
    open(os.path.join(out_dir, "done0"), "w").close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "allreduce":
        sys.exit(allreduce_scenario(sys.argv[2]))
    elif sys.argv[1] == "abort-pending":
        sys.exit(abort_pending_scenario(sys.argv[2]))
    elif sys.argv[1] == "tp":
        sys.exit(tp_scenario(sys.argv[2], sys.argv[3]))
    raise SystemExit(f"unknown scenario {sys.argv[1]}")
