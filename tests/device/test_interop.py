"""Neuron tensors meeting PyTorch's interchange paths: DLPack (zero-copy on the device) and
torch.multiprocessing (refused with what to do: device memory is not shared between
processes)."""
import multiprocessing
import os
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch_neuronx  # noqa: F401
from torch.utils.dlpack import DLDeviceType

SEND_ADVICE = "Cannot send a neuron tensor to another process through torch.multiprocessing"


def test_from_dlpack_of_a_neuron_tensor_shares_its_memory():
    # issue 23: torch.from_dlpack(neuron_tensor) failed in PyTorch's device-name check
    x = torch.arange(6.0, device="neuron")
    assert x.__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)
    y = torch.from_dlpack(x)
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
    y[0] = 42
    assert x[0].item() == 42
    view = torch.from_dlpack(x.view(2, 3)[:, 1])
    assert view.stride() == (3,) and view.cpu().tolist() == [1.0, 4.0]


def test_from_dlpack_of_a_parameter_and_of_another_core():
    p = torch.nn.Parameter(torch.ones(3, device="neuron"))
    assert torch.from_dlpack(p.detach()).data_ptr() == p.data_ptr()
    if torch.neuron.device_count() < 2:
        pytest.skip("one neuron core visible: no second core to check the index on")
    x = torch.ones(2, device="neuron:1")
    assert x.__dlpack_device__() == (DLDeviceType.kDLExtDev, 1)
    assert torch.from_dlpack(x).device == torch.device("neuron:1")


def test_cpu_tensors_keep_pytorchs_dlpack_devices():
    assert torch.ones(2).__dlpack_device__() == (DLDeviceType.kDLCPU, 0)


@pytest.mark.parametrize("what", ["tensor", "parameter", "view", "untyped storage", "typed storage"])
def test_sending_a_neuron_tensor_to_another_process_says_what_to_do(what):
    x = torch.arange(4.0, device="neuron")
    obj = {"tensor": x, "parameter": torch.nn.Parameter(x.clone()), "view": x[1:],
           "untyped storage": x.untyped_storage(), "typed storage": x.storage()}[what]
    with pytest.raises(RuntimeError, match=SEND_ADVICE):
        ForkingPickler.dumps(obj)
    queue = multiprocessing.get_context("spawn").SimpleQueue()
    with pytest.raises(RuntimeError, match=SEND_ADVICE):
        queue.put(obj)
    # multiprocessing.Queue pickles in a feeder thread after put() returned: refused at put()
    for container in (obj, [obj], {"batch": (1, obj)}):
        with pytest.raises(RuntimeError, match=SEND_ADVICE):
            multiprocessing.get_context("spawn").Queue().put(container)


# The receiver of a multiprocessing.Queue is not left waiting: regressions/queue_put_of_a_neuron_tensor_refused.py
# (run by test_device_regressions.py).


def test_cpu_tensors_are_still_shared():
    x = torch.arange(4.0)
    rebuilt = ForkingPickler.loads(ForkingPickler.dumps(x))
    assert torch.equal(rebuilt, x)
