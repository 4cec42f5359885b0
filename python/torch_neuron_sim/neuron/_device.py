"""Device arguments as torch.cuda takes them: None (current), an index, "neuron:N", torch.device."""
import torch

from .. import _C


def _index(device):
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return _C.current_device() if device.index is None else device.index
    raise TypeError(f"expected a device index, a 'neuron:N' string or torch.device, got {device!r}")
