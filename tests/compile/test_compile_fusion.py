"""Fused pointwise kernels (Note [Fused pointwise kernels]): bit-exact with ATen's kernels op by
op, planned only where it is valid, and the static KV cache updated in place."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import torch_neuronx
from torch_neuron_sim import _C
from torch_neuron_sim.compile import backend, fusion

ADD, SUB, MUL, NEG, RSQRT, SQUARE, CONVERT, WHERE = range(8)
DTYPES = [torch.float32, torch.bfloat16]  # fusion.FLOATS: float16 is not fused


def code(dtype):
    return _C.scalar_type_code(dtype)


def cases(dtype, n):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(n, generator=g) * 3).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    positive = a.abs() + 0.01
    d = code(dtype)
    f32 = code(torch.float32)
    return {
        "add": (a + b, [a, b], [(ADD, 0, 1, -1, d)], [0.0]),
        "add scalar": (a + 1e-6, [a], [(ADD, 0, -1, -1, d)], [1e-6]),
        "sub": (a - b, [a, b], [(SUB, 0, 1, -1, d)], [0.0]),
        "mul": (a * b, [a, b], [(MUL, 0, 1, -1, d)], [0.0]),
        "mul scalar": (a * 0.1767766952966369, [a], [(MUL, 0, -1, -1, d)], [0.1767766952966369]),
        "neg": (-a, [a], [(NEG, 0, -1, -1, d)], [0.0]),
        "rsqrt": (positive.float().rsqrt(), [positive], [(RSQRT, 0, -1, -1, f32)], [0.0]),
        "square": (a.pow(2), [a], [(SQUARE, 0, -1, -1, d)], [0.0]),
        "where": (torch.where(a > 0, a, b), [a > 0, a, b], [(WHERE, 0, 1, 2, d)], [0.0]),
        "mixed dtypes": (a * b.float(), [a, b.float()], [(MUL, 0, 1, -1, f32)], [0.0]),
        # RMSNorm's tail, each op rounded as ATen rounds it
        "chain": (((positive.float() * 1.7).rsqrt() * b.float()).to(dtype) * b,
                  [positive, b], [(CONVERT, 0, -1, -1, f32), (MUL, 2, -1, -1, f32), (RSQRT, 3, -1, -1, f32),
                           (CONVERT, 1, -1, -1, f32), (MUL, 4, 5, -1, f32), (CONVERT, 6, -1, -1, d),
                           (MUL, 7, 1, -1, d)], [0.0, 1.7, 0.0, 0.0, 0.0, 0.0, 0.0]),
    }


@pytest.mark.parametrize("n", [4099, 100_003], ids=["vector-and-tail", "parallel"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_instruction_is_bit_exact_with_aten(dtype, n):
    for name, (expected, inputs, instructions, scalars) in cases(dtype, n).items():
        out = torch.empty_like(expected)
        _C.run_pointwise(out, inputs, [x for i in instructions for x in i], scalars)
        assert torch.equal(out, expected), (name, (out.float() - expected.float()).abs().max())


def test_float16_is_not_fused():
    graph = torch.fx.experimental.proxy_tensor.make_fx(lambda x: x * 2 + 1)(
        torch.ones(8, dtype=torch.float16, device="neuron")).graph
    assert not any(fusion.fusable(n, "neuron") for n in graph.nodes)


@pytest.mark.parametrize("dtype", [torch.bfloat16], ids=str)
def test_reduced_precision_rsqrt_is_not_fused(dtype):
    # ATen's vectorised bfloat16/float16 rsqrt differs from 1/sqrt in float by an ulp (its
    # scalar tail does not), so the fused kernel leaves it to ATen.
    graph = torch.fx.experimental.proxy_tensor.make_fx(lambda x: (x * 2).rsqrt() * 3)(
        torch.ones(8, dtype=dtype, device="neuron")).graph
    rsqrt = next(n for n in graph.nodes if n.target is torch.ops.aten.rsqrt.default)
    assert not fusion.fusable(rsqrt, "neuron")


def test_broadcasting_and_strided_inputs():
    a = torch.randn(4, 8, 16)
    row = torch.randn(16)
    transposed = torch.randn(16, 8).t()  # (8, 16), not contiguous
    out = torch.empty(4, 8, 16)
    f32 = code(torch.float32)
    _C.run_pointwise(out, [a, row, transposed], [MUL, 0, 1, -1, f32, ADD, 3, 2, -1, f32], [0.0, 0.0])
    assert torch.equal(out, a * row + transposed)


def test_malformed_code_is_refused_with_a_clear_error():
    out = torch.empty(3)
    with pytest.raises(RuntimeError, match="reads register 5"):
        _C.run_pointwise(out, [torch.ones(3)], [MUL, 0, 5, -1, code(torch.float32)], [0.0])
    with pytest.raises(RuntimeError, match="unknown opcode"):
        _C.run_pointwise(out, [torch.ones(3)], [99, 0, -1, -1, code(torch.float32)], [0.0])
    with pytest.raises(RuntimeError, match="malformed"):
        _C.run_pointwise(out, [torch.ones(3)], [MUL, 0], [0.0])


def rms_norm(x, weight):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype)


def kept_programs(monkeypatch):
    """The list that receives each program compiled from now on (this test only)."""
    programs = []
    original = backend.debug.preserve

    def keep(name, gm, program):
        programs.append(program)
        original(name, gm, program)
    monkeypatch.setattr(backend.debug, "preserve", keep)
    return programs


def programs_of(fn, *args):
    """Compiles fn; returns (result, [program summaries])."""
    summaries = []
    original = backend.debug.preserve

    def keep(name, gm, program):
        summaries.append(program.describe())
        original(name, gm, program)
    backend.debug.preserve = keep
    try:
        torch._dynamo.reset()
        result = torch.compile(fn, backend="neuron")(*args)
    finally:
        backend.debug.preserve = original
    return result, summaries


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_fuses_and_equals_eager_bit_for_bit(dtype, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    x = torch.randn(2, 5, 64).to(dtype).to("neuron")
    w = torch.randn(64).to(dtype).to("neuron")
    got, (summary,) = programs_of(rms_norm, x, w)
    assert "neuron::pointwise" in summary["ops"]
    assert summary["nodes"] <= 3, summary["ops"]  # fused, mean, fused
    assert torch.equal(got.cpu(), rms_norm(x.cpu(), w.cpu()))


def test_values_read_outside_the_group_are_materialised(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))

    def f(x, y):
        t = x * y + 1          # used by the sum (not pointwise) and by the fused tail
        return t.sum(-1), (t * 2).neg()
    x = torch.randn(8, 16, device="neuron")
    y = torch.randn(8, 16, device="neuron")
    (total, tail), _ = programs_of(f, x, y)
    eager_total, eager_tail = f(x.cpu(), y.cpu())
    assert torch.equal(total.cpu(), eager_total) and torch.equal(tail.cpu(), eager_tail)


def test_fusion_off_gives_the_same_result(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    x = torch.randn(3, 32).to(torch.bfloat16).to("neuron")
    w = torch.randn(32).to(torch.bfloat16).to("neuron")
    fused, (with_fusion,) = programs_of(rms_norm, x, w)
    monkeypatch.setenv("NEURON_SIM_FUSION", "0")
    plain, (without,) = programs_of(rms_norm, x, w)
    assert "neuron::pointwise" not in without["ops"] and without["nodes"] > with_fusion["nodes"]
    assert torch.equal(fused.cpu(), plain.cpu())


def test_plan_bounds_group_size():
    def long_chain(x):
        for i in range(40):
            x = x * 1.01 + i
        return x
    gm = torch.fx.experimental.proxy_tensor.make_fx(long_chain)(torch.randn(4, device="neuron"))
    plan = fusion.Plan(gm.graph, "neuron")
    assert plan.groups and all(len(members) <= fusion.MAX_INSTRUCTIONS for members, _ in plan.groups.values())
    # every inlined node is computed by some group
    covered = set()
    for members, _ in plan.groups.values():
        covered.update(members)
    assert plan.inline <= covered


def test_static_cache_update_is_in_place(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    cache = torch.zeros(1, 2, 16, 4, device="neuron")

    def update(cache, position, states):
        cache.index_copy_(2, position, states)
        return cache.sum()
    position = torch.tensor([3], device="neuron")
    states = torch.ones(1, 2, 1, 4, device="neuron")
    total, (summary,) = programs_of(update, cache, position, states)
    assert "aten::index_copy_" in summary["ops"] and "aten::index_copy" not in summary["ops"]
    assert total.item() == 8.0 and cache[0, :, 3].sum().item() == 8.0 and cache.sum().item() == 8.0


def test_rotary_concatenation_and_static_cache_update_run_as_direct_kernels(monkeypatch, tmp_path):
    """rotate_half's cat and a static KV cache's index_copy_ (a decode step's) call their CPU
    kernels directly, not through the dispatcher; results equal eager CPU, also on a second call."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))

    def step(cache, position, key, x):
        cache.index_copy_(2, position, key)
        x1, x2 = x[..., :4], x[..., 4:]
        return torch.cat((-x2, x1), dim=-1) * x

    programs = kept_programs(monkeypatch)
    torch._dynamo.reset()
    compiled = torch.compile(step, backend="neuron", fullgraph=True)
    cache, cache_cpu = torch.zeros(1, 2, 6, 8, device="neuron"), torch.zeros(1, 2, 6, 8)
    for position in (3, 4):
        key, x = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
        index = torch.tensor([position])
        got = compiled(cache, index.to("neuron"), key.to("neuron"), x.to("neuron"))
        expected = step(cache_cpu, index, key, x)
        assert torch.equal(got.cpu(), expected) and torch.equal(cache.cpu(), cache_cpu)
    (program,) = programs
    assert "aten::cat" in program.describe()["ops"]
    assert program.dispatched_nodes == 0, program.describe()["ops"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64], ids=str)
def test_ops_with_a_python_number_run_as_direct_kernels(dtype, monkeypatch, tmp_path):
    """x * 0.125, x + eps, x - 2, x / 3 (attention scaling, a norm's epsilon) call their CPU
    kernels directly with the number as a wrapped scalar: the tensor's dtype wins, as in eager."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NEURON_SIM_FUSION", "0")  # each op its own step

    def f(x):
        return x * 0.125, x + 1e-3, x - 2, x / 3, x * 3, 2.5 + x

    x = (torch.randn(3, 8) * 8).to(dtype)
    programs = kept_programs(monkeypatch)
    torch._dynamo.reset()
    got = torch.compile(f, backend="neuron", fullgraph=True)(x.to("neuron"))
    for g, e in zip(got, f(x)):
        assert g.dtype == e.dtype and torch.equal(g.cpu(), e), (g, e)
    (program,) = programs
    ops = program.describe()["ops"]
    assert program.dispatched_nodes == 0, ops


def test_program_profile_counts_each_step(tmp_path):
    """NEURON_SIM_PROGRAM_PROFILE=1: time per op kind over every program run (for finding what a
    compiled graph spends its time on); off, nothing is recorded."""
    from conftest import run_python
    code = """
import torch, torch_neuronx
from torch_neuron_sim import _C
f = torch.compile(lambda x, w: torch.relu(x @ w).sum(), backend="neuron")
x, w = torch.randn(4, 8, device="neuron"), torch.randn(8, 8, device="neuron")
f(x, w)
_C.program_profile(True)
for _ in range(3):
    f(x, w)
torch.neuron.synchronize()
print({name: calls for name, calls, seconds in _C.program_profile() if seconds >= 0})
"""
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path), "NEURON_SIM_PROGRAM_PROFILE": "1"}
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr[-2000:]
    profile = eval(result.stdout.strip().splitlines()[-1])
    assert profile.get("aten::mm") == 3, profile
    assert sum(profile.values()) >= 6, profile
    result = run_python(code, dict(env, NEURON_SIM_PROGRAM_PROFILE="0"))
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == "{}", result.stdout + result.stderr[-2000:]


def test_a_residual_stream_is_materialised_not_recomputed_by_ever_larger_groups():
    """Each layer's residual add is read by the layer's norm (a sum, not fusable: a group's root
    reads it) and by the next add: recomputing it in both groups made every later group read all
    earlier layers' inputs again (the dry run saw a 70B prefill's groups grow by one 160 MB input a
    layer). Materialised, every layer's groups are the same."""
    def layers(x, *deltas):
        for delta in deltas:
            x = x + delta                                    # the residual stream
            x = x + (x * x).sum(-1, keepdim=True) * 0.5 * x  # a norm-like use, and the next add
        return x

    def groups(depth):
        tensors = [torch.randn(4, 8, device="neuron") for _ in range(depth + 1)]
        gm = torch.fx.experimental.proxy_tensor.make_fx(layers)(*tensors)
        plan = fusion.Plan(gm.graph, "neuron")
        return sorted((len(members), len(leaves)) for members, leaves in plan.groups.values())

    two, eight = groups(2), groups(8)
    assert max(leaves for _, leaves in eight) == max(leaves for _, leaves in two) <= 3
    assert len(eight) == 4 * len(two)  # the same groups per layer


def test_a_diamond_read_by_one_group_stays_inside_it():
    """a = x + y read twice inside one group (b = a * 2, c = a - z, b * c) is computed once there:
    not materialised (it is recomputed by no other group)."""
    def diamond(x, y, z):
        a = x + y
        return (a * 2) * (a - z)
    tensors = [torch.randn(4, 8, device="neuron") for _ in range(3)]
    gm = torch.fx.experimental.proxy_tensor.make_fx(diamond)(*tensors)
    plan = fusion.Plan(gm.graph, "neuron")
    assert len(plan.groups) == 1
    (members, leaves), = plan.groups.values()
    assert len(members) == 4 and len(leaves) == 3


def test_bfloat16_add_and_sub_with_a_python_scalar_fuse_as_aten_computes_them(tmp_path, monkeypatch):
    """ATen's bfloat16 add/sub round a Python scalar to bfloat16 first (mul does not); the fused
    code must too (review 25 finding 1: 687 of 2145 elements differed)."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    a = torch.randn(33, 65).to(torch.bfloat16)
    for f in (lambda x: (x + 0.37) * x, lambda x: (x - 0.37) * x, lambda x: (x * 1.9) * x + 1e-5):
        compiled = torch.compile(f, backend="neuron")(a.to("neuron"))
        assert torch.equal(compiled.cpu(), f(a))
