"""What the tool asks of a device, through public APIs only: torch.<kind> (cuda, xpu, mps,
neuron) and torch_neuronx's public functions, called defensively, so a real TorchNeuron, a GPU,
an Intel or Apple GPU or the CPU all work: a device module is initialised before its first call
(module()), and a function it lacks leaves that figure unmeasured with the reason kept
(limits()), never a crash. Never imports torch_neuron_sim."""
import importlib
import os

import torch


class DeviceUnavailable(RuntimeError):
    pass


KINDS = ("cuda", "xpu", "mps", "cpu", "neuron")  # what the tool measures on (any other with a torch.<kind> module too)
_LIMITS = {}  # (kind, function) -> why a figure was not measured, for the report (limits())


def module(kind):
    """torch.<kind> ready for use: initialised first where the module initialises lazily.

    torch.cuda (and torch.xpu) answer device_count() and is_available() before their first call
    but raise from others (reset_peak_memory_stats(0): "Invalid device argument") until CUDA is
    initialised; init() does that once (a no-op afterwards), as the first tensor would."""
    found = getattr(torch, kind, None)
    if found is None:
        raise DeviceUnavailable(f"torch has no module torch.{kind}: {kind!r} is not a device kind this torch knows")
    init = getattr(found, "init", None)
    if callable(init) and not _call_flag(found, "is_initialized"):
        init()
    return found


def _call_flag(found, name):
    function = getattr(found, name, None)
    return bool(function()) if callable(function) else False


def _function(kind, name, measured):
    """torch.<kind>.<name>, or None with the reason kept (limits()): `measured` is what it would
    have measured."""
    function = getattr(module(kind), name, None)
    if not callable(function):
        _LIMITS[(kind, name)] = (f"torch.{kind} has no {name}(): {measured} not measured on {kind}")
        return None
    return function


def reset_limits():
    """Forgets the limits of earlier runs in this process (a run calls it first)."""
    _LIMITS.clear()


def limits():
    """[{device, function, reason}] for every figure a device module could not give this run."""
    return [{"device": kind, "function": name, "reason": reason} for (kind, name), reason in sorted(_LIMITS.items())]


def _count(kind):
    counter = getattr(module(kind), "device_count", None)
    return counter() if callable(counter) else 1  # torch.mps before device_count(): one device


def check(device):
    """Raises DeviceUnavailable unless `device` ("neuron", "cuda", "xpu", "mps", "cpu", "neuron:1")
    can be used."""
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise DeviceUnavailable(f"device {device!r} is not a device name (expected one of {', '.join(KINDS)}, "
                                "optionally with :index)") from None
    if parsed.type == "cpu":
        return
    if parsed.type == "neuron":
        neuronx()
    found = getattr(torch, parsed.type, None)
    available = getattr(found, "is_available", None)
    if found is None or not callable(available) or not available():
        raise DeviceUnavailable(f"device {device!r} is not available on this machine (torch.{parsed.type}"
                                f"{' is missing' if found is None else '.is_available() is False'})")
    try:
        module(parsed.type)
    except RuntimeError as error:  # initialising failed: a driver or a forked process
        raise DeviceUnavailable(f"device {device!r} did not initialise: {error}") from None
    count = _count(parsed.type)
    if parsed.index is not None and parsed.index >= count:
        raise DeviceUnavailable(f"device {device!r} is not available: {count} {parsed.type} "
                                f"device(s) visible (0..{count - 1})")


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
    properties = module("neuron").get_device_properties(torch.device(device).index or 0)
    return getattr(properties, "platform", None), getattr(properties, "logical_nc_config", None)


def synchronize(device):
    kind = torch.device(device).type
    if kind != "cpu":
        function = _function(kind, "synchronize", "the end of device work")
        if function is not None:
            function()


def rng_state(device):
    """The random generators a training step on `device` draws from (dropout): the CPU's and
    the device's, for a checkpoint."""
    kind = torch.device(device).type
    state = {"cpu": torch.get_rng_state()}
    if kind != "cpu":
        read = _function(kind, "get_rng_state", "the device generator's state (a resumed run may draw other masks)")
        if read is not None:
            state["device"] = read(device)
    return state


def set_rng_state(device, state):
    torch.set_rng_state(state["cpu"].cpu())  # a checkpoint may have been loaded onto the device
    if "device" in state:
        kind = torch.device(device).type
        write = _function(kind, "set_rng_state", "the device generator's state")
        if write is not None:
            write(state["device"].cpu(), device)


def _memory_kind(device):
    kind = torch.device(device).type
    return None if kind == "cpu" else kind


def reset_peak(device):
    kind = _memory_kind(device)
    if kind is not None:
        reset = _function(kind, "reset_peak_memory_stats", "peak memory since the run began")
        if reset is not None:
            for index in range(_count(kind)):
                reset(index)


def memory_allocated(device):
    kind = _memory_kind(device)
    if kind is None:
        return None
    for name in ("memory_allocated", "current_allocated_memory"):  # torch.mps has the second
        function = getattr(module(kind), name, None)
        if callable(function):
            return function(torch.device(device).index or 0) if name == "memory_allocated" else function()
    _LIMITS[(kind, "memory_allocated")] = f"torch.{kind} has no memory_allocated(): the memory timeline not measured"
    return None


def peak_per_core(device):
    """[{core, peak_bytes, total_bytes}] for every visible core that was used; [] on the CPU or
    where the device module has no peak (the reason is in limits())."""
    kind = _memory_kind(device)
    if kind is None:
        return []
    peak = _function(kind, "max_memory_allocated", "peak memory per device")
    if peak is None:
        return []
    properties = getattr(module(kind), "get_device_properties", None)
    cores = []
    for index in range(_count(kind)):
        used = peak(index)
        if used:
            total = getattr(properties(index), "total_memory", 0) or None if callable(properties) else None
            cores.append({"core": index, "peak_bytes": used, "total_bytes": total})
    return cores


def device_name(device):
    kind = torch.device(device).type
    if kind == "cpu":
        import platform
        return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    properties = getattr(module(kind), "get_device_properties", None)
    name = getattr(properties(torch.device(device).index or 0), "name", "?") if callable(properties) else "?"
    # On Neuron `.name` is the instance type ("trn2"); the simulator says so beside it.
    simulated = " (simulated)" if is_simulated(device) else ""
    return f"{kind}: {name}{simulated}, {_count(kind)} visible device(s)"


class OpTracking:
    """TorchNeuron's record of which ops ran on the CPU (get_fallback_ops) and which on the
    device (get_executed_ops); empty lists off Neuron."""

    def __init__(self, device):
        # a torch_neuronx without the tracking functions leaves the fallbacks predicted (census.py)
        self.enabled = torch.device(device).type == "neuron" and callable(getattr(neuronx(), "get_fallback_ops", None))

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
