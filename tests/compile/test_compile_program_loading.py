"""A compiled program crosses from Python to C++ once (Note [The program schema in Python],
csrc/compile/Bindings.cpp): a cache miss loads the lowered description with one
Program.from_desc (checked, built, encoded, stored), a cache hit with one Program.from_cache
(read, decoded once, built); the schema's kinds come from the bound enums."""
import collections
import subprocess
import sys

import pytest
import torch

import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C
from torch_neuron_sim.compile import cache, lowering

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

# What carries a program between Python and C++, other than the two loaders.
_OTHER_CROSSINGS = ("encode_program", "describe_program", "seal_program", "unseal_program", "program_dict_unchecked")


@pytest.fixture
def crossings(monkeypatch):
    """Counts the Python -> C++ calls that carry a program, by name."""
    calls = collections.Counter()
    for name in _OTHER_CROSSINGS:
        real = getattr(_C, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(_C, name, spy)
    real_program = _C.Program

    class Program:
        def __new__(cls, *args, **kwargs):
            calls["Program(payload)"] += 1
            return real_program(*args, **kwargs)

        @staticmethod
        def from_desc(*args, **kwargs):
            calls["Program.from_desc"] += 1
            return real_program.from_desc(*args, **kwargs)

        @staticmethod
        def from_cache(*args, **kwargs):
            calls["Program.from_cache"] += 1
            return real_program.from_cache(*args, **kwargs)
    monkeypatch.setattr(_C, "Program", Program)
    return calls


def _compile_and_run():
    torch._dynamo.reset()
    x = torch.arange(8.0, device="neuron")
    result = torch.compile(lambda t: (t * 2 + 1).relu(), backend="neuron")(x)
    assert torch.equal(result.cpu(), torch.arange(8.0) * 2 + 1)


def test_a_miss_loads_the_program_in_one_call_and_a_hit_in_one_call(crossings):
    _compile_and_run()
    assert dict(crossings) == {"Program.from_cache": 1, "Program.from_desc": 1}  # the lookup, then the load
    crossings.clear()
    _compile_and_run()  # from the program cache (through AOTAutograd's cache or ours)
    assert dict(crossings) == {"Program.from_cache": 1}


def test_a_hit_from_disk_in_a_new_process_is_one_call(tmp_path):
    code = "import torch, torch_neuronx\nx = torch.ones(8, device='neuron')\n" \
           "print(torch.compile(lambda t: t * 3, backend='neuron')(x).sum().item())\n"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)  # fills the cache
    count = code.replace("import torch, torch_neuronx\n", "import torch, torch_neuronx\n"
                         "from torch_neuron_sim import _C\nfrom torch_neuron_sim.compile import cache\n"
                         "calls = []\nreal = _C.Program\n"
                         "class P:\n    from_cache = staticmethod(lambda *a: calls.append('from_cache') or real.from_cache(*a))\n"
                         "    from_desc = staticmethod(lambda *a: calls.append('from_desc') or real.from_desc(*a))\n"
                         "_C.Program = P\n") + "print(calls)\n"
    result = subprocess.run([sys.executable, "-c", count], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-3:] == ["24.0", "['from_cache']", ""], result.stdout


def test_the_loaded_program_is_the_one_described():
    """from_desc's program encodes to what encode_program makes of the same description, and the
    cache holds that payload; from_cache gives the same program back."""
    desc = {"name": "double", "values": [], "inputs": [], "constants": [], "nodes": [], "outputs": [],
            "arena_bytes": 0, "metadata": {"layout": "[]"}}
    f32 = _C.scalar_type_code(torch.float32)
    value = {"index": 0, "bytes": 16, "on_host": False, "dtype": f32, "sizes": [4], "strides": [1], "offset": 0}
    desc["values"] = [dict(value, kind=_C.ProgramValueKind.INPUT), dict(value, kind=_C.ProgramValueKind.OUTPUT)]
    desc["inputs"], desc["outputs"] = [0], [1]
    desc["nodes"] = [{"op": "aten::mul.Scalar", "outputs": [1],
                      "args": [(_C.ProgramArgKind.VALUE, 0, 0.0, [], [], ""), (lowering.A_INT, 2, 0.0, [], [], "")]}]
    program_cache = cache.program_cache()
    program, payload_bytes, sealed = _C.Program.from_desc(desc, 0, program_cache, "aneurondouble")
    payload = _C.encode_program(desc)
    assert program.payload() == payload and payload_bytes == len(payload)
    assert sealed == _C.seal_program("aneurondouble", payload)
    assert program_cache.get("aneurondouble")[0] == payload
    again, again_bytes, again_sealed = _C.Program.from_cache(program_cache, "aneurondouble", 0)
    assert again.describe() == program.describe() == _C.describe_program(payload)
    assert (again_bytes, again_sealed) == (payload_bytes, sealed) and again.metadata == {"layout": "[]"}
    x = torch.arange(4.0, device="neuron")
    assert torch.equal(again.run([x])[0].cpu(), torch.arange(4.0) * 2)
    assert _C.Program.from_cache(program_cache, "aneuronmissing", 0) is None


def test_a_program_the_loader_refuses_is_not_cached():
    desc = {"name": "bad", "values": [], "inputs": [], "constants": [], "nodes": [], "outputs": [7],
            "arena_bytes": 0, "metadata": {}}
    with pytest.raises(RuntimeError, match="program"):
        _C.Program.from_desc(desc, 0, cache.program_cache(), "aneuronbad")
    assert cache.program_cache().get("aneuronbad") is None
    with pytest.raises(ValueError, match="unknown program kind 99"):
        _C.encode_program(dict(desc, values=[{"kind": 99, "index": 0, "bytes": 0, "on_host": False, "dtype": 6,
                                              "sizes": [], "strides": [], "offset": 0}]))


def test_the_lowering_takes_the_kinds_from_the_bound_schema():
    """lowering.py writes no number of the format: its kinds are the bound enums' values, which
    are runtime/program.h's."""
    value_kinds = _C.ProgramValueKind.__members__
    arg_kinds = _C.ProgramArgKind.__members__
    assert [int(k) for k in value_kinds.values()] == list(range(len(value_kinds)))
    assert [int(k) for k in arg_kinds.values()] == list(range(len(arg_kinds)))
    assert (lowering.INPUT, lowering.VIEW, lowering.DYNAMIC) == \
        (int(value_kinds["INPUT"]), int(value_kinds["VIEW"]), int(value_kinds["DYNAMIC"]))
    assert (lowering.A_VALUES, lowering.A_DTYPE, lowering.A_FORMAT) == \
        (int(arg_kinds["VALUE_LIST"]), int(arg_kinds["SCALAR_TYPE"]), int(arg_kinds["MEMORY_FORMAT"]))
    assert _C.layout_code(torch.strided) == 0 and _C.memory_format_code(torch.channels_last) == 2
