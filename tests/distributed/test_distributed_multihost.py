"""The c10d backend "neuron" across two "hosts": two Linux network namespaces on this machine
joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24), one
`torchrun --nnodes 2 --nproc-per-node 1 --node-rank i --master-addr 10.77.0.1` in each, Gloo
on the veth (GLOO_SOCKET_IFNAME). A namespace reaches the other only through the veth, so
every collective (and the rendezvous store) crosses it.

Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and a kernel that allows `ip netns add`;
otherwise skipped. The namespaces (and the veth with them) are named per run and deleted by
the fixture's finalizer, after the processes left in them are killed; namespaces an aborted
run left behind (their creator gone, nothing running in them) are deleted at the next run.

The ranks run tests/distributed/distributed_multihost_worker.py; one launch checks the collectives and
then tensor-parallel generation, and writes each rank's checks to a JSON file. Further tests:
two processes per host (each host's pair on shared memory, the world on Gloo), and a network
partition (the veth taken down mid-allreduce: only the timeout can end it; and abort)."""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from test_distributed import assert_reports_pass

# minutes of 2-rank launches: `make test-distributed` runs them, `make test` does not
pytestmark = pytest.mark.distributed_extra

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "distributed_multihost_worker.py")
PREFIX = "tnsim-mh"  # namespace names: tnsim-mh-<creator pid>-<random>-<a|b>
ADDRESSES = ("10.77.0.1", "10.77.0.2")
MASTER_PORT = 29531  # each namespace has its own ports: no collision with other runs
LAUNCH_TIMEOUT = 240
PROMPT = [[1, 5, 9, 17, 33, 2, 77]]
NEW_TOKENS = 12


def ip(*args, check=True, timeout=20):
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def namespace_pids(namespace):
    result = ip("netns", "pids", namespace, check=False)
    return [int(pid) for pid in result.stdout.split()] if result.returncode == 0 else []


def kill_namespace_processes(namespace):
    """SIGKILLs the processes running in `namespace` (ours: the namespace is this run's)."""
    for pid in namespace_pids(namespace):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while namespace_pids(namespace) and time.monotonic() < deadline:
        time.sleep(0.05)


def delete_namespace(namespace):
    kill_namespace_processes(namespace)
    ip("netns", "del", namespace, check=False)


def remove_stale_namespaces():
    """Deletes namespaces an aborted run left: its creator is gone and nothing runs in them."""
    listing = ip("netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX + "-"):
            continue
        try:
            creator = int(name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if creator == os.getpid() or os.path.exists(f"/proc/{creator}") or namespace_pids(name):
            continue
        ip("netns", "del", name, check=False)


class TwoHosts:
    def __init__(self):
        tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.namespaces = [f"{PREFIX}-{tag}-a", f"{PREFIX}-{tag}-b"]
        short = secrets.token_hex(4)  # interface names: at most 15 characters
        self.interfaces = [f"nmh{short}a", f"nmh{short}b"]
        self.created = []

    def create(self):
        for namespace in self.namespaces:
            ip("netns", "add", namespace)
            self.created.append(namespace)
        (a, b), (va, vb) = self.namespaces, self.interfaces
        ip("link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b)
        for namespace, interface, address in zip(self.namespaces, self.interfaces, ADDRESSES):
            ip("-n", namespace, "addr", "add", f"{address}/24", "dev", interface)
            ip("-n", namespace, "link", "set", interface, "up")
            ip("-n", namespace, "link", "set", "lo", "up")

    def destroy(self):
        for namespace in self.created:
            delete_namespace(namespace)
        self.created = []


def make_hosts(request):
    """Two namespaces joined by a veth pair, deleted by the requesting fixture's finalizer;
    skips when this machine cannot make them."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and a veth pair are made for the two hosts")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's `ip` for the network namespaces")
    remove_stale_namespaces()
    hosts = TwoHosts()
    request.addfinalizer(hosts.destroy)
    try:
        hosts.create()
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        hosts.destroy()
        pytest.skip(f"cannot make two network namespaces joined by a veth pair here (the kernel or the "
                    f"container forbids it): {error}")
    return hosts


@pytest.fixture(scope="module")
def two_hosts(request):
    return make_hosts(request)


@pytest.fixture
def fresh_hosts(request):
    """A pair of its own, for a test that breaks the link."""
    return make_hosts(request)


def clean_env(extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TORCHELASTIC_ERROR_FILE="")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "NEURON_RT_VISIBLE_CORES", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
        env.pop(name, None)
    env.update(extra)
    return env


def launch_two_hosts(hosts, args, env_extra=None, timeout=LAUNCH_TIMEOUT, per_node=1):
    """One torchrun per namespace (node rank = namespace index); returns [(returncode, output)]
    once both ended. Never hangs: past `timeout` every process in the namespaces is killed."""
    processes = []
    for node, (namespace, interface) in enumerate(zip(hosts.namespaces, hosts.interfaces)):
        command = ["ip", "netns", "exec", namespace, sys.executable, "-m", "torch.distributed.run",
                   "--nnodes", "2", "--nproc-per-node", str(per_node), "--node-rank", str(node),
                   "--master-addr", ADDRESSES[0], "--master-port", str(MASTER_PORT), "--max-restarts", "0",
                   WORKER, *args]
        env = clean_env(dict(env_extra or {}, GLOO_SOCKET_IFNAME=interface))
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    outputs = []
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            try:
                outputs.append(process.communicate(timeout=max(1, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                for namespace in hosts.namespaces:
                    kill_namespace_processes(namespace)
                for p in processes:
                    p.kill()
                details = "\n".join(f"--- node {i}:\n{(p.communicate(timeout=30)[0] or '')[-4000:]}"
                                    for i, p in enumerate(processes))
                pytest.fail(f"the two-host launch did not end within {timeout} s (killed):\n{details}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    return [(process.returncode, output) for process, output in zip(processes, outputs)]


@pytest.fixture(scope="module")
def expected_tokens(tmp_path_factory):
    """The model (saved for the ranks) and one device's greedy tokens."""
    from tiny_models import build

    folder = tmp_path_factory.mktemp("mh-model")
    model = build("llama")
    model.save_pretrained(folder / "model")
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    tokens = model.to("neuron").generate(torch.tensor(PROMPT, device="neuron"), max_new_tokens=NEW_TOKENS,
                                         do_sample=False).tolist()
    return str(folder / "model"), tokens, full_bytes


@pytest.fixture(scope="module")
def reports(two_hosts, expected_tokens, tmp_path_factory):
    model_dir = expected_tokens[0]
    out_dir = tmp_path_factory.mktemp("mh-out")
    os.chmod(out_dir, 0o777)
    start = time.monotonic()
    ended = launch_two_hosts(two_hosts, ["all", model_dir, str(out_dir)],
                             {"TP_PROMPT": json.dumps(PROMPT), "TP_NEW_TOKENS": str(NEW_TOKENS)})
    seconds = time.monotonic() - start
    for node, (returncode, output) in enumerate(ended):
        assert returncode == 0, f"node {node}'s torchrun failed ({returncode}):\n{output[-6000:]}"
    loaded = []
    for rank in range(2):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as report:
            loaded.append(json.load(report))
    print(f"two-host launch: {seconds:.1f} s")
    return loaded


def assert_checks(reports, *prefixes):
    """As assert_reports_pass; returns each rank's details of those checks."""
    names = assert_reports_pass(reports, *prefixes)
    return [[report[name][1] for name in names] for report in reports]


def test_each_rank_is_a_node_with_its_own_address(reports):
    details = assert_checks(reports, "launch: two nodes")
    for rank, (detail,) in enumerate(details):
        # the namespace has its veth's address and the loopback, nothing else
        assert detail["addresses"] == sorted(["127.0.0.1/8", f"{ADDRESSES[rank]}/24"]), detail
        assert detail["master"] == f"{ADDRESSES[0]}:{MASTER_PORT}", detail


def test_two_hosts_talk_through_gloo_not_shared_memory(reports):
    assert_checks(reports, "launch: the group runs on Gloo")


def test_all_reduce_across_hosts(reports):
    assert_checks(reports, "all_reduce")


def test_all_reduce_traffic_goes_over_the_veth(reports):
    details = assert_checks(reports, "all_reduce crosses the veth")
    print("veth traffic of a 4 MiB allreduce:", [d[0] for d in details])


def test_other_collectives_across_hosts(reports):
    assert_checks(reports, "all_gather", "broadcast", "reduce_scatter", "all_to_all", "send / recv", "barrier")


def test_tensor_parallel_generate_across_hosts_matches_one_device(reports, expected_tokens):
    _, expected, full_bytes = expected_tokens
    details = assert_checks(reports, "tensor-parallel generate")
    for rank, (detail,) in enumerate(details):
        assert detail["tokens"] == expected, (rank, detail["tokens"], expected)
        assert detail["device"] == "neuron:0", detail  # one process per host: LOCAL_RANK 0
        # each rank holds its shard: about half the weights (norms are replicated)
        assert detail["memory_allocated"] < 0.6 * full_bytes, (detail["memory_allocated"], full_bytes)


def test_destroy_process_group_across_hosts(reports):
    assert_checks(reports, "destroy_process_group")


def test_namespaces_are_deleted_by_the_finalizer(two_hosts):
    """The fixture's finalizer deletes what it made; checked on a second pair made here."""
    hosts = TwoHosts()
    try:
        hosts.create()
        listed = ip("netns", "list").stdout
        assert all(name in listed for name in hosts.namespaces), listed
    finally:
        hosts.destroy()
    listed = ip("netns", "list").stdout
    assert not any(name in listed for name in hosts.namespaces), listed


# ---- two hosts with two processes each -----------------------------------------------------

def test_two_processes_per_host_mix_shared_memory_and_gloo(two_hosts, tmp_path):
    """`torchrun --nnodes 2 --nproc-per-node 2` per namespace: the world group spans the hosts
    (Gloo), each host's pair of ranks shares memory, the cross-host pairs use Gloo, and
    collectives interleaved on the three give the right values."""
    out_dir = str(tmp_path)
    start = time.monotonic()
    ended = launch_two_hosts(two_hosts, ["hier", out_dir], per_node=2)
    print(f"\n2x2 launch: {time.monotonic() - start:.1f} s")
    for node, (returncode, output) in enumerate(ended):
        assert returncode == 0, f"node {node}'s torchrun failed ({returncode}):\n{output[-6000:]}"
    loaded = []
    for rank in range(4):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as report:
            loaded.append(json.load(report))
    names = assert_checks(loaded, "hier:")
    print("transports:", loaded[0]["hier: transports (world and cross-host pairs: Gloo; a host's pair: shared memory)"])
    assert len(names[0]) == 9, loaded[0].keys()
    print("veth bytes:", loaded[0]["hier: a 4 MiB world allreduce sends less across hosts than Gloo over the four ranks"])


# ---- a network partition: the link goes down in the middle of an allreduce ----------------

PARTITION_TIMEOUT = 8.0


def run_partition(hosts, out_dir, abort, per_host=1):
    """Both ranks loop on allreduces (plain processes, not torchrun: its agents talk through
    the store across the same link); the veth goes down; with `abort`, the test then tells both
    ranks to abort their group 1 s later. Returns (reports, time the link went down, time the
    abort was asked for or None, each host's exit time). Never hangs."""
    processes = []  # one per host: its ranks are its children, in its namespaces
    world = 2 * per_host
    for node, (namespace, interface) in enumerate(zip(hosts.namespaces, hosts.interfaces)):
        env = clean_env({"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(per_host),
                         "MASTER_ADDR": ADDRESSES[0], "MASTER_PORT": str(MASTER_PORT),
                         "GLOO_SOCKET_IFNAME": interface, "PARTITION_TIMEOUT": str(PARTITION_TIMEOUT),
                         "PARTITION_ABORT": "1" if abort else "0"})
        processes.append(subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, WORKER, "ranks",
                                           str(node * per_host), str(per_host), "partition", out_dir],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))

    def reports():
        loaded = []
        for rank in range(world):
            path = os.path.join(out_dir, f"rank{rank}.json")
            loaded.append(json.load(open(path)) if os.path.exists(path) else {})
        return loaded

    def stop_all():
        for namespace in hosts.namespaces:
            kill_namespace_processes(namespace)
        return "\n".join(f"--- rank {rank}:\n{(p.communicate(timeout=30)[0] or '')[-4000:]}"
                         for rank, p in enumerate(processes))

    try:
        deadline = time.monotonic() + 90
        markers = [os.path.join(out_dir, f"started{rank}") for rank in range(world)]
        while not all(os.path.exists(marker) for marker in markers):
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                pytest.fail(f"the ranks did not both reach their loop:\n{stop_all()}")
            time.sleep(0.02)
        down_at = time.time()
        ip("-n", hosts.namespaces[0], "link", "set", hosts.interfaces[0], "down")
        abort_at = None
        if abort:
            time.sleep(1.0)
            abort_at = time.time()
            open(os.path.join(out_dir, "abort-now"), "w").close()
        exit_limit = 3 * PARTITION_TIMEOUT + 10
        exited_at = []
        for node, process in enumerate(processes):
            try:
                process.wait(timeout=max(1, down_at + exit_limit - time.time()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"HANG: host {node}'s ranks did not exit within {exit_limit} s of the link going down; "
                            f"reports: {json.dumps(reports(), indent=1)[-4000:]}\n{stop_all()}")
            exited_at.append(time.time())
        outputs = [p.communicate(timeout=30)[0] for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    for node, process in enumerate(processes):
        assert process.returncode == 0, f"host {node}'s ranks exited {process.returncode}:\n{outputs[node][-5000:]}"
    return reports(), down_at, abort_at, exited_at


def test_link_down_during_allreduce_fails_within_the_timeout(fresh_hosts, tmp_path):
    """No peer dies and no connection is reset: the veth goes down while both ranks loop on
    allreduces, so only the group's timeout can end them. Both must raise within it, naming the
    collective; the broken group's next collective must fail within it too; destroy_process_group
    must return and the processes exit."""
    reports, down_at, _, exited_at = run_partition(fresh_hosts, str(tmp_path), abort=False)
    summary = []
    for rank, report in enumerate(reports):
        passed, error = report["error"]
        assert passed, error
        latency = error["time"] - down_at
        assert error["type"] == "DistBackendError", error
        assert f"allreduce on neuron process group '0' (default_pg), rank {rank} of 2" in error["message"], error
        # the allreduce running when the link went down started before: its deadline is sooner
        assert latency < PARTITION_TIMEOUT + 1, (latency, error["message"])
        passed, detail = report["next collective"]
        assert passed, detail
        assert detail["seconds"] < PARTITION_TIMEOUT + 1, detail
        assert "allreduce on neuron process group" in detail["message"], detail
        destroy_seconds = report["destroy_process_group"][1]["seconds"]
        assert destroy_seconds < PARTITION_TIMEOUT, destroy_seconds
        summary.append({"rank": rank, "error after": round(latency, 2), "next collective": round(detail["seconds"], 2),
                        "destroy": round(destroy_seconds, 2), "exit after": round(exited_at[rank] - down_at, 2),
                        "error": error["message"][:240]})
    print("\npartition:", json.dumps(summary, indent=1))


def test_link_down_with_two_ranks_per_host_fails_every_rank_within_the_timeout(fresh_hosts, tmp_path):
    """Note [Hierarchical collectives]: with two ranks per host the world's allreduce runs inside
    each host, then between the hosts' first ranks on Gloo. When the link goes down only the
    leaders' Gloo step is cut; the other rank of each host waits for its leader inside the host.
    Every rank must still raise within the timeout, naming the allreduce, and exit."""
    reports, down_at, _, exited_at = run_partition(fresh_hosts, str(tmp_path), abort=False, per_host=2)
    summary = []
    for rank, report in enumerate(reports):
        hierarchy = report["hierarchy"][1]
        assert hierarchy and hierarchy["leader"] == (rank % 2 == 0) and hierarchy["calls"] >= 1, (rank, hierarchy)
        passed, error = report["error"]
        assert passed, (rank, error)
        latency = error["time"] - down_at
        assert error["type"] == "DistBackendError", error
        assert f"allreduce on neuron process group '0' (default_pg), rank {rank} of 4" in error["message"], error
        assert latency < PARTITION_TIMEOUT + 1, (rank, latency, error["message"])
        passed, detail = report["next collective"]
        assert passed, detail
        summary.append({"rank": rank, "error after": round(latency, 2), "exit after": round(exited_at[rank // 2] - down_at, 2),
                        "error": error["message"][:300]})
    print("\npartition, 2 ranks per host:", json.dumps(summary, indent=1))


def test_abort_during_a_partition_ends_the_pending_allreduce(fresh_hosts, tmp_path):
    """The link goes down; 1 s later each rank aborts its group from another thread (what a
    fault-tolerant trainer does on a hung collective, as with NCCL's abort). The allreduce
    must raise then, not at the timeout, and the abort must return at once."""
    reports, down_at, abort_at, _ = run_partition(fresh_hosts, str(tmp_path), abort=True)
    summary = []
    for rank, report in enumerate(reports):
        passed, error = report["error"]
        assert passed, error
        assert "abort" in report, f"rank {rank}: the abort did not return"
        abort_seconds = report["abort"][1]["seconds"]
        summary.append({"rank": rank, "error after the abort": round(error["time"] - abort_at, 2),
                        "abort took": round(abort_seconds, 2), "error": error["message"][:200]})
        print("\nabort during a partition:", json.dumps(summary[-1]))
        assert abort_seconds < 2, f"rank {rank}: _abort_process_group() took {abort_seconds:.1f} s"
        assert error["time"] - abort_at < 2, (error["time"] - abort_at, error["message"])
        assert "allreduce on neuron process group" in error["message"], error
