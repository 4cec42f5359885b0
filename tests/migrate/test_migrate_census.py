"""neuron-migrate census: ops with dtypes and shapes, TorchNeuron's CPU-fallback ops, 64-bit
values that 32-bit computation would not keep, bytes copied between host and device."""
import importlib.util
import os

import torch

from migrate_helpers import DATA
from neuron_migrate import devices
from neuron_migrate.census import OpCensus, fallback_report


def _tiny(name):
    spec = importlib.util.spec_from_file_location("migrate_tiny_models", os.path.join(DATA, "custom_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def test_fallback_op_of_a_model_is_reported_with_its_shapes():
    model = _tiny("filtered").to("neuron")
    tracking = devices.OpTracking("neuron")
    census = OpCensus()
    tracking.clear()
    with census, torch.no_grad():
        model(torch.tensor([[3, 4, 5]]).to("neuron")).cpu()
    summary = census.summary()
    fallback = tracking.fallback_ops()
    assert any(name.startswith("aten::isin") for name in fallback), fallback
    assert any(name.startswith("aten::addmm") for name in tracking.executed_ops())
    detail = {d["op"]: d for d in fallback_report(summary, fallback)}
    isin = next(d for name, d in detail.items() if name.startswith("aten::isin"))
    assert isin["count"] >= 1 and "int64[64] int64[3] -> bool[64]" in isin["signatures"]
    names = {o["op"] for o in summary["ops"]}
    assert {"aten::embedding", "aten::tanh", "aten::masked_fill.Scalar"} <= names
    assert summary["copies_bytes"]["cpu->neuron"] == 3 * 8  # the input ids
    assert summary["copies_bytes"]["neuron->cpu"] == 3 * 64 * 4  # the logits
    assert summary["wide_values"] == []  # value checks are off on the evaluated device


def test_int64_beyond_int32_is_found_on_the_baseline():
    model = _tiny("hashed")
    census = OpCensus(check_64bit=True)
    with census, torch.no_grad():
        model(torch.tensor([[7, 9, 11]]))
    wide = census.summary()["wide_values"]
    first = wide[0]
    assert first["op"] == "aten::mul.Tensor" and first["dtype"] == "int64"
    assert first["sample_value"] == 11 * 2654435761 and first["sample_value"] > 2**31
    assert first["problem"] == "beyond the int32 range"


def test_float64_values_that_float32_changes():
    census = OpCensus(check_64bit=True)
    with census:
        small = torch.tensor([1.0, 0.5], dtype=torch.float64) * 2  # exact in float32
        huge = torch.tensor([1e300], dtype=torch.float64) + 1  # overflows float32
        tiny = torch.tensor([1e-42], dtype=torch.float64) * 1  # float32 subnormal: loses digits
    wide = {(w["op"], w["sample_value"]) for w in census.summary()["wide_values"]}
    # the constants are flagged where they enter (lift_fresh) and in the ops that use them;
    # the values float32 keeps exactly (1.0, 0.5, 2.0) are not
    assert ("aten::add.Tensor", 1e300) in wide and ("aten::mul.Tensor", 1e-42) in wide
    assert {value for _, value in wide} == {1e300, 1e-42}
    overflow = next(w for w in census.summary()["wide_values"] if w["op"] == "aten::add.Tensor")
    assert overflow["as_float32"] == float("inf") and overflow["dtype"] == "float64"
    assert small.dtype == huge.dtype == tiny.dtype == torch.float64


def test_fallback_tracking_is_off_the_neuron_device():
    tracking = devices.OpTracking("cpu")
    assert not tracking.enabled and tracking.fallback_ops() == []


class _PrecomputedHash(torch.nn.Module):
    """Hash buckets from an int64 table built at construction (values beyond 2**31), reduced by
    remainder: the op's output is small, its input is not."""

    def __init__(self):
        super().__init__()
        self.register_buffer("token_hash", torch.arange(64, dtype=torch.int64) * 2654435761)
        self.hashed = torch.nn.Embedding(257, 8)

    def forward(self, input_ids):
        return self.hashed(torch.remainder(self.token_hash, 257)[input_ids])


def test_wide_values_an_op_reads_are_found_not_only_those_it_writes():
    model = _PrecomputedHash()
    ids = torch.tensor([[5, 7, 9]])
    census = OpCensus(check_64bit=True)
    with census, torch.no_grad():
        expected = model(ids)
    wide = census.summary()["wide_values"]
    assert [(w["op"], w["where"], w["sample_value"]) for w in wide] == [
        ("aten::remainder.Scalar", "input", 63 * 2654435761)]  # the buffer, seen once
    # why it matters: computed in 32 bits on the device the buckets, hence the outputs, differ
    assert not torch.equal(model.to("neuron")(ids.to("neuron")).cpu(), expected)


def test_the_op_table_is_the_simulators():
    """neuron_migrate predicts fallbacks from its own copy of TorchNeuron 2.13's op table (it runs
    where the simulator is not installed); the copy must be the table the simulator classifies by."""
    from neuron_migrate.census import OP_TABLE, torchneuron_op_table
    from torch_neuron_sim import op_set
    with open(OP_TABLE, "rb") as ours, open(op_set.FILE, "rb") as simulators:
        assert ours.read() == simulators.read()
    assert torchneuron_op_table()[0] == op_set.on_device()


def test_composite_ops_and_device_choices_are_not_predicted_to_fall_back():
    from neuron_migrate.census import predicted_fallbacks
    census = {"ops": [{"op": name, "count": 1} for name in (
        "aten::expand", "aten::t", "aten::rsub.Scalar", "aten::argmax", "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::linalg_qr", "aten::add.Tensor", "prims::iota")]}
    found = {entry["op"]: entry for entry in predicted_fallbacks(census)}
    assert set(found) == {"aten::argmax", "aten::linalg_qr"}
    assert found["aten::linalg_qr"]["reason"] == "TorchNeuron registers it to run on the CPU"
