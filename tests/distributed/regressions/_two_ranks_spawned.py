"""PG_TIMEOUT_<rank> sets one rank's group timeout (PG_TIMEOUT: both).
Tiny 2-rank harness: run(fn) spawns 2 processes with a FileStore, default group
"cpu:gloo,neuron:neuron"; fn(rank) raises AssertionError on a bug. Exit code 1 if any rank
failed or timed out."""
import os, sys, tempfile, traceback, datetime
import multiprocessing as mp

def _worker(fn, rank, path, q, env):
    os.environ.update(env)
    os.environ["LOCAL_RANK"] = str(rank); os.environ["RANK"] = str(rank); os.environ["WORLD_SIZE"] = "2"
    import torch, torch.distributed as dist
    import torch_neuron_sim  # noqa
    try:
        store = dist.FileStore(path, 2)
        dist.init_process_group("cpu:gloo,neuron:neuron", store=store, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=float(env.get(f"PG_TIMEOUT_{rank}", env.get("PG_TIMEOUT", "20")))))
        r = fn(rank)
        q.put((rank, "ok", r))
    except BaseException as e:
        q.put((rank, "fail", traceback.format_exc(limit=8)))
    q.close(); q.join_thread(); sys.stdout.flush(); os._exit(0)

def run(fn, timeout=50, env=None):
    env = dict(env or {}); env.setdefault("HF_HUB_OFFLINE", "1")
    ctx = mp.get_context("spawn")
    path = tempfile.mktemp(prefix="fs_", dir="/tmp")
    q = ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(fn, r, path, q, env)) for r in range(2)]
    for p in ps: p.start()
    results = {}
    import queue, time
    end = time.time() + timeout
    while len(results) < 2 and time.time() < end:
        try:
            rank, status, detail = q.get(timeout=max(0.1, end - time.time()))
            results[rank] = (status, detail)
        except queue.Empty:
            break
    killed = set()
    for i, p in enumerate(ps):
        p.join(timeout=2)
        if p.is_alive():
            p.kill(); killed.add(i)
    bad = False
    for r in range(2):
        code = ps[r].exitcode
        s = results.get(r, ("timeout", f"rank {r} did not finish within {timeout}s (hang)") if code is None or code == 0 or r in killed
                        else ("crash", f"rank {r} died with exit code {code}"))
        print(f"rank {r}: {s[0]}: {s[1]}")
        bad |= s[0] != "ok"
    sys.exit(1 if bad else 0)
