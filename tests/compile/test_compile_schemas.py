"""Ops with no result, one result and several results in compiled graphs, and the runtime
checks graphs carry (torch._assert_async, Python asserts on tensors, the checks decompositions
add, torch._check): the lowering pairs every result with its return for any op schema
(lowering.returned_values), a check that holds changes nothing, and one that fails raises
with eager's message."""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401
from torch_neuron_sim.compile.backend import NEFFExecutionError
from torch_neuron_sim import _C
from torch_neuron_sim.compile.lowering import Lowering, LoweringError, returned_values

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


# ---- every schema ----------------------------------------------------------------------------

def _sample(type_):
    """A traced value of a return of type `type_`."""
    if isinstance(type_, torch.OptionalType):
        return None
    if isinstance(type_, torch.ListType):
        return [_sample(type_.getElementType()), _sample(type_.getElementType())]
    text = str(type_)
    if text.startswith("Tensor"):
        return torch.empty(1)
    return {"int": 1, "SymInt": 1, "float": 1.0, "bool": True, "Scalar": 1, "ScalarType": torch.float32}.get(text, object())


def _aten_schemas():
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            yield getattr(packet, overload)._schema


def test_every_aten_schema_pairs_its_results_with_its_returns():
    forms = {"none": 0, "one": 0, "many": 0}
    for schema in _aten_schemas():
        returns = schema.returns
        if not returns:
            val, expected = None, 0
        elif len(returns) == 1:
            val = _sample(returns[0].type)
            expected = len(val) if isinstance(returns[0].type, torch.ListType) else 1
        else:
            val = tuple(_sample(r.type) for r in returns)
            expected = len(returns)
        pairs, form = returned_values(schema, val)
        assert len(pairs) == expected, schema
        assert form == ("none" if not returns else "many" if isinstance(val, (list, tuple)) else "one"), schema
        assert all(returned in returns for returned, _ in pairs), schema
        forms[form] += 1
    # torch 2.13 has hundreds of each (e.g. _assert_async.msg, _foreach_add_.List: none)
    assert all(count > 100 for count in forms.values()), forms


def test_a_traced_value_that_does_not_match_its_schema_is_a_clear_error():
    schema = torch.ops.aten.max.dim._schema
    with pytest.raises(LoweringError, match="1 traced result.*2 return"):
        returned_values(schema, torch.empty(1))


# ---- compiled graphs against eager ------------------------------------------------------------

def _assert_same(got, expected):
    if isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_same(g, e)
    elif isinstance(expected, torch.Tensor):
        assert got.device.type == "neuron"
        torch.testing.assert_close(got.cpu(), expected)
    else:
        assert got == expected


def _no_result(x):
    torch._assert_async(x.sum() > 0, "sum must be positive")
    torch._assert_async(x.max() > 0)
    return x + 1


def _in_place(x):
    y = x.clone()
    y.mul_(2).add_(1)
    return y


def _foreach(x):
    return torch._foreach_mul([x, x + 1], 2.0)


GRAPHS = {
    "no result (asserts that hold)": _no_result,
    "one result": lambda x: x.exp(),
    "two results, both used": lambda x: torch.max(x, 1),
    "two results, one used": lambda x: torch.max(x, 1).indices * 2,
    "topk": lambda x: torch.topk(x, 2, dim=1),
    "sort": lambda x: torch.sort(x, dim=0, descending=True),
    "aminmax": lambda x: torch.aminmax(x, dim=1),
    "var_mean": lambda x: torch.var_mean(x, dim=1),
    "frexp (two dtypes)": lambda x: torch.frexp(x),
    "layer_norm (three results inside)": lambda x: F.layer_norm(x, (4,)),
    "split (a list of views)": lambda x: torch.split(x, 2, dim=1),
    "unbind": lambda x: torch.unbind(x, 0),
    "foreach (a Tensor[] return)": _foreach,
    "in place (returns its argument)": _in_place,
    "one_hot (checks from its decomposition)": lambda x: F.one_hot((x.abs() * 10).long() % 4, 4),
}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_compiled_results_match_eager(name):
    fn = GRAPHS[name]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)) + 0.5
    x[0, 0] = 2.0  # the asserts hold
    expected = fn(x)
    got = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"))
    _assert_same(got, expected)


def _dbrx():
    from transformers import AutoModelForCausalLM, DbrxConfig
    config = DbrxConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=128, vocab_size=128,
                        attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
                        ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2})
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def test_tiny_dbrx_compiles_and_matches_eager():
    # Its mixture-of-experts router one-hot encodes the chosen experts: the decomposition of
    # one_hot checks its classes with _assert_async.msg, an op with no result.
    model = _dbrx()
    ids = torch.randint(3, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
        model.to("neuron")
        got = torch.compile(model, backend="neuron")(ids.to("neuron")).logits
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


# ---- checks that fail ------------------------------------------------------------------------------

_plain = {}  # compiled outside pytest's assertion rewriting, which would turn the assert into a graph break
exec(compile("def python_assert(x):\n    assert x.sum() > 0, 'the sum must be positive'\n    return x * 2\n",
             "python_assert", "exec"), _plain)
_python_assert = _plain["python_assert"]


FAILING = {
    "_assert_async with a message": (lambda x: (torch._assert_async(x.sum() > 0, "sum must be positive"), x + 1)[1],
                                     torch.tensor([-1.0, -2.0]), "sum must be positive"),
    "_assert_async without a message": (lambda x: (torch._assert_async(x.sum() > 0), x + 1)[1],
                                        torch.tensor([-1.0, -2.0]), "Expected Tensor with single nonzero value"),
    "a Python assert on a tensor": (_python_assert, torch.tensor([-1.0, -2.0]), "the sum must be positive"),
    "one_hot of a negative class": (lambda x: F.one_hot(x, 4), torch.tensor([0, -1]), "non-negative"),
    "one_hot of a class too large": (lambda x: F.one_hot(x, 4), torch.tensor([0, 4]), "smaller than num_classes"),
}


@pytest.mark.parametrize("name", list(FAILING))
def test_a_failing_check_raises_and_the_graph_still_runs(name):
    fn, bad, message = FAILING[name]
    with pytest.raises((RuntimeError, AssertionError)):
        fn(bad)  # eager on the CPU raises too
    compiled = torch.compile(fn, backend="neuron")
    with pytest.raises(NEFFExecutionError, match=message):
        compiled(bad.to("neuron"))
    good = bad.abs() if bad.is_floating_point() else bad.clamp(0, 3)
    _assert_same(compiled(good.to("neuron")), fn(good))


def test_torch_check_on_static_shapes_compiles_to_nothing():
    def fn(x):
        torch._check(x.shape[0] == 3, lambda: "three rows")
        return x * 3

    x = torch.ones(3, 2)
    _assert_same(torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron")), fn(x))

    def wrong(x):
        torch._check(x.shape[0] == 5, lambda: "five rows")
        return x

    with pytest.raises(RuntimeError, match="five rows"):
        torch.compile(wrong, backend="neuron", fullgraph=True)(x.to("neuron"))


ASYNC_CHECK = """
import torch, torch_neuronx, torch.nn.functional as F
f = torch.compile(lambda x: F.one_hot(x, 4) * 2, backend="neuron")
y = f(torch.tensor([0, -1], device="neuron"))
print("returned", flush=True)
y.cpu()
"""


def test_a_failing_check_in_asynchronous_mode_fails_the_stream(tmp_path):
    # As a CUDA device-side assert: the call returns, the next wait raises the check's message.
    from conftest import run_python
    result = run_python(ASYNC_CHECK, {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_INLINE_BYTES": "0",
                                      "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff"),
                                      "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}, timeout=300)
    assert result.returncode != 0 and "returned" in result.stdout, result.stderr[-2000:]
    assert "an asynchronous task failed" in result.stderr and "Class values must be non-negative" in result.stderr, \
        result.stderr[-2000:]


# ---- arguments given as numbers -----------------------------------------------------------------

def test_every_schema_default_of_an_enum_type_is_encoded_with_its_own_kind():
    """A ScalarType, Layout or MemoryFormat argument the graph leaves to its default (PyTorch
    gives `ScalarType? dtype=long` as the int 4) is encoded with the kind of its real type, as a
    torch.dtype is: the loader refuses an int for a ScalarType. Every default in every ATen
    schema; the codes are c10's (_C.scalar_type_code and friends)."""
    kinds = {"ScalarType": _C.ProgramArgKind.SCALAR_TYPE, "Layout": _C.ProgramArgKind.LAYOUT,
             "MemoryFormat": _C.ProgramArgKind.MEMORY_FORMAT}
    lowering = Lowering(None)
    checked = 0
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            for argument in getattr(packet, overload)._schema.arguments:
                real = str(argument.real_type).removeprefix("Optional[").removesuffix("]")
                default = argument.default_value if argument.has_default_value() else None
                if real in kinds and isinstance(default, int):
                    assert lowering._arg(default, argument)[:2] == (int(kinds[real]), default), (overload, argument)
                    checked += 1
    assert checked >= 9  # randint's and randperm's `dtype=long` among them
    assert lowering._arg(torch.int64, torch.ops.aten.randperm.generator._schema.arguments[2])[:2] == \
        (int(_C.ProgramArgKind.SCALAR_TYPE), _C.scalar_type_code(torch.int64)) == (int(_C.ProgramArgKind.SCALAR_TYPE), 4)
    assert lowering._arg(torch.channels_last, torch.ops.aten.empty.memory_format._schema.arguments[-1])[:2] == \
        (int(_C.ProgramArgKind.MEMORY_FORMAT), _C.memory_format_code(torch.channels_last))
