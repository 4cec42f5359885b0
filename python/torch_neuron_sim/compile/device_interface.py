"""Dynamo's device interface for the neuron device (torch._dynamo.device_interface).

Dynamo and Inductor reach a device's module through a registered DeviceInterface, not through
torch.<name>: the device guard of the compiler collectives (torch._dynamo.output_graph), and the
stream and event calls Dynamo recognises inside a compiled function (torch._dynamo.variables).
The latter do not compile on neuron yet (docs/device-module-contract.md: the compiler does not
lower control_deps / record_event). PyTorch registers cuda, xpu, mtia, cpu, mps
and tpu; `get_interface_for_device("neuron")` raised NotImplementedError. Registered as the
module loads (torch_patches.run_after_load), so importing torch_neuronx loads no Dynamo."""
import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from .. import neuron as _neuron  # torch.neuron (this may run before torch registers it)


class NeuronInterface(DeviceInterface):
    # The objects themselves, not wrappers: Dynamo recognises them by identity.
    device = _neuron.device
    Event = _neuron.Event
    Stream = _neuron.Stream
    current_stream = staticmethod(_neuron.current_stream)
    stream = staticmethod(_neuron.stream)

    class Worker:
        """What Inductor's compile workers ask, answered without starting the device."""

        @staticmethod
        def set_device(device):
            _neuron.set_device(device)

        @staticmethod
        def current_device():
            return _neuron.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return _neuron.get_device_properties(device)

    @staticmethod
    def current_device():
        return _neuron.current_device()

    @staticmethod
    def set_device(device):
        _neuron.set_device(device)

    @staticmethod
    def maybe_exchange_device(device):
        return _neuron._exchange_device(device)

    @staticmethod
    def exchange_device(device):
        return _neuron._exchange_device(device)

    @staticmethod
    def device_count():
        return _neuron.device_count()

    @staticmethod
    def is_available():
        return _neuron.is_available()

    @staticmethod
    def set_stream(stream):
        _neuron.set_stream(stream)

    @staticmethod
    def _set_stream_by_id(stream_id, device_index, device_type):
        torch.accelerator.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                                  device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx):
        """The current stream's id on core `device_idx` (what a kernel launch would be given)."""
        return _neuron.current_stream(device_idx).stream_id

    @staticmethod
    def synchronize(device=None):
        _neuron.synchronize(device)

    @classmethod
    def get_device_properties(cls, device=None):
        return _neuron.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device=None):
        """The platform ("trn1", "trn2", "trn3"): a NeuronCore has no CUDA compute capability."""
        return _neuron.get_device_properties(device).platform

    @staticmethod
    def is_bf16_supported(including_emulation=False):
        return _neuron.is_bf16_supported(including_emulation)

    @classmethod
    def is_dtype_supported(cls, dtype, including_emulation=False):
        # every dtype runs (float64 / int64 computed as 32-bit, Note [64-bit as 32-bit])
        return True

    @staticmethod
    def memory_allocated(device=None):
        return _neuron.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device=None):
        return False


def register():
    register_interface_for_device("neuron", NeuronInterface)
    for index in range(_neuron.device_count()):
        register_interface_for_device(f"neuron:{index}", NeuronInterface)
