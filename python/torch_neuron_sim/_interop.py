"""Two places where PyTorch's Python code does not know the renamed PrivateUse1 device.

- DLPack: `Tensor.__dlpack_device__` maps the device type "privateuse1" to kDLExtDev, but a
  renamed backend's tensors say "neuron", so `torch.from_dlpack(neuron_tensor)` raised
  "Unknown device type neuron for Dlpack" (the capsule route, `torch.utils.dlpack.to_dlpack`,
  works: the C++ side uses the dispatch key). Neuron tensors answer kDLExtDev as PyTorch
  intends for the PrivateUse1 device.
- torch.multiprocessing: its reducers share CPU memory (file descriptors) or CUDA memory (IPC
  handles). A neuron tensor reached `_share_fd_cpu_` ("_share_fd_: only available on CPU"),
  raised in a Queue's feeder thread, and the receiver waited forever. Sending a neuron tensor
  or storage now raises an error that says what to do: where it is pickled (Pipe, SimpleQueue,
  Process arguments), and at put() for multiprocessing.Queue, which pickles in a feeder thread
  after put() returned (an error there is printed and the item dropped).
"""
import multiprocessing.queues
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing.reductions as _reductions
from torch.overrides import has_torch_function_unary
from torch.utils.dlpack import DLDeviceType

_SEND_ADVICE = (
    "Cannot send a neuron tensor to another process through torch.multiprocessing: neuron device "
    "memory is not shared between processes. Send a CPU copy (tensor.cpu(); PyTorch shares it) and "
    "call .to('neuron') in the receiving process, or exchange tensors between ranks with "
    "torch.distributed (backend 'neuron')."
)


def _dlpack_device_of(original):
    def __dlpack_device__(self):
        if not has_torch_function_unary(self) and self.device.type == "neuron":
            return (DLDeviceType.kDLExtDev, self.device.index or 0)
        return original(self)

    __dlpack_device__.__doc__ = original.__doc__
    return __dlpack_device__


def _refusing_neuron(reduce):
    def reducer(obj):
        if obj.device.type == "neuron":
            raise RuntimeError(_SEND_ADVICE)
        return reduce(obj)

    reducer.__name__ = reduce.__name__
    return reducer


def _holds_neuron(obj, seen, depth=0):
    """Whether `obj` holds a neuron tensor or storage: itself, or in its containers (lists,
    tuples, sets, dicts) and objects' attributes, a few levels deep."""
    if isinstance(obj, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)):
        return obj.device.type == "neuron"
    if depth > 6 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return False
    seen.add(id(obj))
    if isinstance(obj, dict):
        return any(_holds_neuron(v, seen, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(_holds_neuron(v, seen, depth + 1) for v in obj)
    attributes = getattr(obj, "__dict__", None)
    return isinstance(attributes, dict) and any(_holds_neuron(v, seen, depth + 1) for v in attributes.values())


def _refusing_put(put):
    def checked_put(self, obj, block=True, timeout=None):
        if _holds_neuron(obj, set()):
            raise RuntimeError(_SEND_ADVICE)
        return put(self, obj, block, timeout)

    checked_put.__doc__ = put.__doc__
    checked_put._neuron = True
    return checked_put


def register():
    """Installs both; idempotent."""
    if not getattr(multiprocessing.queues.Queue.put, "_neuron", False):
        multiprocessing.queues.Queue.put = _refusing_put(multiprocessing.queues.Queue.put)
    if not getattr(torch.Tensor.__dlpack_device__, "_neuron", False):
        torch.Tensor.__dlpack_device__ = _dlpack_device_of(torch.Tensor.__dlpack_device__)
        torch.Tensor.__dlpack_device__._neuron = True
    wrapped = {}
    for reduce in (_reductions.reduce_tensor, _reductions.reduce_storage, _reductions.reduce_typed_storage,
                   _reductions.reduce_typed_storage_child):
        wrapped[reduce] = _refusing_neuron(reduce)
    for cls, reduce in list(ForkingPickler._extra_reducers.items()):
        if reduce in wrapped:
            ForkingPickler.register(cls, wrapped[reduce])
