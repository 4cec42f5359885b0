"""Graphs with an opaque custom op (one that writes to its arguments, as vLLM's attention op does):
cut at it into programs, the op run through the dispatcher between them, and costed on the device
clock as steps of the graph's one program (Note [Graphs cut at opaque ops] in
python/torch_neuron_sim/compile/segments.py; Note [Program steps run through the dispatcher] in
csrc/DeviceClock.h)."""
import gc

import pytest
import torch
from torch._dynamo.utils import counters

import torch_neuronx
from torch_neuron_sim import _C
from torch_neuron_sim.compile import backend, segments

NEURON = torch.device("neuron")

LIB = torch.library.Library("neuron_opaque_test", "DEF")  # noqa: TOR901 (kept for the process)
LIB.define("scale_into(Tensor x, Tensor(a!) out) -> ()")


@torch.library.impl(LIB, "scale_into", "CompositeExplicitAutograd")
def _scale_into(x, out):
    # several eager ops, as an attention over a paged cache is
    out.copy_((x * 2).sin() + x.cos())


@torch.library.register_fake("neuron_opaque_test::scale_into")
def _scale_into_fake(x, out):
    return None


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo):
    """Each test compiles afresh (conftest.fresh_dynamo)."""


def step(x, w):
    h = torch.relu(x @ w) + 1
    out = torch.empty_like(h)
    torch.ops.neuron_opaque_test.scale_into(h, out)
    return (out @ w.t()).tanh()


def inputs(seed=0):
    torch.manual_seed(seed)
    return torch.randn(8, 16), torch.randn(16, 16)


def cut_graph():
    (code,) = [o for o in gc.get_objects() if type(o) is backend.CollectiveGraphCode]
    return code


def test_a_graph_with_a_mutating_custom_op_compiles_into_programs_around_it():
    x, w = inputs()
    expected = step(x, w)
    compiled = torch.compile(step, backend="neuron")
    got = compiled(x.to(NEURON), w.to(NEURON))
    torch.testing.assert_close(got.cpu(), expected)
    assert counters["neuron"]["compiled_graphs"] == 1
    code = cut_graph()
    programs = [m for m in code.gm.modules() if isinstance(m, segments.Segment)]
    opaque = [m for m in code.gm.modules() if isinstance(m, segments.ProgramSteps)]
    assert len(programs) == 2 and len(opaque) == 1
    # one launch per graph call: the program after the op runs within the graph
    assert [p.code.within_graph for p in programs] == [False, True]
    (record,) = torch_neuronx.get_dynamo_metrics()
    assert not record.has_collectives
    # the same program again for the same shapes; other inputs, other values
    x2, w2 = inputs(1)
    torch.testing.assert_close(compiled(x2.to(NEURON), w2.to(NEURON)).cpu(), step(x2, w2))
    assert counters["neuron"]["compiled_graphs"] == 1


def test_the_opaque_op_is_costed_as_program_steps_on_the_device_clock():
    x, w = (t.to(NEURON) for t in inputs())
    compiled = torch.compile(step, backend="neuron")
    compiled(x, w)
    torch.neuron.synchronize()
    (ops,) = [m for m in cut_graph().gm.modules() if isinstance(m, segments.ProgramSteps)]
    h = torch.relu(x @ w) + 1
    out = torch.empty_like(h)
    before = torch_neuronx.device_time()
    ops.partition(h, out)  # the op as eager launches
    eager = torch_neuronx.device_time() - before
    before = torch_neuronx.device_time()
    ops(h, out)  # the same op inside the graph's program
    within = torch_neuronx.device_time() - before
    assert 0 < within < eager
    # five eager launches (mul, sin, cos, add, copy_): each pays trn2's eager launch cost outside a program
    assert eager - within > 5 * 0.2, (eager, within)  # ms


def test_program_steps_scope_is_per_thread_and_balanced():
    assert _C._enter_program_steps() == 0
    assert _C._enter_program_steps() == 1
    _C._leave_program_steps()
    _C._leave_program_steps()
    with pytest.raises(RuntimeError, match="without enter_program_steps"):
        _C._leave_program_steps()
