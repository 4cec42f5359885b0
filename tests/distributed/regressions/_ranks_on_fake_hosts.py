"""Ranks on fake hosts, for the hierarchical collectives' repros: run(fn, layout) spawns len(layout) ranks on this machine; rank r pretends to be on
host layout[r] (torch_neuron_sim.distributed._hosts is patched to publish a fake host key per
global rank; the ranks a layout puts on one host really share this host, so their ShmGroup works).
fn(rank, world) runs after init_process_group("cpu:gloo,neuron:neuron"); it returns a value
(printed) or raises. Every rank is killed after `timeout` s (reported as HANG)."""
import os, sys, time, tempfile, traceback, datetime, queue
import multiprocessing as mp

FOUR_CORES = {"NEURON_SIM_PLATFORM": "trn2", "NEURON_LOGICAL_NC_CONFIG": "2", "NEURON_SIM_CHIPS": "1"}


def _worker(fn, rank, world, layout, path, q, env, pg_timeout):
    os.environ.update(env)
    os.environ.update(LOCAL_RANK=str(rank), RANK=str(rank), WORLD_SIZE=str(world))
    import torch, torch.distributed as dist
    import torch_neuron_sim  # noqa
    import torch_neuron_sim.distributed as nd

    def fake_hosts(store, group_rank, size):  # same as _hosts, with a fake key per global rank
        store.set(f"host/{group_rank}", f"fakehost-{layout[int(os.environ['RANK'])]}")
        keys = [store.get(f"host/{other}").decode() for other in range(size)]
        numbers = {}
        return [numbers.setdefault(key, len(numbers)) for key in keys]
    if layout is not None:
        nd._hosts = fake_hosts
    t0 = time.time()
    try:
        store = dist.FileStore(path, world)
        dist.init_process_group("cpu:gloo,neuron:neuron", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        r = fn(rank, world)
        q.put((rank, "ok", r, time.time() - t0))
    except BaseException:
        q.put((rank, "FAIL", traceback.format_exc(limit=6)[-1500:], time.time() - t0))
    q.close(); q.join_thread(); sys.stdout.flush()
    time.sleep(float(os.environ.get("LINGER", "0")))  # stay alive: an exit closes sockets, which peers notice
    os._exit(0)


def run(fn, layout, timeout=60, pg_timeout=10, env=None):
    world = len(layout)
    env = dict(FOUR_CORES, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", **(env or {}))
    ctx = mp.get_context("spawn")
    path = tempfile.mktemp(prefix="fs_r11_", dir="/tmp")
    q = ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(fn, r, world, layout, path, q, env, pg_timeout)) for r in range(world)]
    start = time.time()
    for p in ps:
        p.start()
    results = {}
    end = start + timeout
    expected = world - len(env.get("DIES", "").split(",")) if env.get("DIES") else world
    while len(results) < expected and time.time() < end:
        try:
            rank, status, detail, took = q.get(timeout=max(0.1, end - time.time()))
            results[rank] = (status, detail, took)
        except queue.Empty:
            break
    for p in ps:
        p.join(timeout=3)
        if p.is_alive():
            p.kill(); p.join()
    bad = False
    print(f"layout {layout}:")
    for r in range(world):
        status, detail, took = results.get(r, ("HANG", f"no result within {timeout} s (killed)", None))
        took = f"{took:.1f}s" if took is not None else "-"
        print(f"  rank {r} [{status}, {took}]: {detail}")
        bad |= status != "ok"
    try:
        os.unlink(path)
    except OSError:
        pass
    dead = {int(r) for r in env.get("DIES", "").split(",") if r}
    return not any(results.get(r, ("HANG",))[0] != "ok" for r in range(world) if r not in dead)


def main(fn, layout, **options):
    """run(), then exit 0 when every rank (but those that die on purpose) passed."""
    sys.exit(0 if run(fn, layout, **options) else 1)
