"""Will it run? The op census: every ATen op a workload executes, with dtypes and shapes,
the bytes copied between host and device, and (on a device that computes 64-bit values
exactly, i.e. the baseline) the 64-bit values that 32-bit computation would not keep.

Contract: on the evaluated device the census only reads tensor metadata, so it adds no op
of its own to what TorchNeuron tracks; value checks (check_64bit=True) run extra ops and
belong on the baseline."""
import collections
import functools
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
_COPY_OPS = {"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}
MAX_SHAPES_PER_OP = 8
MAX_FINDINGS_PER_OP = 3


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
    return None


class OpCensus(TorchDispatchMode):
    """Counts ops by name; keeps up to MAX_SHAPES_PER_OP distinct (dtype, shape) signatures each."""

    def __init__(self, check_64bit=False, float64_rtol=1e-6):
        super().__init__()
        self.ops = collections.OrderedDict()
        self.copies = collections.Counter()  # "cpu->neuron" -> bytes
        self.copy_counts = collections.Counter()
        self.check_64bit = check_64bit
        self.float64_rtol = float64_rtol
        self.wide_values = []  # 64-bit values 32-bit computation would change
        self._checked = WeakIdKeyDictionary()  # 64-bit tensors whose values were checked

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if self.check_64bit:  # before the op runs: an in-place op changes its input
            self._check_wide(name, tree_flatten((args, kwargs))[0], "input")
        out = func(*args, **kwargs)
        entry = self.ops.get(name)
        if entry is None:
            entry = self.ops[name] = {"count": 0, "signatures": {}, "distinct_signatures": 0, "devices": set()}
        entry["count"] += 1
        entry["devices"].update(t.device.type for t in tree_flatten((args, kwargs, out))[0]
                                if isinstance(t, torch.Tensor))
        inputs = [d for d in map(_describe, tree_flatten((args, kwargs))[0]) if d]
        outputs = [d for d in map(_describe, tree_flatten(out)[0]) if d]
        signature = " ".join(inputs) + " -> " + " ".join(outputs)
        if signature in entry["signatures"]:
            entry["signatures"][signature] += 1
        else:
            entry["distinct_signatures"] += 1
            if len(entry["signatures"]) < MAX_SHAPES_PER_OP:
                entry["signatures"][signature] = 1
        if name.split(".")[0] in _COPY_OPS:
            self._count_copy(args, kwargs, out)
        if self.check_64bit:
            self._check_wide(name, tree_flatten(out)[0], "output")
        return out

    def _count_copy(self, args, kwargs, out):
        source = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else args[0]
        target = out if isinstance(out, torch.Tensor) else args[0]
        if isinstance(source, torch.Tensor) and isinstance(target, torch.Tensor) \
                and source.device.type != target.device.type:
            key = f"{source.device.type}->{target.device.type}"
            self.copies[key] += target.numel() * target.element_size()
            self.copy_counts[key] += 1

    def _check_wide(self, name, tensors, where):
        """Values of the op's 64-bit inputs (each tensor once: parameters, buffers and inputs made
        before the census are seen first here) or outputs that 32-bit computation would change."""
        found = sum(1 for w in self.wide_values if w["op"] == name)
        for tensor in tensors:
            if found >= MAX_FINDINGS_PER_OP or not isinstance(tensor, torch.Tensor) or tensor.numel() == 0 \
                    or tensor.dtype not in (torch.int64, torch.float64):
                continue
            if where == "input" and tensor in self._checked:  # its values were seen already
                continue
            self._checked[tensor] = True
            if tensor.dtype == torch.int64:
                low, high = (v.item() for v in torch.aminmax(tensor))
                if high > INT32_MAX or low < INT32_MIN:
                    sample = high if high > INT32_MAX else low
                    self.wide_values.append({"op": name, "where": where, "dtype": "int64", "shape": list(tensor.shape),
                                             "sample_value": sample, "problem": "beyond the int32 range"})
                    found += 1
            elif tensor.dtype == torch.float64:
                rounded = tensor.float().double()
                error = (rounded - tensor).abs()
                bound = self.float64_rtol * tensor.abs()
                bad = (error > bound) | (torch.isfinite(tensor) & ~torch.isfinite(rounded))
                if bool(bad.any()):
                    index = int(bad.flatten().nonzero()[0])
                    value = tensor.flatten()[index].item()
                    self.wide_values.append({"op": name, "where": where, "dtype": "float64",
                                             "shape": list(tensor.shape),
                                             "sample_value": value, "as_float32": float(torch.tensor(value).float()),
                                             "problem": f"changes by more than rtol={self.float64_rtol} in float32"})
                    found += 1

    def summary(self):
        ops = [{"op": name, "count": e["count"], "distinct_signatures": e["distinct_signatures"],
                "signatures": e["signatures"], "devices": sorted(e["devices"])} for name, e in self.ops.items()]
        return {"ops": ops, "op_calls": sum(e["count"] for e in self.ops.values()),
                "copies_bytes": dict(self.copies), "copies_count": dict(self.copy_counts),
                "wide_values": self.wide_values}


def fallback_report(census_summary, fallback_names):
    """The census entries of the ops TorchNeuron runs on the CPU, matched by name."""
    by_name = {entry["op"]: entry for entry in census_summary["ops"]}
    report = []
    for name in fallback_names:
        entry, seen_as = by_name.get(name), name
        if entry is None:  # an out= or functional form called below the Python dispatch level
            base = name.split(".")[0]
            matches = [e for op, e in by_name.items() if op.split(".")[0] == base]
            entry = matches[0] if matches else None
            seen_as = matches[0]["op"] if matches else None
        report.append({"op": name, "count": entry["count"] if entry else None,
                       "signatures": list(entry["signatures"])[:3] if entry else [], "census_name": seen_as})
    return report


# ---- "Will it run on Trainium?" from a census made on any device ----------------------------
# Note [Predicted fallbacks]
# TorchNeuron runs an op on the CPU when the op reaches the device's dispatch key and its base
# name is not in TorchNeuron 2.13's natively lowered set (data/torchneuron_ops.txt: the same
# table the simulator classifies by; tests/migrate/test_migrate_census.py keeps the two files
# equal). Which census ops reach a device's dispatch key does not depend on the device
# that made the census: an op whose kernel is CompositeExplicitAutograd (views such as expand,
# t, select; rsub, lift_fresh) is computed from other ops on every backend, so it never falls
# back itself, unless TorchNeuron registers it (argsort); an op with backend kernels (argmax,
# isin) does. A structured in-place op (exp_) reaches the backend as its out= kernel (exp.out),
# so its functional name is looked up. The census does not see the ops inside a composite
# kernel (a dispatch mode sees the outer call only): the common ones whose inner op falls back
# are listed (COMPOSITE_INNER: sort, the random factories); another would be missed. In a device
# run, ops on CPU tensors only (host-side post-processing) are not counted. The tests check the
# prediction against the measured set for two workloads. Attention and a few other ops
# are chosen per device (CUDA's flash or efficient SDPA, the CPU's flash-for-CPU): they are
# mapped to the op TorchNeuron chooses (DEVICE_CHOICES) before the lookup. Names are compared
# by base name: the overload one backend reports (isin.Tensor_Tensor_out through an out= kernel)
# may differ from the one the census saw.
OP_TABLE = os.path.join(os.path.dirname(__file__), "data", "torchneuron_ops.txt")
_SDPA = "_scaled_dot_product_fused_attention_overrideable"
DEVICE_CHOICES = {
    "_scaled_dot_product_flash_attention": _SDPA, "_scaled_dot_product_efficient_attention": _SDPA,
    "_scaled_dot_product_cudnn_attention": _SDPA, "_scaled_dot_product_flash_attention_for_cpu": _SDPA,
    "_flash_attention_forward": _SDPA, "_efficient_attention_forward": _SDPA,
    "_scaled_dot_product_flash_attention_backward": _SDPA + "_backward",
    "_scaled_dot_product_efficient_attention_backward": _SDPA + "_backward",
    "_scaled_dot_product_cudnn_attention_backward": _SDPA + "_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward": _SDPA + "_backward",
    "_flash_attention_backward": _SDPA + "_backward", "_efficient_attention_backward": _SDPA + "_backward",
}
# An op with one of these kernels is computed from other ops on a backend without its own
# kernel. (CompositeExplicitAutogradNonFunctional is not among them: a structured op's functional
# form, argmax or isin, whose out= kernel then reaches the backend.)
_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeImplicitAutograd")


def base_name(op):
    """"aten::add.Tensor" -> "add"."""
    return op.split("::")[-1].split(".")[0]


@functools.cache
def torchneuron_op_table():
    """(names TorchNeuron 2.13 runs on the device, names it pins to the CPU), by base name."""
    sections, current = {"device": set(), "cpu": set()}, None
    with open(OP_TABLE, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                current = line.strip("[]")
                if current not in sections:
                    raise ValueError(f"{OP_TABLE}:{number}: unknown section [{current}]")
            elif line:
                sections[current].update(line.split())
    return frozenset(sections["device"] - sections["cpu"]), frozenset(sections["cpu"])


# Composite ops (made of other ops on every backend) whose inner op reaches the backend and is
# not native: the census sees the outer call only. TorchNeuron registers some composite ops
# itself (argsort): those are looked up in its table first.
COMPOSITE_INNER = {"sort": "sort", "argsort": "sort", "randn": "normal_", "randn_like": "normal_",
                   "rand": "uniform_", "rand_like": "uniform_", "randint": "random_", "randint_like": "random_",
                   "normal": "normal_", "bernoulli": "bernoulli_"}


def _handle(op):
    namespace, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
    except (AttributeError, RuntimeError):
        return None


def as_on_neuron(op):
    """The base name TorchNeuron's table is asked for, for an op the census saw, or None when the
    op reaches no backend kernel itself (Note [Predicted fallbacks])."""
    base = base_name(op)
    base = DEVICE_CHOICES.get(base, base)
    native, pinned = torchneuron_op_table()
    if base in native or base in pinned:
        return base
    handle = _handle(op)
    if handle is None:
        return base  # torch does not know it: counted, so nothing is hidden
    if any(handle.has_kernel_for_dispatch_key(key) for key in _COMPOSITE_KEYS):
        return COMPOSITE_INNER.get(base)  # made of other ops: the inner op that reaches the backend, if known
    if base.endswith("_") and not base.startswith("_") and \
            handle.has_kernel_for_dispatch_key("CompositeExplicitAutogradNonFunctional"):
        return base[:-1]  # a structured in-place op reaches the backend as its out= kernel (exp_ -> exp.out)
    return base


def predicted_fallbacks(census_summary, device=None):
    """[{op, as_on_neuron, count, reason}] for the census ops TorchNeuron would run on the CPU
    (Note [Predicted fallbacks]), sorted by op. Only ops with a tensor on the census's device
    (`device`, else the accelerator the census saw, else the CPU) count: host-side work on CPU
    tensors in a device run is not the device's."""
    native, pinned = torchneuron_op_table()
    seen = set().union(*(entry.get("devices") or () for entry in census_summary["ops"]))
    # the census's device: given, else the accelerator it saw (the CPU when it saw none)
    devices = {device} if device is not None else (seen - {"cpu"} or {"cpu"})
    found = []
    for entry in census_summary["ops"]:
        op = entry["op"]
        if op.split("::")[0] != "aten":
            continue
        if entry.get("devices") and not devices & set(entry["devices"]):
            continue
        name = as_on_neuron(op)
        if name is None:
            continue
        if name in pinned:
            reason = "TorchNeuron registers it to run on the CPU"
        elif name not in native:
            reason = "not in TorchNeuron 2.13's natively lowered ops: its CPU fallback runs it"
        else:
            continue
        found.append({"op": op, "as_on_neuron": name, "count": entry["count"], "reason": reason})
    return sorted(found, key=lambda item: item["op"])


def op_key(op):
    """What two reports' op names are compared by: the name TorchNeuron's table is asked for
    (randn as normal_, exp_ as exp, attention as TorchNeuron's; a view by its own base name)."""
    return as_on_neuron(op) or base_name(op)


def same_ops(names_a, names_b):
    """Whether two lists of op names name the same ops (by base name, Note [Predicted fallbacks])."""
    return {op_key(n) for n in names_a} == {op_key(n) for n in names_b}
