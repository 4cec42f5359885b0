"""Tensors the neuron device cannot hold: quantized tensors (TorchNeuron has none) and sparse
or opaque layouts (the device's tensors are dense and strided). Every way to make one on the
device raises NotImplementedError at the call, naming the op and what to do; nothing broken
is returned and no device memory is kept. (Not covered: a compressed sparse CPU tensor (CSR,
CSC, ...) moved with .to("neuron"): PyTorch builds the neuron tensor from its moved components
without dispatching to the device, and the tensor it makes fails at its first use.)"""
import warnings

import pytest
import torch
import torch_neuronx  # noqa: F401

from conftest import QUEUED_RUN, every_op_queued

QUANTIZED_ADVICE = "The neuron device has no quantized tensors"
DENSE_ONLY_ADVICE = "The neuron device holds dense strided tensors only"


def x():
    return torch.linspace(-1, 1, 4, device="neuron")


QUANTIZED = {
    "quantize_per_tensor": lambda: torch.quantize_per_tensor(x(), 0.1, 0, torch.qint8),
    "quantize_per_tensor.tensor_qparams": lambda: torch.quantize_per_tensor(
        x(), torch.tensor(0.1, device="neuron"), torch.tensor(0, device="neuron"), torch.qint8),
    "quantize_per_tensor (list)": lambda: torch.quantize_per_tensor(
        [x(), x()], torch.tensor([0.1, 0.2], device="neuron"), torch.tensor([0, 0], device="neuron"), torch.quint8),
    "quantize_per_channel": lambda: torch.quantize_per_channel(
        x(), torch.full((4,), 0.1, device="neuron"), torch.zeros(4, dtype=torch.long, device="neuron"), 0,
        torch.quint8),
    "quantize_per_tensor_dynamic": lambda: torch.quantize_per_tensor_dynamic(x(), torch.quint8, False),
    "empty(dtype=qint8)": lambda: torch.empty(3, dtype=torch.qint8, device="neuron"),
    "zeros(dtype=quint8)": lambda: torch.zeros(3, dtype=torch.quint8, device="neuron"),
    "_empty_affine_quantized": lambda: torch._empty_affine_quantized([3], scale=0.1, zero_point=0,
                                                                     dtype=torch.quint8, device="neuron"),
    "to(qint32)": lambda: x().to(torch.qint32),
    "a quantized CPU tensor .to('neuron')": lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0,
                                                                              torch.qint8).to("neuron"),
}

NOT_STRIDED = {
    "to_sparse": lambda: x().to_sparse(),
    "to_sparse_csr": lambda: x().reshape(2, 2).to_sparse_csr(),
    "to_mkldnn": lambda: x().to_mkldnn(),
    "a sparse CPU tensor .to('neuron')": lambda: torch.ones(4).to_sparse().to("neuron"),
}


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_quantized_tensors_are_refused_at_the_call(name):
    before = torch.neuron.memory_allocated()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantize_per_tensor's deprecation of its list form
        with pytest.raises(NotImplementedError, match=QUANTIZED_ADVICE):
            QUANTIZED[name]()
    torch.neuron.synchronize()  # the stream did not fail
    assert torch.neuron.memory_allocated() == before


@pytest.mark.parametrize("name", list(NOT_STRIDED))
def test_sparse_and_opaque_layouts_are_refused_at_the_call(name):
    before = torch.neuron.memory_allocated()
    with pytest.raises(NotImplementedError, match=DENSE_ONLY_ADVICE):
        NOT_STRIDED[name]()
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == before


def test_quantize_per_tensor_names_the_op_and_the_fix():
    # issue 23 item 5: it returned a qint8 tensor with is_quantized False, whose dequantize(),
    # int_repr() and .cpu() then failed with unrelated messages
    with pytest.raises(NotImplementedError) as error:
        torch.quantize_per_tensor(x(), 0.1, 0, torch.qint8)
    message = str(error.value)
    assert message.startswith("aten::quantize_per_tensor on the neuron device: its result is a quantized tensor")
    assert "torch.quantize_per_tensor(x.cpu(), ...)" in message


def test_what_stays_dense_still_works():
    # fake quantization computes in float32; dequantized CPU tensors move as usual
    got = torch.fake_quantize_per_tensor_affine(x(), 0.1, 0, -128, 127)
    torch.testing.assert_close(got.cpu(), torch.fake_quantize_per_tensor_affine(x().cpu(), 0.1, 0, -128, 127))
    q = torch.quantize_per_tensor(torch.linspace(-1, 1, 4), 0.1, 0, torch.qint8)
    torch.testing.assert_close(q.dequantize().to("neuron").cpu(), q.dequantize())
    torch.testing.assert_close(torch.ones(4).to_sparse().to_dense().to("neuron").cpu(), torch.ones(4))


@pytest.mark.skipif(QUEUED_RUN, reason="this is the run with every op queued")
def test_refused_with_every_op_queued():
    every_op_queued(__file__)
