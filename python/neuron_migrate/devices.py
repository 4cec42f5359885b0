"""What the tool asks of a device, through public APIs only: torch.neuron / torch.cuda and
torch_neuronx's public functions (called defensively, so a real TorchNeuron, a GPU or the
CPU all work). Never imports torch_neuron_sim."""
import importlib
import os

import torch


class DeviceUnavailable(RuntimeError):
    pass


def check(device):
    """Raises DeviceUnavailable unless `device` ("neuron", "cuda", "cpu", "neuron:1") can be used."""
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise DeviceUnavailable(f"device {device!r} is not a device name (expected neuron, cuda or cpu, "
                                "optionally with :index)") from None
    if parsed.type == "cpu":
        return
    if parsed.type == "neuron":
        neuronx()
    module = getattr(torch, parsed.type, None)
    if module is None or not module.is_available():
        raise DeviceUnavailable(f"device {device!r} is not available on this machine")
    if parsed.index is not None and parsed.index >= module.device_count():
        raise DeviceUnavailable(f"device {device!r} is not available: {module.device_count()} {parsed.type} "
                                f"core(s) visible (0..{module.device_count() - 1})")


def neuronx():
    """The torch_neuronx package (AWS's or a compatible one), or DeviceUnavailable."""
    try:
        return importlib.import_module("torch_neuronx")
    except ImportError as error:
        raise DeviceUnavailable(f"torch_neuronx is not installed ({error})") from None


def is_simulated(device):
    """True when the device is the simulated Neuron device (its timings are host timings)."""
    if torch.device(device).type != "neuron":
        return False
    return bool(getattr(neuronx(), "is_simulated", lambda: False)())


def timing_note(device):
    if is_simulated(device):
        return ("host timing on the simulated Neuron device (torch_neuronx.is_simulated()), "
                "not a Trainium prediction")
    return f"measured on {torch.device(device).type}"


def device_clock(device):
    """A function giving the device's predicted time in ms (torch_neuronx.device_time(), the
    simulated device's clock), or None: not the simulated device, or its clock is off."""
    if not is_simulated(device):
        return None
    read = getattr(neuronx(), "device_time", None)
    if read is None:
        return None
    try:
        read(device)
    except RuntimeError:  # NEURON_SIM_DEVICE_CLOCK=0
        return None
    return lambda: read(device)


def work_counters(device):
    """A function giving the device clock's counters (torch_neuronx.device_counters(): time, FLOPs,
    HBM bytes; the difference of two readings has .mfu and .mbu), or None when there are none."""
    read = getattr(neuronx(), "device_counters", None) if is_simulated(device) else None
    try:
        if read:
            read(device)
    except RuntimeError:  # NEURON_SIM_DEVICE_CLOCK=0
        return None
    return (lambda: read(device)) if read else None


def platform(device):
    """(Trainium platform, logical-core configuration) of a neuron device, as its properties say
    ((None, None) when they do not)."""
    if torch.device(device).type != "neuron":
        return None, None
    properties = torch.neuron.get_device_properties(torch.device(device).index or 0)
    return getattr(properties, "platform", None), getattr(properties, "logical_nc_config", None)


def synchronize(device):
    kind = torch.device(device).type
    if kind != "cpu":
        getattr(torch, kind).synchronize()


def rng_state(device):
    """The random generators a training step on `device` draws from (dropout): the CPU's and
    the device's, for a checkpoint."""
    kind = torch.device(device).type
    state = {"cpu": torch.get_rng_state()}
    if kind != "cpu":
        state["device"] = getattr(torch, kind).get_rng_state(device)
    return state


def set_rng_state(device, state):
    torch.set_rng_state(state["cpu"].cpu())  # a checkpoint may have been loaded onto the device
    if "device" in state:
        getattr(torch, torch.device(device).type).set_rng_state(state["device"].cpu(), device)


def _memory_module(device):
    kind = torch.device(device).type
    return None if kind == "cpu" else getattr(torch, kind)


def reset_peak(device):
    module = _memory_module(device)
    if module is not None:
        for index in range(module.device_count()):
            module.reset_peak_memory_stats(index)


def memory_allocated(device):
    module = _memory_module(device)
    return None if module is None else module.memory_allocated(torch.device(device).index or 0)


def peak_per_core(device):
    """[{core, peak_bytes, total_bytes}] for every visible core that was used; [] on the CPU."""
    module = _memory_module(device)
    if module is None:
        return []
    cores = []
    for index in range(module.device_count()):
        peak = module.max_memory_allocated(index)
        if peak:
            total = getattr(module.get_device_properties(index), "total_memory", 0) or None
            cores.append({"core": index, "peak_bytes": peak, "total_bytes": total})
    return cores


def device_name(device):
    kind = torch.device(device).type
    if kind == "cpu":
        import platform
        return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    module = getattr(torch, kind)
    props = module.get_device_properties(torch.device(device).index or 0)
    # On Neuron `.name` is the instance type ("trn2"); the simulator says so beside it.
    simulated = " (simulated)" if is_simulated(device) else ""
    return f"{kind}: {getattr(props, 'name', '?')}{simulated}, {module.device_count()} visible cores"


class OpTracking:
    """TorchNeuron's record of which ops ran on the CPU (get_fallback_ops) and which on the
    device (get_executed_ops); empty lists off Neuron."""

    def __init__(self, device):
        self.enabled = torch.device(device).type == "neuron"

    def clear(self):
        if self.enabled:
            getattr(neuronx(), "clear_op_tracking", lambda: None)()

    def fallback_ops(self):
        return sorted(getattr(neuronx(), "get_fallback_ops", list)()) if self.enabled else []

    def executed_ops(self):
        return sorted(getattr(neuronx(), "get_executed_ops", list)()) if self.enabled else []


def dynamo_metrics(device):
    """torch_neuronx.get_dynamo_metrics() as dicts ([] elsewhere or when it has none)."""
    if torch.device(device).type != "neuron":
        return []
    import dataclasses
    records = getattr(neuronx(), "get_dynamo_metrics", list)()
    return [dataclasses.asdict(r) if dataclasses.is_dataclass(r) else dict(vars(r)) for r in records]
