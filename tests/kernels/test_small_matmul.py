"""Small bfloat16 matmuls, eager and in programs (Note [Small bfloat16 matmuls],
csrc/kernels/SmallMatmul.h): oneDNN's brgemm kernel called directly, equal to the CPU's at::mm
bit for bit; the per-shape probe keeps at::mm wherever that does not hold; layouts the kernel
cannot read fall back."""
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo

import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

# What the kernel needs from the CPU: AVX512-BF16, and oneDNN's ISA (ONEDNN_MAX_CPU_ISA) at
# least avx512_core_bf16; "transposed" on AMX, "direct" without; or AVX2 without AVX-512, where
# at::mm runs cpublas's dot products: "dot" (Note [Small bfloat16 matmuls]).
FORM = _C.small_matmul_form()
SUPPORTED = FORM != "none" and _C.small_matmul_applies(1, 128, 128)
needs_kernel = pytest.mark.skipif(
    not SUPPORTED,
    reason="the small-matmul kernel does not run on this CPU (no AVX512-BF16, or ONEDNN_MAX_CPU_ISA below "
    "AVX512_CORE_BF16): every product is at::mm's" if FORM == "none" else
    "oneDNN's matmul sums 1x128x128 in another order here: programs keep at::mm")


def cancellation(rows, cols, generator, weight):
    """Small nonzero integers; in a weight an eighth of entries are +-2^20..2^26: float32 sums
    then depend on the order of addition (the probe's order-revealing draw, in Python)."""
    sign = torch.randint(0, 2, (rows, cols), generator=generator) * 2 - 1
    small = torch.randint(1, 4, (rows, cols), generator=generator) * sign
    if not weight:
        return small.to(torch.bfloat16)
    big = sign * 2.0 ** torch.randint(20, 27, (rows, cols), generator=generator)
    return torch.where(torch.rand(rows, cols, generator=generator) < 0.125, big, small).to(torch.bfloat16)


def draws(m, k, n, count, generator):
    for i in range(count):
        if i % 2:
            yield cancellation(m, k, generator, False), cancellation(n, k, generator, True)
        else:
            yield torch.randn(m, k, generator=generator).bfloat16(), torch.randn(n, k, generator=generator).bfloat16()


def equals_eager_at(shape, threads, seed):
    """The kernel on 4 draws at `threads` intra-op threads: accepted by the probe, and bit for bit
    at::mm's (compared as int16, so that NaNs' bits count too)."""
    m, k, n = shape
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert _C.small_matmul_applies(m, k, n)
        g = torch.Generator().manual_seed(seed)
        for a, w in draws(m, k, n, 4, g):
            expected = torch.mm(a, w.t())
            out = torch.empty_like(expected)
            assert _C._small_matmul_unchecked(out, a, w.t())
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16))
    finally:
        torch.set_num_threads(previous)


ACCEPTED = [(1, 128, 128), (1, 128, 256), (1, 256, 128), (8, 128, 384), (5, 130, 96), (32, 128, 256), (3, 128, 1000), (1, 128, 40)]


@needs_kernel
@pytest.mark.parametrize("shape", ACCEPTED, ids=str)
def test_kernel_equals_eager_bit_for_bit(shape):
    m, k, n = shape
    assert _C.small_matmul_applies(m, k, n)
    g = torch.Generator().manual_seed(sum(shape))
    for a, w in draws(m, k, n, 20, g):
        expected = torch.mm(a, w.t())
        out = torch.empty_like(expected)
        assert _C._small_matmul_unchecked(out, a, w.t())
        assert torch.equal(out, expected)


@needs_kernel
@pytest.mark.skipif(FORM != "direct", reason="the one-row kernel is the direct form's (AVX512-BF16 without AMX)")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1026, 17), (1, 1536, 33), (1, 3000, 97), (1, 4098, 65), (1, 200, 1001)],
                         ids=str)
def test_one_row_kernel_odd_shapes_equal_eager(shape, threads):
    # A decode step's product (one row of activations) in the direct form: K in pieces of 512 or
    # 1024 with a short last one, K/2 not a multiple of 16, N not a multiple of 16 or 32, the rows
    # split among threads at blocks that do not end on a multiple of 32 (review 44).
    equals_eager_at(shape, threads, seed=shape[1] + shape[2])


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 768, 2560), (4, 2560, 768), (1, 128, 32000), (20, 768, 1000)], ids=str)
def test_large_weights_split_among_threads_equal_eager(shape, threads):
    # From 64K weight elements the rows are split among the intra-op threads (blocks of 16).
    equals_eager_at(shape, threads, seed=shape[2])


@needs_kernel
def test_probe_rejects_shapes_where_onednn_sums_otherwise():
    # The probe's verdict agrees with an independent check: where it says no, the kernel
    # really gives other bits than at::mm for some draw; where it says yes, it never does.
    g = torch.Generator().manual_seed(0)
    verdicts = {}
    for shape in [(1, 128, 128), (2, 32, 32), (1, 100, 32), (3, 100, 64), (1, 64, 64), (3, 96, 64)]:
        m, k, n = shape
        differs = False
        for a, w in draws(m, k, n, 40, g):
            expected = torch.mm(a, w.t())
            out = torch.empty_like(expected)
            assert _C._small_matmul_unchecked(out, a, w.t())  # whatever the probe said
            differs = differs or not torch.equal(out, expected)
        verdicts[shape] = (_C.small_matmul_applies(m, k, n), differs)
    assert all(applies != differs for applies, differs in verdicts.values()), verdicts
    if FORM != "dot":  # the dot form sums as at::mm on every shape; rejection: the test below
        assert any(not applies for applies, _ in verdicts.values()), "no shape rejected: the probe was not exercised"


def special_values(rows, cols, generator):
    """bfloat16 values where a kernel's handling shows: NaN, +-inf, +-0, denormals, the largest
    finite, values whose products fall in float32's denormal range, among ordinary ones."""
    pool = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -1e-40, 3.3e38, -3.3e38,
                         2.0 ** -70, -(2.0 ** -70), 1.0, -1.5, 3.0], dtype=torch.bfloat16)
    values = torch.randn(rows, cols, generator=generator).bfloat16()
    pick = torch.rand(rows, cols, generator=generator) < 0.02
    return torch.where(pick, pool[torch.randint(0, len(pool), (rows, cols), generator=generator)], values)


@needs_kernel
@pytest.mark.skipif(FORM != "dot", reason="the dot form's kernel runs on AVX2 CPUs without AVX-512 only")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 2, 5), (1, 14, 9), (2, 16, 3), (1, 18, 33), (3, 62, 17), (1, 64, 64),
                                   (1, 66, 65), (4, 80, 31), (1, 126, 200), (1, 130, 129), (1, 770, 1000),
                                   (7, 2562, 70), (1, 128, 70000)], ids=str)
def test_dot_form_equals_eager_with_special_values(shape, threads):
    # Every part of bf16_dot_with_fp32_arith's order: rounds of 64, blocks of 16 after them
    # (none, one, three), single elements (k % 16), -0 sums (+0 after the blocks' reduced zero),
    # NaN (at::mm rounds every NaN to 0x7FC0), inf, overflow, denormal products; rows split
    # among threads; compared as int16.
    m, k, n = shape
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert _C.small_matmul_applies(m, k, n)
        g = torch.Generator().manual_seed(k * 7 + n)
        cases = [special_values(m, k, g), special_values(n, k, g)], [-torch.zeros(m, k).bfloat16(), torch.ones(n, k).bfloat16()]
        for a, w in [*draws(m, k, n, 2, g), *cases]:
            expected = torch.mm(a, w.t())
            out = torch.empty_like(expected)
            assert _C._small_matmul_unchecked(out, a, w.t())
            assert torch.equal(out.view(torch.int16), expected.view(torch.int16))
    finally:
        torch.set_num_threads(previous)


@needs_kernel
@pytest.mark.skipif(FORM != "dot", reason="the dot form's kernel runs on AVX2 CPUs without AVX-512 only")
def test_dot_form_probe_rejects_another_summation():
    # Under ATEN_CPU_CAPABILITY=default at::mm sums with ATen's portable vectors (another order):
    # the probe must see it and keep at::mm, and products still equal the CPU's.
    code = ("import torch, torch_neuronx\nfrom torch_neuron_sim import _C\n"
            "torch.manual_seed(0)\n"
            "a, w = torch.randn(1, 768).bfloat16(), torch.randn(256, 768).bfloat16()\n"
            "x = torch.nn.functional.linear(a.to('neuron'), w.to('neuron')).cpu()\n"
            "print(_C.small_matmul_form(), _C.small_matmul_applies(1, 768, 256), torch.equal(x, a @ w.t()))\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, ATEN_CPU_CAPABILITY="default"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["dot", "False", "True"], out.stdout


@pytest.mark.parametrize("layout", ["a row stride > k", "w row stride > k", "n not a multiple of 16",
                                    "b contiguous (falls back)", "a transposed (falls back)",
                                    "out non-contiguous (falls back)", "float32 (falls back)",
                                    "33 rows (falls back)", "out overlaps a (falls back)"])
def test_layouts_equal_eager(layout):
    g = torch.Generator().manual_seed(1)
    dtype = torch.float32 if layout.startswith("float32") else torch.bfloat16
    m, k, n = {"n not a multiple of 16": (4, 128, 40), "33 rows (falls back)": (33, 128, 64),
               "out overlaps a (falls back)": (4, 128, 128)}.get(layout, (4, 128, 64))
    a = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = w.t()
    out = torch.empty(m, n, dtype=dtype)
    if layout == "a row stride > k":
        a = torch.randn(m, k + 6, generator=g).to(dtype)[:, 3:3 + k]
    elif layout == "w row stride > k":
        b = torch.randn(n, k + 10, generator=g).to(dtype)[:, 2:2 + k].t()
    elif layout == "b contiguous (falls back)":
        b = b.contiguous()
    elif layout == "a transposed (falls back)":
        a = a.t().contiguous().t()
    elif layout == "out non-contiguous (falls back)":
        out = torch.empty(n, m, dtype=dtype).t()
    elif layout == "out overlaps a (falls back)":
        out = a
    expected = torch.mm(a, b)
    if SUPPORTED and dtype == torch.bfloat16:
        probe = torch.empty_like(out) if layout.startswith("out overlaps") else out
        ran = _C._small_matmul_unchecked(out if layout.startswith("out overlaps") else probe, a, b)
        assert ran == ("falls back" not in layout), layout
        if ran:
            assert torch.equal(probe, expected)
    if not layout.startswith("out overlaps"):  # at::mm_out refuses an out that is an input
        _C.small_matmul(out, a, b)
        assert torch.equal(out, expected)


def test_bad_shapes_are_a_clear_error():
    with pytest.raises(RuntimeError, match="do not match"):
        _C.small_matmul(torch.empty(2, 3, dtype=torch.bfloat16), torch.empty(2, 4, dtype=torch.bfloat16),
                        torch.empty(5, 3, dtype=torch.bfloat16))


def test_compiled_linears_equal_eager_and_see_weights_changed_in_place(fresh_dynamo):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256, bias=False), torch.nn.SiLU(),
                                torch.nn.Linear(256, 128, bias=False)).to(torch.bfloat16).to("neuron")
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(1, 128).bfloat16().to("neuron")
    with torch.no_grad():
        assert torch.equal(compiled(x).cpu(), model(x).cpu())
        assert torch.equal(compiled(x).cpu(), model.cpu()(x.cpu()))
        model.to("neuron")
        # .data has its own version counter: a weight changed this way is seen because the
        # kernel reads the weight where it lies on every call (nothing derived from it is cached).
        model[0].weight.data.mul_(-0.5)
        assert torch.equal(compiled(x).cpu(), model(x).cpu())


def test_switch_off_keeps_at_mm():
    code = ("import torch, torch_neuronx; from torch_neuron_sim import _C; "
            "print(_C.small_matmul_applies(1, 128, 128))")
    env = dict(os.environ, NEURON_SIM_SMALL_MATMUL="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_program_profile_shows_the_kernel(tmp_path):
    """A decode-sized bfloat16 linear runs through the kernel (the profile names its steps by the
    kernel's form on this CPU: "aten::mm (transposed)", "(direct)" or "(dot)"), a shape the probe
    rejects keeps at::mm, and NEURON_SIM_SMALL_MATMUL=0 keeps at::mm everywhere (as does a CPU
    without the kernel)."""
    from conftest import run_python
    code = """
import torch, torch_neuronx
from torch_neuron_sim import _C
f = torch.compile(lambda x, w, v: (x @ w.t(), x[:, :32] @ v.t()), backend="neuron")
x = torch.randn(1, 128).bfloat16().to("neuron")
w, v = torch.randn(256, 128).bfloat16().to("neuron"), torch.randn(32, 32).bfloat16().to("neuron")
f(x, w, v)
_C.program_profile(True)
for _ in range(3):
    f(x, w, v)
torch.neuron.synchronize()
print({name: calls for name, calls, seconds in _C.program_profile()})
"""
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path), "NEURON_SIM_PROGRAM_PROFILE": "1"}
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr[-2000:]
    profile = eval(result.stdout.strip().splitlines()[-1])
    if SUPPORTED:
        rejected = not _C.small_matmul_applies(1, 32, 32)
        assert profile.get(f"aten::mm ({_C.small_matmul_form()})") == (3 if rejected else 6), profile
        assert profile.get("aten::mm") == (3 if rejected else None), profile
    else:
        assert profile.get("aten::mm") == 6 and not any(name.startswith("aten::mm (") for name in profile), profile
    result = run_python(code, dict(env, NEURON_SIM_SMALL_MATMUL="0"))
    assert result.returncode == 0, result.stderr[-2000:]
    profile = eval(result.stdout.strip().splitlines()[-1])
    assert profile.get("aten::mm") == 6 and not any(name.startswith("aten::mm (") for name in profile), profile


def test_eager_linear_takes_the_kernel_and_equals_cpu():
    # (without the kernel: every product is at::mm's and equals CPU)
    torch.manual_seed(0)
    for m, k, n in [(1, 128, 256), (8, 128, 384), (32, 256, 128), (1, 768, 2560)]:
        x, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
        before = _C.small_matmul_calls()
        got = torch.nn.functional.linear(x.to("neuron"), w.to("neuron"))
        assert _C.small_matmul_calls() == before + (1 if SUPPORTED else 0), (m, k, n)
        assert torch.equal(got.cpu(), torch.nn.functional.linear(x, w))
    # 33 rows, a rejected shape, float32: at::mm
    for x, w in [(torch.randn(33, 128).bfloat16(), torch.randn(64, 128).bfloat16()),
                 (torch.randn(2, 32).bfloat16(), torch.randn(32, 32).bfloat16()),
                 (torch.randn(1, 128), torch.randn(128, 128))]:
        before = _C.small_matmul_calls()
        got = torch.nn.functional.linear(x.to("neuron"), w.to("neuron"))
        assert torch.equal(got.cpu(), torch.nn.functional.linear(x, w))
        if x.shape == (2, 32):
            assert _C.small_matmul_calls() == before + (1 if _C.small_matmul_applies(2, 32, 32) else 0)
        else:
            assert _C.small_matmul_calls() == before


def test_eager_training_step_equals_cpu():
    # forward, and the backward's products (grad_input = grad @ w: 4 rows; grad_weight has
    # 128 rows and keeps at::mm), all equal to CPU's
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).bfloat16()
    dev = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).bfloat16()
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = torch.randn(4, 128).bfloat16()
    cpu(x).float().pow(2).sum().backward()
    dev(x.to("neuron")).float().pow(2).sum().backward()
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        assert torch.equal(p.grad, q.grad.cpu()), name


def test_asynchronous_mode_equals_cpu():
    from conftest import run_python
    code = """
import torch, torch_neuronx
torch.manual_seed(0)
x, w, big = torch.randn(4, 128).bfloat16(), torch.randn(256, 128).bfloat16(), torch.randn(32000, 128).bfloat16()
from torch_neuron_sim import _C
xs, ws, bigs = x.to("neuron"), w.to("neuron"), big.to("neuron")
before = _C.small_matmul_calls()
# small ones run at the call on an idle stream; the vocabulary-sized one is queued
outs = [torch.nn.functional.linear(xs, ws) for _ in range(50)] + [torch.nn.functional.linear(xs, bigs)]
print(all(torch.equal(o.cpu(), torch.nn.functional.linear(x, w)) for o in outs[:-1]),
      torch.equal(outs[-1].cpu(), torch.nn.functional.linear(x, big)), _C.small_matmul_calls() - before)
"""
    result = run_python(code, {"NEURON_LAUNCH_BLOCKING": "0"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == f"True True {51 if SUPPORTED else 0}", result.stdout
