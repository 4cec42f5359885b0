"""torch.neuron._utils: what torch.load reads from a device module (module._utils._get_device_index,
torch/serialization.py), as torch.cuda._utils has it."""
import torch

from ._device import _index


def _get_device_index(device, optional=False, allow_cpu=False):
    """The core index of `device` ("neuron:N", torch.device, an int; None or "neuron" the current
    core when `optional`, as torch.cuda._utils._get_device_index; "cpu" -1 when `allow_cpu`)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device{' or cpu' if allow_cpu else ''}, but got: {device}")
        if device.index is None and not optional:
            raise ValueError(f"Expected a neuron device with a specified index or an integer, but got: {device}")
    elif device is None and not optional:
        raise ValueError("Expected a neuron device with a specified index or an integer, but got: None")
    return _index(device, negative_is_current=True)  # an int is returned as given, as torch.cuda's
