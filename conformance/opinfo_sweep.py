"""OpInfo conformance sweep: every OpInfo of PyTorch's `op_db`, run on CPU and on neuron.

    python -m conformance.opinfo_sweep --output COVERAGE.md [--only SUBSTR ...] [--max-samples N]

For each OpInfo and each dtype of float32, float64, bfloat16, int64, bool that the op supports
on CPU, every sample of `op.sample_inputs("cpu", dtype)` runs on CPU and, moved to neuron, on
neuron; the results are compared. Variants: forward (`op`), in-place
(`op.inplace_variant`), out= (`op.supports_out`) and, in float32 for ops with
`op.supports_autograd`, gradients. A test calls `run_sweep(...)` and gets structured
results (`PairResult`).

Rules (also written into COVERAGE.md):
- Moving a sample to neuron keeps its exact layout: each storage is copied byte for byte
  once and every tensor is rebuilt over the copy with its own sizes, strides and offset, so
  non-contiguous, expanded and aliasing inputs stay so. Tensors nested in lists, tuples
  and dicts are moved; `torch.device("cpu")`, the string "cpu" and CPU generators become
  their neuron counterparts. The CPU run uses a replica made the same way, so the original
  sample is never mutated.
- A sample whose CPU run raises is not run (for that variant). Everything else the neuron
  run does is compared: raising, a result off the neuron device, dtype, shape, values
  (`torch.testing.assert_close(..., equal_nan=True)` on `.cpu()`), and non-tensor results
  with `==`. Values are compared after `sample.output_process_fn_grad`, as PyTorch's
  test_compare_cpu does.
- Tolerances, by the dtype of each compared tensor: exact for integer and bool; float32
  uses assert_close's defaults (atol 1e-5, rtol 1.3e-6); bfloat16 uses atol 1e-2,
  rtol 1.6e-2; other floating dtypes (e.g. float64 results of an int64 pair) use
  assert_close's defaults for them. For tensors of the pair's own dtype, a
  `toleranceOverride` or `precisionOverride` that the OpInfo declares (for CPU or any
  device, for any of its tests) widens them.
- Layout: strides (of dimensions longer than 1) and the storage offset are compared when the
  CPU output is a view of an input (shares its storage) or is not contiguous; a CPU output
  that aliases input i must alias neuron input i. In-place results must be the input object
  itself and out= results the `out` object itself when the CPU's are.
- Random ops (RANDOM_OPS and OpInfos with `has_nondeterministic_output`, e.g. empty*)
  compare only device, dtype and shape: the device draws from its own Philox generator, so its
  values are not CPU's (as CUDA's are not). RANDOM_OPS are checked as PyTorch's suite checks
  CUDA's: the forward run twice after `torch.neuron.manual_seed` gives the same values, and the
  neuron runs leave the CPU's default generator as it was (tests/kernels/test_rng.py adds the
  distributions, the asynchronous and compiled paths).
- Gradients: float32 samples with requires_grad=True; the loss is the sum of all floating
  outputs (after `output_process_fn_grad`) that require grad, a complex output counting
  through the sum of its real and imaginary parts (`view_as_real`); `torch.autograd.grad` with
  respect to every input tensor that requires grad (allow_unused); None patterns, dtypes,
  shapes and values are compared.
- A variant passes when every sample that ran on CPU passes on neuron; it fails on the
  first failing sample (its message is kept, one line); it is not-run when no sample ran
  on CPU. A (op, dtype) pair fails if any variant fails, passes if at least one variant
  ran and all that ran passed, and is not-run otherwise.
- 64-bit dtypes (Note [64-bit as 32-bit] in csrc/Dtype64.h): the device stores
  float64 / int64 but computes them in 32 bits, by default. So float64 results are compared
  with float32's tolerances, and a failing sample is run again with the device computing in
  64 bits: if it then passes, the difference is not a failure but its own class, `64-bit`
  (values that need more than 32 bits): what a script moved to the device would meet.
  With NEURON_SIM_NATIVE_64BIT=1 neither applies.
- 64-bit values, op by op: for the float64 and int64 pairs, the device counts how each of
  its calls with 64-bit values was computed (`_C.width64_counts()`: in 32 bits, or exactly
  and why: data movement, an op TorchNeuron runs on the CPU, mixed widths, a scalar beyond
  32 bits, aliased operands, a kernel refusing the 32-bit form). COVERAGE.md's 64-bit
  column gives, per OpInfo, the ATen ops it reached in each class, and lists every ATen op
  seen so. The reruns in 64 bits above are not counted.
- Asynchronous mode: with `--async-too` the whole sweep runs a second time with
  NEURON_LAUNCH_BLOCKING=0 (kernels queued on the stream, Note [Asynchronous kernels]); the
  report lists every pair whose status differs between the two modes.
- No timeouts and no signals: each sample runs to completion. The CLI runs the sweep in a
  worker process that journals every (op, dtype) pair; when the worker dies (a crash in
  the backend), the pair it was running is recorded as a failure and a new worker goes on
  with the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
import types
import unittest
import warnings
from typing import Callable, Iterable, Optional

import torch

import torch_neuronx  # noqa: F401  (registers the "neuron" device)

from conformance import accelerator_only

DEVICE = "neuron"
# The device computes float64 / int64 in 32 bits unless NEURON_SIM_NATIVE_64BIT=1.
EMULATES_64BIT = bool(torch_neuronx._sim._C.computes_64bit_as_32bit())
DEFAULT_DTYPES = ("float32", "float64", "bfloat16", "int64", "bool")
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "bool": torch.bool,
}
# Default tolerances (atol, rtol) per dtype; an OpInfo's toleranceOverride widens them.
TOLERANCES = {
    torch.float32: (1e-5, 1.3e-6),
    torch.bfloat16: (1e-2, 1.6e-2),
}

# Ops whose values are random: only device, dtype and shape are compared. Names are
# OpInfo names or "name.variant_test_name".
RANDOM_OPS = frozenset({
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal",
    "normal.in_place", "normal.number_mean", "uniform", "multinomial",
    "randn", "randn_like", "rand_like", "randint", "randint_like",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.rrelu", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank",
})

RANDOM_NOTE = (
    "Random ops draw from the device's own generator (Philox4x32-10, CUDA's 16-byte seed and offset "
    "state; csrc/NeuronGenerator.h), so their values are not CPU's, as CUDA's are not: their cells "
    "compare device, dtype and shape, and (the ops of RANDOM_OPS) that two forwards after "
    "`torch.neuron.manual_seed` draw the same values and leave the CPU's default generator as it was. "
    "Distributions, seeding and determinism on every path (eager, asynchronous, compiled) are "
    "tests/kernels/test_rng.py's, as PyTorch's own suite checks CUDA's.")

# Ops not run at all, with the reason. Only for ops observed to hang or to take
# unreasonably long on CPU itself (none so far).
SKIP_OPS: dict[str, str] = {}

# Positional arguments (indices into sample.args) that PyTorch requires on CPU whatever
# the device of the other arguments; they stay on CPU in the neuron run.
CPU_ONLY_ARGS = {
    "tensor_split": (0,),  # tensor_indices_or_sections "must be on cpu"
}

MESSAGE_CHARS = 150


# --------------------------------------------------------------------------- op_db

_OP_DB = None


def load_op_db():
    """PyTorch's OpInfo database, imported without side effects on the process."""
    global _OP_DB
    if _OP_DB is not None:
        return _OP_DB
    try:
        import expecttest  # noqa: F401
    except ImportError:
        # torch.testing._internal.common_utils imports expecttest (a test-only dependency
        # the wheel does not require) for its TestCase base class; op_db never uses it.
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        stub.ACCEPT = False
        sys.modules["expecttest"] = stub
    # common_utils freezes torch.backends flags at import (for PyTorch's own test suite);
    # restore the process's setting so that importing op_db changes nothing else.
    flag = "__allow_nonbracketed_mutation_flag"
    before = getattr(torch.backends, flag, True)
    from torch.testing._internal.common_methods_invocations import op_db
    setattr(torch.backends, flag, before)
    _OP_DB = op_db
    return op_db


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def select_ops(op_names: Optional[Iterable[str]] = None,
               only: Optional[Iterable[str]] = None) -> list:
    """OpInfos whose name or key is in `op_names` (exact) and whose key contains one of
    `only` (substrings); None means no filter."""
    names = set(op_names) if op_names is not None else None
    subs = list(only) if only else None
    ops = []
    for op in load_op_db():
        key = op_key(op)
        if names is not None and op.name not in names and key not in names:
            continue
        if subs is not None and not any(s in key for s in subs):
            continue
        ops.append(op)
    if names is not None:
        found = {op.name for op in ops} | {op_key(op) for op in ops}
        missing = sorted(names - found)
        if missing:
            raise ValueError(f"no OpInfo named {missing}")
    return ops


# --------------------------------------------------------------------------- results

@dataclasses.dataclass
class VariantResult:
    """One variant (forward, inplace, out, grad) of one (op, dtype) pair."""
    # pass | fail | 64-bit (differs only where 64-bit values need more than 32 bits, see the
    # rules) | not-run | n/a (the variant does not apply) | unknown (not recorded: the
    # process died while running this pair)
    status: str = "n/a"
    reason: str = ""
    passed: int = 0
    failed: int = 0
    not_run: int = 0  # samples whose CPU run raised
    wide: int = 0  # samples that differ only by 32-bit computation of 64-bit values

    def record_pass(self):
        self.passed += 1

    def record_fail(self, message):
        self.failed += 1
        if self.failed == 1:
            self.reason = one_line(message)

    def record_wide(self, message):
        self.wide += 1
        if self.wide == 1 and not self.failed:
            self.reason = one_line(message)

    def record_not_run(self, message):
        self.not_run += 1
        if self.not_run == 1 and not self.reason:
            self.reason = one_line(message)

    def finish(self, no_samples_reason="no samples"):
        if self.failed:
            self.status = "fail"
        elif self.wide:
            self.status = "64-bit"
        elif self.passed:
            self.status, self.reason = "pass", ""
        elif self.not_run:
            self.status = "not-run"
            what = ("cpu raised on all" if "cpu raised" in self.reason
                    else "not applicable to all")
            self.reason = one_line(f"{what} {self.not_run} samples: {self.reason}")
        else:
            self.status, self.reason = "not-run", no_samples_reason
        return self


VARIANTS = ("forward", "inplace", "out", "grad")


@dataclasses.dataclass
class PairResult:
    """The result of one (op, dtype) pair over its variants."""
    op: str
    dtype: str
    forward: VariantResult = dataclasses.field(default_factory=VariantResult)
    inplace: VariantResult = dataclasses.field(default_factory=VariantResult)
    out: VariantResult = dataclasses.field(default_factory=VariantResult)
    grad: VariantResult = dataclasses.field(default_factory=VariantResult)
    seconds: float = 0.0
    # float64 / int64 pairs: ATen op -> {how its calls with 64-bit values were computed: count}
    width64: dict = dataclasses.field(default_factory=dict)

    def variants(self):
        return [(name, getattr(self, name)) for name in VARIANTS]

    @property
    def status(self) -> str:
        states = [v.status for _, v in self.variants()]
        if "fail" in states:
            return "fail"
        if "64-bit" in states:
            return "64-bit"
        if "pass" in states:
            return "pass"
        return "not-run"

    @property
    def ran_on_cpu(self) -> bool:
        return self.status in ("pass", "fail", "64-bit")

    @property
    def reason(self) -> str:
        status = self.status
        if status == "pass":
            return ""
        for name, variant in self.variants():
            if variant.status == status:
                return f"{name}: {variant.reason}" if status in ("fail", "64-bit") else variant.reason
        return ""

    def to_json(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data):
        data = dict(data)
        data.setdefault("width64", {})
        for name in VARIANTS:
            data[name].setdefault("wide", 0)
            data[name] = VariantResult(**data[name])
        return cls(**data)


def one_line(message, limit=MESSAGE_CHARS):
    text = re.sub(r"\s+", " ", str(message)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_exception(exc):
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- moving samples

class Replicator:
    """Copies the tensors of a sample (nested in lists, tuples, dicts) to `device`, keeping
    sizes, strides, offsets and storage sharing; maps CPU devices and generators too."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.storages = {}  # id of source storage -> destination untyped storage
        self.keep = []      # keeps source storages alive so ids stay unique
        self.tensors = []   # (source, replica) in traversal order
        self.moved = False  # whether anything (a tensor, a device) was mapped to `device`

    def __call__(self, obj):
        with torch.no_grad():
            return self._map(obj)

    def _storage(self, tensor):
        source = tensor.untyped_storage()
        key = (source.data_ptr(), source.nbytes()) if source.nbytes() else id(source)
        if key not in self.storages:
            self.keep.append(source)
            flat = torch.empty(0, dtype=torch.uint8).set_(source)
            copy = torch.empty(flat.shape, dtype=torch.uint8, device=self.device)
            copy.copy_(flat)  # a copy on CPU too: the original sample is never mutated
            self.storages[key] = copy.untyped_storage()
        return self.storages[key]

    def _tensor(self, t):
        self.moved = True
        if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
            replica = t.detach().to(self.device)
        else:
            replica = torch.empty(0, dtype=t.dtype, device=self.device)
            replica.set_(self._storage(t), t.storage_offset(), t.size(), t.stride())
            if t.is_conj():
                replica = replica.conj()
            if t.is_neg():
                replica = replica._neg_view()
        if t.requires_grad:
            replica.requires_grad_(True)
        self.tensors.append((t, replica))
        return replica

    def _map(self, obj):
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        if isinstance(obj, torch.device):
            if obj.type != "cpu":
                return obj
            self.moved = True
            return self.device
        if isinstance(obj, str) and obj == "cpu":
            self.moved = True
            return str(self.device)
        if isinstance(obj, torch.Generator):
            if obj.device.type == "cpu" and self.device.type != "cpu":
                generator = torch.Generator(device=self.device)
                generator.manual_seed(obj.initial_seed())
                return generator
            return obj
        if isinstance(obj, list):
            return [self._map(x) for x in obj]
        if isinstance(obj, tuple):
            mapped = [self._map(x) for x in obj]
            return type(obj)(*mapped) if hasattr(obj, "_fields") else tuple(mapped)
        if isinstance(obj, dict):
            return {k: self._map(v) for k, v in obj.items()}
        return obj


def replicate(sample, device, cpu_args=()):
    """(input, args, kwargs, replicator) of `sample` on `device`; positional arguments
    whose index is in `cpu_args` are replicated on CPU (see CPU_ONLY_ARGS)."""
    rep = Replicator(device)
    cpu_rep = Replicator("cpu")
    inp = rep(sample.input)
    args = tuple(cpu_rep(a) if i in cpu_args else rep(a) for i, a in enumerate(sample.args))
    kwargs = rep(dict(sample.kwargs))
    return inp, args, kwargs, rep


def flatten(obj) -> list:
    """Leaves of nested tuples, lists and dicts, in order."""
    if isinstance(obj, (list, tuple)):
        return [leaf for x in obj for leaf in flatten(x)]
    if isinstance(obj, dict):
        return [leaf for x in obj.values() for leaf in flatten(x)]
    return [obj]


# --------------------------------------------------------------------------- comparing

class Mismatch(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """The pair's tolerance (for tensors of the pair's dtype) and the rule for the others."""
    dtype: torch.dtype
    atol: float
    rtol: float

    def for_dtype(self, dtype):
        """(atol, rtol) for a compared tensor of `dtype`; (None, None) = assert_close's
        defaults for that dtype (e.g. float64 outputs of an int64 pair)."""
        if dtype == self.dtype:
            return self.atol, self.rtol
        if dtype == torch.float64 and EMULATES_64BIT:
            return TOLERANCES[torch.float32]
        if dtype in TOLERANCES:
            return TOLERANCES[dtype]
        if dtype.is_floating_point or dtype.is_complex:
            return None, None
        return 0.0, 0.0

    def for_scalars(self):
        """(atol, rtol) for Python floats."""
        if self.dtype.is_floating_point:
            return self.atol, self.rtol
        return 1e-7, 1e-7  # float64's defaults


def tolerances(op, dtype) -> Tolerance:
    if dtype == torch.float64:  # computed in 32 bits on the device, unless NEURON_SIM_NATIVE_64BIT=1
        atol, rtol = TOLERANCES[torch.float32] if EMULATES_64BIT else (1e-7, 1e-7)
    else:
        atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        if getattr(info, "dtypes", None) is not None and dtype not in info.dtypes:
            continue
        for decorator in getattr(info, "decorators", [info]):
            overrides = getattr(decorator, "d", None)
            if isinstance(overrides, dict) and dtype in overrides:
                tol = overrides[dtype]
                if isinstance(tol, (int, float)):  # precisionOverride: an atol
                    atol = max(atol, float(tol))
                elif hasattr(tol, "atol"):  # toleranceOverride: tol(atol, rtol)
                    atol, rtol = max(atol, tol.atol), max(rtol, tol.rtol)
    return Tolerance(dtype, atol, rtol)


def _storage_id(t):
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return None
    try:
        storage = t.untyped_storage()
    except Exception:
        return None
    return storage.data_ptr() if storage.nbytes() else None


def compare_values(actual, expected, *, tol, values=True, path="output", moved=True):
    """Raises Mismatch when `actual` (neuron) differs from `expected` (CPU). `moved`: the
    neuron run's sample had tensors or devices moved to neuron, so CPU results of the CPU
    run are expected on neuron (otherwise, e.g. `torch.arange(3)`, on CPU)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        want_device = expected.device.type
        if want_device == "cpu" and moved:
            want_device = DEVICE
        if actual.device.type != want_device:
            raise Mismatch(f"{path}: on {actual.device}, expected {want_device}")
        if actual.dtype != expected.dtype:
            raise Mismatch(f"{path}: dtype {actual.dtype}, expected {expected.dtype}")
        if actual.shape != expected.shape:
            raise Mismatch(f"{path}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
        if actual.layout != expected.layout:
            raise Mismatch(f"{path}: layout {actual.layout}, expected {expected.layout}")
        if not values:
            return
        got = actual.detach().cpu()
        want = expected.detach()
        if want.layout != torch.strided:
            got, want = got.to_dense(), want.to_dense()
        try:
            atol, rtol = tol.for_dtype(want.dtype)
            torch.testing.assert_close(got, want, atol=atol, rtol=rtol, equal_nan=True,
                                       check_device=False, check_stride=False)
        except AssertionError as exc:
            raise Mismatch(f"{path}: values differ: {exc}") from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected {type(expected).__name__} of {len(expected)}, "
                           f"got {type(actual).__name__} {summarize(actual)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare_values(a, e, tol=tol, values=values, path=f"{path}[{i}]", moved=moved)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or actual.keys() != expected.keys():
            raise Mismatch(f"{path}: dict keys differ")
        for k in expected:
            compare_values(actual[k], expected[k], tol=tol, values=values, path=f"{path}[{k!r}]",
                           moved=moved)
        return
    if isinstance(actual, torch.Tensor):
        raise Mismatch(f"{path}: expected {type(expected).__name__}, got a tensor")
    if not values and isinstance(expected, (int, float, complex, bool)):
        return
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isnan(expected) and math.isnan(actual):
            return
        atol, rtol = tol.for_scalars()
        if math.isclose(actual, expected, rel_tol=max(rtol, 1e-12), abs_tol=atol):
            return
    try:
        same = bool(actual == expected)
    except Exception:
        same = False
    if not same:
        raise Mismatch(f"{path}: {summarize(actual)}, expected {summarize(expected)}")


def summarize(obj):
    return one_line(repr(obj), 60)


def _strides_of_long_dims(t):
    return tuple(s for n, s in zip(t.shape, t.stride()) if n > 1)


def compare_layout(actual, expected, cpu_inputs, neuron_inputs, path="output"):
    """The stride and aliasing rule: see the module docstring."""
    pairs = list(zip(flatten(actual) if isinstance(actual, (list, tuple, dict)) else [actual],
                     flatten(expected) if isinstance(expected, (list, tuple, dict)) else [expected]))
    cpu_ids = [_storage_id(t) for t in cpu_inputs]
    neuron_ids = [_storage_id(t) for t in neuron_inputs]
    for i, (a, e) in enumerate(pairs):
        if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor):
            continue
        if e.layout != torch.strided or a.layout != torch.strided or e.numel() == 0:
            continue
        where = f"{path}[{i}]" if len(pairs) > 1 else path
        eid = _storage_id(e)
        alias = next((j for j, s in enumerate(cpu_ids) if s is not None and s == eid), None)
        if alias is not None:
            if alias >= len(neuron_ids) or _storage_id(a) != neuron_ids[alias]:
                raise Mismatch(f"{where}: CPU returns a view of input {alias}; neuron's "
                               f"output does not share that input's storage")
        if alias is not None or not e.is_contiguous():
            if _strides_of_long_dims(a) != _strides_of_long_dims(e):
                raise Mismatch(f"{where}: strides {a.stride()}, expected {e.stride()}")
            if alias is not None and a.storage_offset() != e.storage_offset():
                raise Mismatch(f"{where}: storage offset {a.storage_offset()}, "
                               f"expected {e.storage_offset()}")


# --------------------------------------------------------------------------- running

def _tensor_inputs(inp, args, kwargs):
    return [x for x in flatten([inp, list(args), kwargs]) if isinstance(x, torch.Tensor)]


def _run_forward(op, sample, ctx, holder):
    is_random, tol = ctx.is_random, ctx.tol
    cpu_in, cpu_args, cpu_kwargs, _ = replicate(sample, "cpu")
    try:
        expected = op(cpu_in, *cpu_args, **cpu_kwargs)
    except Exception as exc:
        return "not-run", f"cpu raised {describe_exception(exc)}"
    holder["expected"] = expected
    dev_in, dev_args, dev_kwargs, rep = replicate(sample, DEVICE, ctx.cpu_args)
    try:
        actual = op(dev_in, *dev_args, **dev_kwargs)
    except Exception as exc:
        return "fail", f"neuron raised {describe_exception(exc)}"
    # raw outputs: device, dtype, shape, layout; values after output_process_fn_grad
    compare_values(actual, expected, tol=tol, values=False, moved=rep.moved)
    if is_random:
        return _check_seeded_draws(op, sample, ctx) if ctx.seeded else ("pass", "")
    compare_layout(actual, expected, _tensor_inputs(cpu_in, cpu_args, cpu_kwargs),
                   _tensor_inputs(dev_in, dev_args, dev_kwargs))
    try:
        processed_expected = sample.output_process_fn_grad(expected)
    except Exception:  # the processing does not apply: compare the raw values
        compare_values(actual, expected, tol=tol, moved=rep.moved)
        return "pass", ""
    processed_actual = sample.output_process_fn_grad(actual)
    compare_values(processed_actual, processed_expected, tol=tol, moved=rep.moved)
    return "pass", ""


def _check_seeded_draws(op, sample, ctx):
    """A random op's neuron forward: reproducible under torch.neuron.manual_seed, and the CPU's
    default generator untouched."""
    cpu_state = torch.get_rng_state()
    draws = []
    for _ in range(2):
        torch.neuron.manual_seed(1234)
        dev_in, dev_args, dev_kwargs, _ = replicate(sample, DEVICE, ctx.cpu_args)
        draws.append(op(dev_in, *dev_args, **dev_kwargs))
    if not torch.equal(torch.get_rng_state(), cpu_state):
        return "fail", "the neuron op drew from the CPU's default generator"
    first = [x for x in flatten([draws[0]]) if isinstance(x, torch.Tensor)]
    second = [x for x in flatten([draws[1]]) if isinstance(x, torch.Tensor)]
    if len(first) != len(second) or not all(
            torch.equal(a.detach().cpu(), b.detach().cpu()) for a, b in zip(first, second)):
        return "fail", "not reproducible under torch.neuron.manual_seed"
    return "pass", ""


def _run_inplace(op, sample, ctx):
    is_random, tol = ctx.is_random, ctx.tol
    variant = op.inplace_variant
    cpu_in, cpu_args, cpu_kwargs, _ = replicate(sample, "cpu")
    try:
        expected = variant(cpu_in, *cpu_args, **cpu_kwargs)
    except Exception as exc:
        return "not-run", f"cpu raised {describe_exception(exc)}"
    dev_in, dev_args, dev_kwargs, rep = replicate(sample, DEVICE, ctx.cpu_args)
    try:
        actual = variant(dev_in, *dev_args, **dev_kwargs)
    except Exception as exc:
        return "fail", f"neuron raised {describe_exception(exc)}"
    if expected is cpu_in and actual is not dev_in:
        raise Mismatch("in-place result is not the input tensor")
    compare_values(actual, expected, tol=tol, values=not is_random, path="result")
    compare_values(dev_in, cpu_in, tol=tol, values=not is_random, path="mutated input")
    if not is_random and isinstance(cpu_in, torch.Tensor):
        compare_layout(dev_in, cpu_in, [], [], path="mutated input")
    return "pass", ""


def _empty_like_out(expected, device):
    if isinstance(expected, torch.Tensor):
        return torch.empty_like(expected, device=device)
    if isinstance(expected, (tuple, list)) and expected and all(
            isinstance(t, torch.Tensor) for t in expected):
        return tuple(torch.empty_like(t, device=device) for t in expected)
    return None


def _run_out(op, sample, expected_forward, ctx):
    is_random, tol = ctx.is_random, ctx.tol
    cpu_out = _empty_like_out(expected_forward, "cpu")
    if cpu_out is None:
        return "not-run", "forward result is not a tensor or a tuple of tensors"
    dev_out = _empty_like_out(expected_forward, DEVICE)
    cpu_in, cpu_args, cpu_kwargs, _ = replicate(sample, "cpu")
    try:
        expected = op(cpu_in, *cpu_args, **cpu_kwargs, out=cpu_out)
    except Exception as exc:
        return "not-run", f"cpu raised {describe_exception(exc)}"
    dev_in, dev_args, dev_kwargs, rep = replicate(sample, DEVICE, ctx.cpu_args)
    try:
        actual = op(dev_in, *dev_args, **dev_kwargs, out=dev_out)
    except Exception as exc:
        return "fail", f"neuron raised {describe_exception(exc)}"
    cpu_outs = list(cpu_out) if isinstance(cpu_out, tuple) else [cpu_out]
    dev_outs = list(dev_out) if isinstance(dev_out, tuple) else [dev_out]
    exp_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    act_list = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    for i, e in enumerate(exp_list):
        for j, o in enumerate(cpu_outs):
            if e is o and (i >= len(act_list) or act_list[i] is not dev_outs[j]):
                raise Mismatch(f"result[{i}] is not the out= tensor {j}")
    compare_values(actual, expected, tol=tol, values=not is_random, path="result")
    compare_values(dev_outs, cpu_outs, tol=tol, values=not is_random, path="out")
    if not is_random:
        for i, (a, e) in enumerate(zip(dev_outs, cpu_outs)):
            compare_layout(a, e, [], [], path=f"out[{i}]")
    return "pass", ""


class NotApplicable(Exception):
    """The variant does not apply to this sample (e.g. no output to differentiate)."""


def _grad_run(op, sample, inp, args, kwargs):
    result = op(inp, *args, **kwargs)
    result = sample.output_process_fn_grad(result)
    outputs = [t for t in flatten(result) if isinstance(t, torch.Tensor) and t.requires_grad
               and (t.is_floating_point() or t.is_complex())]
    inputs = [t for t in flatten([inp, list(args), kwargs]) if isinstance(t, torch.Tensor)
              and t.requires_grad]
    if not outputs:
        raise NotApplicable("no floating or complex output requires grad")
    if not inputs:
        raise NotApplicable("no input requires grad")
    # a complex output counts through the sum of its real and imaginary parts
    loss = sum(torch.view_as_real(o).sum() if o.is_complex() else o.sum() for o in outputs)
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return list(grads)


def _run_grad(op, sample, ctx):
    is_random, tol = ctx.is_random, ctx.tol
    cpu_in, cpu_args, cpu_kwargs, _ = replicate(sample, "cpu")
    try:
        expected = _grad_run(op, sample, cpu_in, cpu_args, cpu_kwargs)
    except NotApplicable as exc:
        return "not-run", str(exc)
    except Exception as exc:
        return "not-run", f"cpu raised {describe_exception(exc)}"
    dev_in, dev_args, dev_kwargs, rep = replicate(sample, DEVICE, ctx.cpu_args)
    try:
        actual = _grad_run(op, sample, dev_in, dev_args, dev_kwargs)
    except Exception as exc:
        return "fail", f"neuron raised {describe_exception(exc)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if (a is None) != (e is None):
            raise Mismatch(f"grad[{i}]: {'None' if a is None else 'a tensor'}, expected "
                           f"{'None' if e is None else 'a tensor'}")
    compare_values(actual, expected, tol=tol, values=not is_random, path="grad",
                   moved=rep.moved)
    return "pass", ""


def _collect_samples(op, dtype, requires_grad, max_samples):
    """(samples, error message or '')."""
    samples = []
    try:
        iterator = iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
        for sample in itertools.islice(iterator, max_samples):
            samples.append(sample)
    except Exception as exc:
        return samples, f"sample generation raised {describe_exception(exc)}"
    return samples, ""


def passes_in_64_bits(run) -> bool:
    """Reruns a failed sample with the device computing 64-bit dtypes in 64 bits: True when
    it then passes, i.e. the failure is the 32-bit computation of 64-bit values."""
    native = torch_neuronx._sim._C
    native._set_computes_64bit_as_32bit(False)
    try:
        status, _ = run()
        return status == "pass"
    except Exception:
        return False
    finally:
        native._set_computes_64bit_as_32bit(True)


def _record(variant: VariantResult, index: int, run: Callable, on_stage=None, name="",
            sample=None, holder=None):
    if on_stage:
        on_stage(name, index)
    try:
        status, message = run()
    except Mismatch as exc:
        status, message = "fail", str(exc)
        if EMULATES_64BIT and sample is not None and passes_in_64_bits(run):
            status = "64-bit"
    except Exception as exc:  # the harness's comparison itself raised: count as failure
        status, message = "fail", f"comparison raised {describe_exception(exc)}"
    if status == "pass":
        variant.record_pass()
    elif status == "64-bit":
        variant.record_wide(f"sample {index}: {message}")
    elif status == "fail":
        variant.record_fail(f"sample {index}: {message}")
    else:
        variant.record_not_run(f"sample {index}: {message}")


# How the device computed calls with 64-bit values (csrc/Dtype64.h, Width64), as the report
# words them; the reruns with NEURON_SIM_NATIVE_64BIT (passes_in_64_bits) are left out.
WIDTH64_CLASSES = {
    "32-bit": "32-bit",
    "on the CPU in TorchNeuron": "exact: CPU in TorchNeuron",
    "data movement": "exact: data movement",
    "mixed widths": "exact: mixed widths",
    "scalar beyond 32 bits": "exact: scalar beyond 32 bits",
    "aliased operands": "exact: aliased operands",
    "32-bit form refused": "exact: 32-bit form refused",
    "custom op": "exact: custom op",
}


def width64_counts() -> dict:
    """ATen op -> {class: calls} since the last clear (see WIDTH64_CLASSES)."""
    counts = {}
    for op, hows in torch_neuronx._sim._C.width64_counts().items():
        kept = {WIDTH64_CLASSES[how]: n for how, n in hows.items() if how in WIDTH64_CLASSES}
        if kept:
            counts[op.replace("aten::", "")] = kept
    return counts


def width64_by_class(pairs) -> dict:
    """class -> sorted ATen ops, merged over `pairs` (an op in both classes is in both)."""
    classes = {}
    for pair in pairs:
        for op, hows in pair.width64.items():
            for how in hows:
                classes.setdefault(how, set()).add(op)
    order = list(WIDTH64_CLASSES.values())
    return {how: sorted(classes[how]) for how in sorted(classes, key=order.index)}


def width64_cell(pairs, limit=6) -> str:
    """The 64-bit column of one OpInfo: — when no float64/int64 pair ran on CPU."""
    ran = [p for p in pairs if p.dtype in ("float64", "int64") and p.ran_on_cpu]
    if not ran:
        return "—"
    classes = width64_by_class(ran)
    if not classes:
        return "exact: no arithmetic"
    parts = []
    for how, ops in classes.items():
        shown = ", ".join(ops[:limit]) + (f" +{len(ops) - limit}" if len(ops) > limit else "")
        parts.append(f"{'**32-bit**' if how == '32-bit' else how}: {shown}")
    return "; ".join(parts)


def run_pair(op, dtype_name, max_samples=None, on_stage=None) -> PairResult:
    """Runs every variant of `op` for one dtype. on_stage(variant, sample index) is called
    before each sample runs (the CLI journals it to name the sample that crashed)."""
    dtype = DTYPES[dtype_name]
    key = op_key(op)
    result = PairResult(op=key, dtype=dtype_name)
    start = time.perf_counter()
    if key in SKIP_OPS or op.name in SKIP_OPS:
        result.forward = VariantResult(status="not-run",
                                       reason=f"skipped: {SKIP_OPS.get(key, SKIP_OPS.get(op.name))}")
        return result
    if dtype not in op.supported_dtypes("cpu"):
        result.forward = VariantResult(status="not-run", reason="dtype unsupported")
        return result
    is_random = (key in RANDOM_OPS or op.name in RANDOM_OPS
                 or bool(getattr(op, "has_nondeterministic_output", False)))
    tol = tolerances(op, dtype)
    ctx = types.SimpleNamespace(is_random=is_random, tol=tol, seeded=key in RANDOM_OPS or op.name in RANDOM_OPS,
                                cpu_args=CPU_ONLY_ARGS.get(key, CPU_ONLY_ARGS.get(op.name, ())))

    samples, gen_error = _collect_samples(op, dtype, False, max_samples)
    no_samples = gen_error or "no samples"
    counts_64bit = dtype in (torch.float64, torch.int64)
    if counts_64bit:
        torch_neuronx._sim._C.clear_width64_counts()
    forward = result.forward
    inplace = result.inplace if op.inplace_variant is not None else None
    out = result.out if op.supports_out else None
    for index, sample in enumerate(samples):
        torch.manual_seed(index)
        holder = {}
        _record(forward, index, lambda: _run_forward(op, sample, ctx, holder),
                on_stage, "forward", sample, holder)
        expected = holder.get("expected")
        if inplace is not None:
            _record(inplace, index, lambda: _run_inplace(op, sample, ctx), on_stage, "inplace",
                    sample, holder)
        if out is not None:
            if expected is None:
                out.record_not_run(f"sample {index}: forward did not run on CPU")
            else:
                _record(out, index, lambda: _run_out(op, sample, expected, ctx), on_stage,
                        "out", sample, holder)
    if counts_64bit:
        result.width64 = width64_counts()
    forward.finish(no_samples)
    if inplace is not None:
        inplace.finish(no_samples)
    if out is not None:
        out.finish(no_samples)

    grad_applies = (dtype == torch.float32 and op.supports_autograd
                    and torch.float32 in op.supported_backward_dtypes("cpu"))
    if grad_applies:
        grad_samples, grad_error = _collect_samples(op, dtype, True, max_samples)
        for index, sample in enumerate(grad_samples):
            torch.manual_seed(index)
            _record(result.grad, index, lambda: _run_grad(op, sample, ctx), on_stage, "grad",
                    sample)
        result.grad.finish(grad_error or "no samples")
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def run_sweep(op_names=None, dtypes=None, max_samples=None, *, only=None, progress=False,
              ops=None, on_start=None, on_stage=None, on_result=None,
              skip=None) -> list[PairResult]:
    """Runs the sweep; returns one PairResult per (OpInfo, dtype).

    op_names: exact OpInfo names (all their variants) or "name.variant" keys; None = all.
    dtypes: names from DTYPES; None = all of DEFAULT_DTYPES.
    max_samples: cap on the samples per (op, dtype) and variant; None = unlimited.
    only: substrings of the op key (the CLI's --only).
    """
    if ops is None:
        ops = select_ops(op_names, only)
    dtype_names = list(dtypes or DEFAULT_DTYPES)
    skip = skip or set()
    results = []
    total = len(ops)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, op in enumerate(ops, 1):
            key = op_key(op)
            if progress:
                line = f"[{i}/{total}] {key}"
                sys.stderr.write("\r" + line[:79].ljust(79))
                sys.stderr.flush()
            for dtype_name in dtype_names:
                if (key, dtype_name) in skip:
                    continue
                if on_start:
                    on_start(key, dtype_name)
                pair = run_pair(op, dtype_name, max_samples, on_stage)
                results.append(pair)
                if on_result:
                    on_result(pair)
    if progress:
        sys.stderr.write("\r" + " " * 79 + "\r")
        sys.stderr.flush()
    return results


# --------------------------------------------------------------------------- report

def summary(results: list[PairResult]) -> dict:
    counts = {"pass": 0, "fail": 0, "not-run": 0, "64-bit": 0}
    not_run_reasons = {}
    for r in results:
        counts[r.status] += 1
        if r.status == "not-run":
            reason = r.reason
            if reason.startswith("cpu raised on all"):
                reason = "cpu raised on all samples"
            elif reason.startswith("not applicable to all"):
                reason = "variant not applicable to the samples"
            elif reason.startswith("sample generation raised"):
                reason = "sample generation raised"
            elif reason.startswith("skipped"):
                reason = "skipped"
            not_run_reasons[reason] = not_run_reasons.get(reason, 0) + 1
    ran = counts["pass"] + counts["fail"] + counts["64-bit"]
    return {
        "passed": counts["pass"], "failed": counts["fail"], "not_run": counts["not-run"],
        "wide": counts["64-bit"],
        "ran": ran, "percent": 100.0 * counts["pass"] / ran if ran else 0.0,
        "not_run_reasons": not_run_reasons,
    }


def summary_line(results) -> str:
    s = summary(results)
    line = (f"{s['passed']} of {s['ran']} (op, dtype) pairs that run on CPU pass on neuron "
            f"({s['percent']:.1f}%)")
    if s["wide"]:
        line += (f"; {s['wide']} more differ only where 64-bit values need more than the "
                 f"32 bits the device computes them in")
    return line


def _cell(variant: VariantResult) -> str:
    return {"pass": "pass", "fail": "**FAIL**", "64-bit": "64-bit", "not-run": "not-run",
            "n/a": "—", "unknown": "?"}[variant.status]


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def format_failures(results, limit=None) -> str:
    lines = [f"{r.op} [{r.dtype}] {r.status}: {r.reason}" for r in results if r.status in ("fail", "64-bit")]
    if limit is not None and len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return "\n".join(lines)


# Causes of the failures still listed, found by investigation (see the issue notes).
KNOWN_CAUSES = {
    "fft.ihfft2": "PyTorch's CPU out= kernel leaves part of a non-contiguous `out` unwritten "
                  "(its own out= result differs from its functional result by ~1e38), so the "
                  "CPU reference is garbage for this sample",
    "fft.ihfftn": "as fft.ihfft2: the CPU reference of this out= sample is uninitialised memory",
    "to_sparse": "sparse layouts are not supported on neuron (dense tensors only)",
    "sparse.mm.reduce": "sparse layouts are not supported on neuron (dense tensors only)",
    "sparse.sampled_addmm": "sparse layouts are not supported on neuron (dense tensors only)",
}


def width64_section(results) -> list:
    """The report's section on 64-bit values: every ATen op the float64/int64 pairs reached
    with 64-bit values, by how the device computed them."""
    classes = width64_by_class([r for r in results if r.dtype in ("float64", "int64")])
    if not classes:
        return []
    out = ["## 64-bit values, op by op\n",
           "As TorchNeuron does, the device stores float64 and int64 tensors but computes the ops of "
           "its device set in 32 bits (`DtypeAutocastContext` casts to float32/int32 and back): int64 "
           "values beyond 32 bits wrap (2**40 + 7 reads as 7) and float64 has float32's precision. "
           "Exact: ops that only move or select values, ops TorchNeuron runs on the CPU (not in its "
           "device set), and calls the rule keeps in 64 bits (Note [64-bit as 32-bit] in "
           "`csrc/Dtype64.h`: float64 with float32 or complex64 operands, an integer scalar beyond "
           "32 bits, a written operand overlapping another, a dtype= request the 32-bit form cannot "
           "meet). Copies, views and the other kernels of `csrc/kernels/Minimal.cpp` never compute "
           "and are not listed. Measured over every float64 and int64 sample of the sweep; an op "
           "listed in two classes was computed both ways, depending on its arguments. The last "
           "column of *All pairs* gives the same per OpInfo. NEURON_SIM_NATIVE_64BIT=1 computes "
           "everything in 64 bits.\n",
           "| how | ATen ops |", "|---|---|"]
    for how, ops in classes.items():
        out.append(f"| {how} | {_md(', '.join(ops))} |")
    out.append("")
    return out


def write_coverage(results: list[PairResult], path, *, seconds=None, max_samples=None,
                   dtypes=DEFAULT_DTYPES, op_count=None, command=None, async_results=None):
    s = summary(results)
    rows = sorted(results, key=lambda r: (r.op, list(DTYPES).index(r.dtype)))
    by_op = {}
    for r in rows:
        by_op.setdefault(r.op, []).append(r)
    variant_counts = {name: {"pass": 0, "fail": 0, "not-run": 0, "64-bit": 0} for name in VARIANTS}
    for r in results:
        for name, v in r.variants():
            if v.status in variant_counts[name]:
                variant_counts[name][v.status] += 1
    out = []
    out.append("# OpInfo conformance: neuron against CPU\n")
    meta = [f"torch {torch.__version__}", f"{op_count or len(by_op)} OpInfos",
            "dtypes " + ", ".join(dtypes),
            f"max samples {'unlimited' if max_samples is None else max_samples}"]
    if seconds is not None:
        meta.append(f"{seconds / 60:.1f} minutes")
    out.append(f"Generated by `{command or 'python -m conformance.opinfo_sweep'}` "
               f"({'; '.join(meta)}). Rules: the docstring of `conformance/opinfo_sweep.py`.\n")
    out.append(f"**{summary_line(results)}.**\n")
    out.append(f"- fail: {s['failed']} pairs")
    out.append(f"- 64-bit: {s['wide']} pairs (pass when the device computes 64-bit dtypes in 64 "
               f"bits: their values need more than the 32 bits the device computes them in)")
    reasons = "; ".join(f"{k}: {v}" for k, v in sorted(s["not_run_reasons"].items(),
                                                       key=lambda kv: -kv[1]))
    out.append(f"- not-run: {s['not_run']} pairs ({reasons})" if reasons else
               f"- not-run: {s['not_run']} pairs")
    for name in VARIANTS:
        c = variant_counts[name]
        out.append(f"- {name}: {c['pass']} pass, {c['fail']} fail, {c['64-bit']} 64-bit, "
                   f"{c['not-run']} not-run")
    for dtype in dtypes:
        ds = summary([r for r in results if r.dtype == dtype])
        out.append(f"- {dtype}: {ds['passed']} of {ds['ran']} pairs pass ({ds['percent']:.1f}%), "
                   f"{ds['failed']} fail, {ds['wide']} 64-bit")
    out.append("")
    out.append("A pair is an (OpInfo, dtype); `dtype unsupported` pairs (the op does not list "
               "the dtype for CPU) are counted above but left out of the table, except for ops "
               "that support none of the dtypes. Cells: pass, **FAIL**, not-run (no sample ran "
               "on CPU), — (the variant does not apply), ? (not recorded: the process died in another "
               "variant of this pair). The reason is the first failure's "
               "message, or why the pair did not run.\n")
    out.append(RANDOM_NOTE + "\n")

    failing = [r for r in rows if r.status == "fail"]
    if failing:
        out.append("## Failures\n")
        out.append("| op | dtype | reason | cause |")
        out.append("|---|---|---|---|")
        for r in failing:
            cause = KNOWN_CAUSES.get(r.op, "not yet investigated")
            out.append(f"| {_md(r.op)} | {r.dtype} | {_md(r.reason)} | {_md(cause)} |")
        out.append("")

    wide = [r for r in rows if r.status == "64-bit"]
    if wide:
        out.append("## Differences from 32-bit computation of 64-bit values\n")
        out.append("What a script moved to the device meets: these pass with NEURON_SIM_NATIVE_64BIT=1.\n")
        out.append("| op | dtype | reason |")
        out.append("|---|---|---|")
        for r in wide:
            out.append(f"| {_md(r.op)} | {r.dtype} | {_md(r.reason)} |")
        out.append("")

    if async_results is not None:
        out.append("## Asynchronous mode\n")
        out.append(f"The same sweep with NEURON_LAUNCH_BLOCKING=0 (kernels queued on the stream): "
                   f"**{summary_line(async_results)}.**\n")
        blocking = {(r.op, r.dtype): r for r in results}
        differ = [r for r in sorted(async_results, key=lambda r: (r.op, r.dtype))
                  if (r.op, r.dtype) in blocking and blocking[(r.op, r.dtype)].status != r.status]
        if differ:
            out.append("Pairs whose status differs from launch-blocking mode:\n")
            out.append("| op | dtype | launch-blocking | asynchronous | reason (asynchronous) |")
            out.append("|---|---|---|---|---|")
            for r in differ:
                out.append(f"| {_md(r.op)} | {r.dtype} | {blocking[(r.op, r.dtype)].status} | {r.status} "
                           f"| {_md(r.reason)} |")
        else:
            out.append("Every pair has the same status in both modes.")
        out.append("")

    out.extend(accelerator_only.section())
    out.extend(width64_section(results))

    out.append("## All pairs\n")
    out.append("One row per OpInfo, one column per dtype: the pair's status, with the variant "
               "that failed (forward, inplace, out, grad) when it fails; — the op does not support "
               "the dtype on CPU. The last column: how the device computed the 64-bit values of the "
               "float64 and int64 pairs, by ATen op (see *64-bit values, op by op*).\n")
    out.append("| op | " + " | ".join(dtypes) + " | 64-bit values |")
    out.append("|---|" + "---|" * (len(dtypes) + 1))

    def pair_cell(r):
        if r is None or r.forward.reason == "dtype unsupported":
            return "—"
        if r.status == "fail":
            failed = [name for name, v in r.variants() if v.status == "fail"]
            return "**FAIL** (" + ", ".join(failed) + ")"
        return {"pass": "pass", "64-bit": "64-bit", "not-run": "not-run"}.get(r.status, r.status)

    for op_name, pairs in by_op.items():
        by_dtype = {r.dtype: r for r in pairs}
        out.append(f"| {_md(op_name)} | " + " | ".join(pair_cell(by_dtype.get(d)) for d in dtypes)
                   + f" | {_md(width64_cell(pairs))} |")
    out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))


# --------------------------------------------------------------------------- CLI

def _read_journal(path):
    """(pairs started, in order; last stage (variant, sample) of each pair; results)."""
    started, stages, done = [], {}, {}
    if not os.path.exists(path):
        return started, stages, done
    with open(path) as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if "start" in entry:
                started.append(tuple(entry["start"]))
            elif "stage" in entry and started:
                stages[started[-1]] = tuple(entry["stage"])
            elif "result" in entry:
                pair = PairResult.from_json(entry["result"])
                done[(pair.op, pair.dtype)] = pair
    return started, stages, done


def _worker(args):
    journal = open(args.journal, "a", buffering=1)

    # Each line is written (to the kernel) before the work it announces: it survives a crash.
    def on_start(key, dtype):
        journal.write(json.dumps({"start": [key, dtype]}) + "\n")

    def on_stage(variant, index):
        journal.write(json.dumps({"stage": [variant, index]}) + "\n")

    def on_result(pair):
        journal.write(json.dumps({"result": pair.to_json()}) + "\n")
        journal.flush()

    _, _, done = _read_journal(args.journal)
    run_sweep(dtypes=args.dtype, max_samples=args.max_samples, only=args.only,
              progress=not args.quiet, on_start=on_start, on_stage=on_stage,
              on_result=on_result, skip=set(done))
    journal.close()
    return 0


def crashed_pair(key, dtype, variant, index, reason) -> PairResult:
    """The result of a pair during which the worker died: a failure of the variant that
    was running; the other variants' results are lost."""
    pair = PairResult(op=key, dtype=dtype)
    for name in VARIANTS:
        setattr(pair, name, VariantResult(status="unknown", reason="not recorded"))
    where = f"sample {index}: " if index is not None else ""
    setattr(pair, variant, VariantResult(status="fail", reason=f"{where}{reason}", failed=1))
    return pair


def _run_workers(journal, argv, env, fresh):
    """Runs the sweep in worker processes journaling to `journal`, restarting after a crash;
    returns the results (None when it gave up)."""
    if fresh and os.path.exists(journal):
        os.remove(journal)
    command = [sys.executable, "-m", "conformance.opinfo_sweep", "--worker", "--journal", journal] + argv
    full_env = dict(os.environ, **(env or {}))
    crashes = 0
    while True:
        code = subprocess.call(command, env=full_env)
        if code == 0:
            break
        started, stages, done = _read_journal(journal)
        unfinished = [s for s in started if s not in done]
        if not unfinished or crashes >= 100:
            print(f"worker exited with {code}; giving up", file=sys.stderr)
            return None
        key, dtype = unfinished[-1]
        crashes += 1
        reason = (f"the process died (exit {code}, signal {-code})" if code < 0
                  else f"the process died (exit {code})")
        print(f"\n{key} [{dtype}]: {reason}; restarting the worker", file=sys.stderr)
        variant, index = stages.get((key, dtype), ("forward", None))
        pair = crashed_pair(key, dtype, variant, index, reason)
        with open(journal, "a") as f:
            f.write(json.dumps({"result": pair.to_json()}) + "\n")
    _, _, done = _read_journal(journal)
    return list(done.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="SUBSTR",
                        help="run only OpInfos whose name contains SUBSTR (repeatable)")
    parser.add_argument("--output", default="COVERAGE.md", help="report path (Markdown)")
    parser.add_argument("--max-samples", type=int, default=None, metavar="N",
                        help="at most N samples per (op, dtype) and variant (default: all)")
    parser.add_argument("--dtype", action="append", choices=list(DTYPES),
                        help="dtypes to run (repeatable; default: all of them)")
    parser.add_argument("--journal", default=None,
                        help="journal file (default: OUTPUT.journal.jsonl, removed at the end)")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--async-too", action="store_true",
                        help="run the sweep again with NEURON_LAUNCH_BLOCKING=0 and report the differences")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.dtype = args.dtype or list(DEFAULT_DTYPES)
    if args.worker:
        return _worker(args)

    journal = args.journal or args.output + ".journal.jsonl"
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--async-too"]
    start = time.perf_counter()
    results = _run_workers(journal, passthrough, env=None, fresh=args.journal is None)
    if results is None:
        return 1
    async_results = None
    if args.async_too:
        async_journal = journal + ".async"
        async_results = _run_workers(async_journal, passthrough, env={"NEURON_LAUNCH_BLOCKING": "0"}, fresh=True)
        if async_results is None:
            return 1
        os.remove(async_journal)
    seconds = time.perf_counter() - start
    op_count = len({r.op for r in results})
    shown = ["python -m conformance.opinfo_sweep"] + [
        a for a in (argv if argv is not None else sys.argv[1:])]
    write_coverage(results, args.output, seconds=seconds, max_samples=args.max_samples,
                   dtypes=args.dtype, op_count=op_count, command=" ".join(shown), async_results=async_results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.to_json() for r in results], f, indent=1)
    if args.journal is None:
        os.remove(journal)
    print(summary_line(results), file=sys.stderr)
    print(f"{summary(results)['failed']} fail, {summary(results)['not_run']} not-run; "
          f"{seconds / 60:.1f} minutes; report: {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
