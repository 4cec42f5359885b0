"""Note [Direct kernels]: one table of the ops computed by calling ATen's CPU kernel directly,
used by eager (kernels/Hot.cpp) and by compiled programs (compile/Executor.cpp). An op direct on
one side only must say why in the table; an op added to either side without the table fails here.
"""
import re

import torch
import torch_neuron_sim  # noqa: F401  (registers the device)
from torch_neuron_sim import _C

HOT = re.compile(r"^PrivateUse1: registered at \S*kernels/Hot\.cpp:\d+", re.M)


def hot_registrations():
    """Every aten overload whose PrivateUse1 kernel is registered in Hot.cpp."""
    found = set()
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        if HOT.search(torch._C._dispatch_dump(name)):
            found.add(name[len("aten::"):])
    return found


def test_eager_overloads_of_the_table_are_exactly_the_ones_hot_cpp_registers():
    table = {overload for _, eager, _, _ in _C.direct_ops() for overload in eager}
    registered = hot_registrations()
    assert registered, "no kernel registered from Hot.cpp: the dispatcher dump format changed?"
    assert registered - table == set(), "registered in Hot.cpp, missing from direct_ops()"
    assert table - registered == set(), "in direct_ops(), not registered in Hot.cpp"


def test_program_steps_of_the_table_are_exactly_the_ones_the_executor_runs_directly():
    table = {program for _, _, program, _ in _C.direct_ops() if program}
    assert set(_C.program_direct_ops()) == table


def test_an_op_direct_on_one_side_only_says_why():
    for op, eager, program, why_not in _C.direct_ops():
        assert eager or program, op
        if not (eager and program):
            assert why_not, f"{op} is direct on one side only and the table does not say why"
        else:
            assert not why_not, f"{op} is direct on both sides; its why_not is stale"


def test_each_direct_op_computes_the_same_eager_and_compiled():
    # A few of the table's ops through both sides against CPU: the same kernel, the same bits.
    torch.manual_seed(0)
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    x = torch.randn(4, 8)

    def f(a, b, x):
        y = torch.mm(a, b)
        y = torch.nn.functional.silu(y) * y.rsqrt().abs() - y.sin() + y.cos()
        z = torch.cat([y, y.neg()], dim=0).pow(2).mean(dim=1, keepdim=True)
        return torch.softmax(y @ x.t(), dim=-1), z

    want = f(a, b, x)
    eager = f(a.to("neuron"), b.to("neuron"), x.to("neuron"))
    compiled = torch.compile(f, backend="neuron")(a.to("neuron"), b.to("neuron"), x.to("neuron"))
    for w, e, c in zip(want, eager, compiled):
        torch.testing.assert_close(e.cpu(), w, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(c.cpu(), w, rtol=0, atol=0, equal_nan=True)
