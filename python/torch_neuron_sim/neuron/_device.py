"""Device arguments as torch.cuda takes them: None (current), an index, "neuron:N", torch.device."""
import torch

from .. import _C


def _index(device, negative_is_current=False):
    """The core index of `device`. A negative int is an error (torch.device("cuda", -2) is), except
    where torch.cuda takes -1 as "no change" (set_device, device(), _get_device_index): there,
    with `negative_is_current`, it is returned as is."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0 and not negative_is_current:
            raise ValueError(f"neuron device index must not be negative, got {device}: give None (or "
                             "torch.neuron.current_device()) for the current core")
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return _C.current_device() if device.index is None else device.index
    raise TypeError(f"expected a device index, a 'neuron:N' string or torch.device, got {device!r}")
