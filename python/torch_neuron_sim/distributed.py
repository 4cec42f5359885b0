"""The c10d backend "neuron": its registration, and the core each process uses.

The backend itself is C++ (csrc/distributed, Note [ProcessGroupNeuron]); its transport is a
Gloo process group made here, over the same store, rank, size and timeout.

Note [One core per process]
As TorchNeuron does, each process of a job uses one NeuronCore, chosen from LOCAL_RANK.
TorchNeuron sets NEURON_RT_VISIBLE_CORES=LOCAL_RANK before its runtime starts, so every process
sees one device, neuron:0. Hugging Face's tensor-parallel loading binds neuron:LOCAL_RANK before
it creates the process group, so here the cores stay visible and the process's core is made
its current device when the default group is created: device LOCAL_RANK among the visible cores
(NEURON_RT_VISIBLE_CORES, when set, lists them), or device 0 when only one is visible.
`torch.device("neuron")`, neuron:LOCAL_RANK and (with one visible core) neuron:0 all name it.
"""
import os

import torch
import torch.distributed as dist

from . import _C

BACKEND_NAME = "neuron"


def process_device():
    """The index of this process's core (Note [One core per process])."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.neuron.device_count()
    if count == 1:
        return 0
    if 0 <= local_rank < count:
        return local_rank
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES", "<unset>")
    raise RuntimeError(
        f"LOCAL_RANK={local_rank} has no neuron core of its own: {count} cores are visible "
        f"(NEURON_RT_VISIBLE_CORES={visible}). Start at most {count} processes per host, or make more "
        "cores (NEURON_SIM_CHIPS, NEURON_LOGICAL_NC_CONFIG=1), or give each process its core with "
        "NEURON_RT_VISIBLE_CORES")


# How many default groups this process has made (its "session"). Group names repeat after
# destroy_process_group() (new_group() counts from 1 again), and the store keeps the keys the
# previous transport's rendezvous wrote: a transport that read them would connect to ports now
# closed. Every rank makes the default group the same number of times, so the members of any
# group agree on its prefix. (A count per group name would not do: new_group() names a group
# on every rank, but only its members make it, so a name first used for a group without this
# rank would later get different counts on its members.)
_session = 0


def _create_process_group(options, backend_options=None):
    """The creator registered with torch.distributed (extended API: `options` is a
    _DistributedBackendOptions)."""
    global _session
    device = process_device()
    if not dist.is_initialized():  # the default group is being made
        torch.neuron.set_device(device)
        _session += 1
    store = dist.PrefixStore(f"neuron/{_session}/{options.group_id}/", options.store)
    rank, size, timeout = options.group_rank, options.group_size, options.timeout
    transport = _gloo(store, rank, size, timeout)
    hosts = _hosts(store, rank, size)
    leaders = None
    if (1 < len(set(hosts)) < size and hosts.index(hosts[rank]) == rank
            and os.environ.get("NEURON_SIM_SHM_COLLECTIVES") != "0"):
        # Note [Hierarchical collectives]: a host's first rank also joins the hosts' leaders
        leaders = _gloo(dist.PrefixStore("leaders/", store), hosts[rank], max(hosts) + 1, timeout)
    return _C._make_process_group_neuron(transport, store, rank, size, timeout, device, hosts, leaders)


def _hosts(store, rank, size):
    """Each rank's host, numbered in order of first appearance (ranks on one host share a key:
    hostname, boot id and network namespace)."""
    store.set(f"host/{rank}", _C._host_key())
    keys = [store.get(f"host/{other}").decode() for other in range(size)]
    numbers = {}
    return [numbers.setdefault(key, len(numbers)) for key in keys]


def _gloo(store, rank, size, timeout):
    """The transport: a Gloo group made as torch makes its own (GLOO_SOCKET_IFNAME honoured), but
    with one worker thread, so that its collectives run in the order they were issued, as a
    NCCL group's do on its stream (Gloo's default of two threads lets a collective start
    before the one issued ahead of it has finished writing its outputs)."""
    gloo = dist.ProcessGroupGloo
    options = gloo._Options()
    options._timeout = timeout
    interfaces = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name]
    options._devices = ([gloo.create_device(interface=name) for name in interfaces] if interfaces
                        else [gloo.create_default_device()])
    options._threads = 1
    return gloo(store, rank, size, options)


def register():
    if not dist.is_available() or BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_process_group, extended_api=True, devices=["neuron"])
