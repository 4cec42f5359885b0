"""FX passes of torch.compile(backend="neuron"), run on the ATen graph AOTAutograd made:

- inline_flex_attention (flex_attention.py): FlexAttention's higher-order operators become
  the ATen ops of their dense implementations (Note [FlexAttention on neuron]).
- replay_random_ops: activation checkpointing's recomputed random ops (AOTAutograd's
  run_and_save_rng_state / run_with_rng_state, which have no kernel for this device) draw in
  backward what they drew in forward (Note [Random ops replayed in compiled graphs] in
  csrc/kernels/Random.cpp).
- materialize_lazy_views: conj and _neg_view (what AOTAutograd's backward of complex products
  holds: grad * other.conj()) are views that only set a bit on the tensor, which ATen's kernels
  resolve; a program's values are memory layouts without those bits, so these nodes become the
  ops that compute the values (conj_physical, neg).
- narrow_64bit: Note [64-bit as 32-bit], the same rule eager kernels follow (asked of
  csrc/Dtype64.h through _C.narrowing_rule): a node that computes on float64 / int64 values
  gets 32-bit copies of them, and its 32-bit results are widened back, so compiled code gives
  what eager code gives. Ops TorchNeuron runs on the CPU keep 64 bits, as in eager; so do
  nodes mixing float64 with float32 (int64 with int32) values.
- fold_constants: nodes whose inputs are all known at compile time (factory ops, ops on
  folded constants) are computed once, here, and become constants of the program.
- integer_histc: histc of integer inputs, which only accelerators accept (Accelerator.cpp),
  runs on float64 copies.
- reinplace_input_updates: an input updated by a functional scatter-like op and written
  back (`copy_(input, index_copy(input, ...))`, what functionalization makes of a static KV
  cache's `index_copy_`) becomes the in-place op, when nothing reads the old value after the
  update: the cache is written in place instead of copied twice per layer and step.
- dead code elimination (FX's own, which keeps impure nodes such as in-place writes).

After the passes the graph's fake-tensor metadata is propagated again, so the lowering sees
the dtypes and layouts the new nodes have.

One pass runs on Dynamo's graph, before AOTAutograd: keep_asserts."""
import copy
import operator

import torch
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from .. import _C
from . import flex_attention
from .lowering import LoweringError
from .segments import COLLECTIVE_NAMESPACES

aten = torch.ops.aten
_WIDE = {torch.float64: torch.float32, torch.int64: torch.int32}
# A result's dtype computed from narrowed operands -> the dtype it had: float64's narrowing turns
# a complex128 result into complex64 (float64 x complex64 tensors is complex128 on the CPU).
_WIDENED = {torch.float32: torch.float64, torch.int32: torch.int64, torch.complex64: torch.complex128}
_rules = {}
FOLD_LIMIT_BYTES = 1 << 20  # larger results are computed at run time, not embedded in the program


def _qualified(target):
    schema = target._schema
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def _rule(target):
    name = _qualified(target)
    if name not in _rules:
        try:
            _rules[name] = _C.narrowing_rule(name)
        except RuntimeError:
            _rules[name] = None
    return _rules[name]


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _fits_32bit(value):
    if isinstance(value, bool) or not isinstance(value, int):
        return True
    return -(2 ** 31) <= value < 2 ** 31


def narrow_64bit(gm, on_device_ops):
    """Inserts 32-bit conversions around nodes computing on 64-bit values; returns how many
    nodes were narrowed. `on_device_ops`: base names TorchNeuron runs on the device."""
    if not _C.computes_64bit_as_32bit():
        return 0
    graph = gm.graph
    narrowed = []
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target.namespace != "aten" or node.target._schema.name.split("::")[-1] not in on_device_ops:
            continue
        rule = _rule(node.target)
        if rule is None or rule["exact"]:
            continue
        schema = node.target._schema
        value_names = set(rule["value_arguments"])
        flat = list(node.args) + list(node.kwargs.values())
        if not all(_fits_32bit(a) for a in flat if not isinstance(a, torch.fx.Node)):
            continue
        if rule["dtype_argument"] and node.kwargs.get(rule["dtype_argument"]) is not None:
            continue  # typed on request: the caller chose the dtype
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue  # in-place / out=: written arguments keep their memory and dtype
        if any(r.alias_info is not None for r in schema.returns):
            continue  # a view (x.view(torch.int32), as_strided) reinterprets the 64-bit bytes (review 14)
        if _mixes_widths(node, schema, value_names):
            continue  # float64 with float32 (int64 with int32): 64 bits, as eager (csrc/Dtype64.h)
        inserted = []
        with graph.inserting_before(node):
            def narrow(arg, name):
                val = _val(arg)
                if name in value_names and isinstance(val, torch.Tensor) and val.dtype in _WIDE and val.dim() > 0:
                    copy = graph.call_function(aten._to_copy.default, (arg,), {"dtype": _WIDE[val.dtype]})
                    with val.fake_mode if hasattr(val, "fake_mode") else _nothing():
                        copy.meta["val"] = val.to(_WIDE[val.dtype])
                    inserted.append(copy)
                    return copy
                return arg
            names = [a.name for a in schema.arguments]
            new_args = tuple(narrow(a, names[i]) if i < len(names) else a for i, a in enumerate(node.args))
            new_kwargs = {k: narrow(v, k) for k, v in node.kwargs.items()}
        if not inserted:
            continue
        if not _accepts(node.target, new_args, new_kwargs):  # the 32-bit form is refused: 64 bits
            for copy in inserted:
                graph.erase_node(copy)
            continue
        node.args, node.kwargs = new_args, new_kwargs
        node.meta["narrowed_64bit"] = True
        narrowed.append(node)
    if narrowed:
        _repropagate(gm, narrowed, after=_widen_result)
    return len(narrowed)


def _widen_result(gm, node, replaced):
    """After `node` was recomputed: a narrowed node's 32-bit result where the graph had 64 bits
    is widened back by a copy its users read instead; for an op with several results (max.dim,
    topk, native_layer_norm), each such element, after the getitem that reads it (review 14)."""
    if not node.meta.get("narrowed_64bit") or node.meta.get("widened_64bit"):
        return
    node.meta["widened_64bit"] = True
    original, val = node.meta.get("original_val"), node.meta.get("val")
    if isinstance(val, (list, tuple)) and isinstance(original, (list, tuple)):
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem and isinstance(user.args[1], int):
                index = user.args[1]
                if index < len(original) and index < len(val):
                    _set_recomputed(user, _recompute(user), replaced)
                    _widen_node(gm, user, original[index], val[index], replaced)
        return
    _widen_node(gm, node, original, val, replaced)


def _widen_node(gm, node, original, val, replaced):
    if not (isinstance(val, torch.Tensor) and isinstance(original, torch.Tensor)
            and _WIDENED.get(val.dtype) == original.dtype):
        return
    graph = gm.graph
    with graph.inserting_after(node):
        wide = graph.call_function(aten._to_copy.default, (node,), {"dtype": original.dtype})
    node.replace_all_uses_with(wide, delete_user_cb=lambda user: user is not wide)
    _set_recomputed(wide, _recompute(wide), replaced)


def _mixes_widths(node, schema, value_names):
    """Whether the node's value arguments hold a 64-bit tensor and a 32-bit one of its kind (a
    float64 tensor with a complex64 one counts: narrowing would make the result complex64), as
    csrc/Dtype64.h decides for eager."""
    names = [a.name for a in schema.arguments]
    given = [(names[i] if i < len(names) else None, a) for i, a in enumerate(node.args)] + list(node.kwargs.items())
    dtypes = set()
    for name, arg in given:
        if name in value_names:
            for item in arg if isinstance(arg, (list, tuple)) else [arg]:
                val = _val(item)
                if isinstance(val, torch.Tensor):
                    dtypes.add(val.dtype)
    return (any(wide in dtypes and narrow in dtypes for wide, narrow in _WIDE.items())
            or (torch.float64 in dtypes and torch.complex64 in dtypes))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _fake_call(target, args, kwargs):
    """Runs `target` on the fake values of these arguments (nodes stand for their values);
    returns (result, fake args, fake kwargs)."""
    def fake(a):
        if isinstance(a, torch.fx.Node):
            return a.meta.get("val")
        if isinstance(a, (list, tuple)):
            return type(a)(fake(x) for x in a)
        if isinstance(a, dict):
            return {k: fake(v) for k, v in a.items()}
        return a
    args, kwargs = fake(args), {k: fake(v) for k, v in kwargs.items()}
    modes = [v.fake_mode for v in _tensors((args, kwargs)) if isinstance(v, torch._subclasses.FakeTensor)]
    with modes[0] if modes else _nothing():
        return target(*args, **kwargs), args, kwargs


def _recompute_call(target, args, kwargs):
    from torch.fx.experimental.proxy_tensor import snapshot_fake
    result, _, _ = _fake_call(target, args, kwargs)
    return torch.utils._pytree.tree_map_only(torch.Tensor, snapshot_fake, result)


def _accepts(target, args, kwargs):
    """Whether `target` runs on the (fake) values of these arguments."""
    try:
        _fake_call(target, args, kwargs)
        return True
    except Exception:  # noqa: BLE001
        return False


def _propagate(gm):
    fake_mode = None
    inputs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            inputs.append(val)
            if fake_mode is None and isinstance(val, torch._subclasses.FakeTensor):
                fake_mode = val.fake_mode
    for node in gm.graph.nodes:
        if "val" in node.meta and "original_val" not in node.meta:
            node.meta["original_val"] = node.meta["val"]
    gm.recompile()
    if fake_mode is None:
        return
    with fake_mode:
        FakeTensorProp(gm, fake_mode).propagate_dont_convert_inputs(*inputs)


# Note [Propagating only what changed]: a pass that rewrote a few nodes recomputes the fake
# values of those nodes and of what reads them, in graph order, instead of the whole graph
# (a 124M Llama's decode graph, 997 nodes, 12 narrowed and 24 in-place cache updates: three
# whole-graph propagations took 1.29 s of the passes' 1.35 s; now the passes take 0.06 s,
# the graph's whole compile 0.16 s instead of 1.50 s; one run each). A recomputed value with the
# metadata it had, over a storage of its own (not a view or an in-place result), is replaced by
# the value it had: the values after it refer to that one's storage, which the lowering reads
# to tell views from new buffers, so nothing after it needs recomputing. Anything else (a new
# dtype, layout or alias) marks its readers for recomputing. tests/test_compile_passes.py compares
# it with a whole-graph propagation, storages included; review 14 compared 28 more graphs. One
# known difference: a whole-graph propagation gives lift_fresh_copy of a torch.tensor constant the
# constant's storage, this its own (the lowering never plans constants as buffers).

def _recompute(node):
    """The node's fake value from its arguments' current values, as FakeTensorProp makes it."""
    from torch.fx.experimental.proxy_tensor import snapshot_fake
    result, args, kwargs = _fake_call(node.target, node.args, node.kwargs)
    return torch.utils._pytree.tree_map_only(torch.Tensor, snapshot_fake, result), args, kwargs


def _tensors(tree):
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _same_meta(a, b):
    leaves_a, spec_a = torch.utils._pytree.tree_flatten(a)
    leaves_b, spec_b = torch.utils._pytree.tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if (x.dtype, x.device, tuple(x.shape), x.stride(), x.storage_offset()) != \
                    (y.dtype, y.device, tuple(y.shape), y.stride(), y.storage_offset()):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _set_recomputed(node, recomputed, replaced):
    """Gives `node` its recomputed value, or keeps the one it had (Note [Propagating only what
    changed]); adds it to `replaced` when its value changed."""
    new, args, kwargs = recomputed
    old = node.meta.get("val")
    if "original_val" not in node.meta and old is not None:
        node.meta["original_val"] = old
    inputs = {t.untyped_storage()._cdata for t in _tensors((args, kwargs))}
    aliases = any(t.untyped_storage()._cdata in inputs for t in _tensors(new))
    if old is not None and not aliases and _same_meta(old, new) and \
            all(t.untyped_storage()._cdata not in inputs for t in _tensors(old)):
        return
    node.meta["val"] = new
    replaced.add(node)


def _repropagate(gm, changed, after=None):
    """Recomputes the fake values of the `changed` nodes and of the nodes that read a changed
    value (Note [Propagating only what changed]); `after(gm, node, replaced)` runs once a
    changed node has its value (it may insert nodes after it, giving them their values).
    Falls back to a whole-graph propagation if a node cannot be recomputed alone."""
    changed = set(changed)
    replaced = set()
    try:
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                if node.op == "output":
                    continue
                if node in changed:
                    raise RuntimeError(f"{node}: only call_function nodes are recomputed alone")
                continue
            if node not in changed and not any(a in replaced for a in node.all_input_nodes):
                continue
            _set_recomputed(node, _recompute(node), replaced)
            if after is not None and node in changed:
                after(gm, node, replaced)
    except Exception:  # noqa: BLE001  (recomputing alone is an optimization: the whole graph is the reference)
        _propagate(gm)
        if after is not None:
            replaced = set()
            for node in list(gm.graph.nodes):
                if node in changed:
                    after(gm, node, replaced)
            if replaced:
                _propagate(gm)
        return
    gm.recompile()


def integer_histc(gm):
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target == aten.histc.default:
            val = _val(node.args[0])
            if isinstance(val, torch.Tensor) and not val.dtype.is_floating_point:
                with graph.inserting_before(node):
                    wide = graph.call_function(aten._to_copy.default, (node.args[0],), {"dtype": torch.float64})
                node.args = (wide,) + tuple(node.args[1:])
                with graph.inserting_after(node):
                    back = graph.call_function(aten._to_copy.default, (node,), {"dtype": val.dtype})
                node.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
                rewritten += 1
    if rewritten:
        _propagate(gm)
    return rewritten


_NOT_FOLDABLE = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default}


def fold_constants(gm):
    """Computes, once, every node whose inputs are known now; returns how many were folded."""
    graph = gm.graph
    known = {}
    folded = 0
    for node in list(graph.nodes):
        if node.op == "get_attr":
            known[node] = getattr(gm, node.target)
            continue
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        target = node.target
        tags = getattr(target, "tags", ())
        if target in _NOT_FOLDABLE or torch.Tag.nondeterministic_seeded in tags or target.is_view or \
                target.namespace in COLLECTIVE_NAMESPACES:  # a collective runs on every rank, at run time
            continue
        schema = target._schema
        if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
            continue
        tensor_inputs = [a for a in list(node.args) + list(node.kwargs.values()) if isinstance(a, torch.fx.Node)]
        if not all(a in known for a in tensor_inputs):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.untyped_storage().nbytes() > FOLD_LIMIT_BYTES:
            continue

        def real(a):
            if isinstance(a, torch.fx.Node):
                return known[a].cpu() if isinstance(known[a], torch.Tensor) else known[a]
            if isinstance(a, torch.device):
                return torch.device("cpu")
            if isinstance(a, (list, tuple)):
                return type(a)(real(x) for x in a)
            return a
        try:
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                result = target(*real(node.args), **{k: real(v) for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001  (not computable here: left to run time)
            continue
        if not isinstance(result, torch.Tensor):
            continue
        name = f"_neuron_folded_{folded}"
        gm.register_buffer(name, result.contiguous(), persistent=False)
        with graph.inserting_before(node):
            constant = graph.get_attr(name)
        constant.meta["val"] = val
        node.replace_all_uses_with(constant)
        graph.erase_node(node)
        known[constant] = result
        folded += 1
    if folded:
        gm.recompile()
    return folded


_IN_PLACE = {
    aten.index_copy.default: aten.index_copy_.default,
    aten.index_put.default: aten.index_put_.default,
    aten.scatter.src: aten.scatter_.src,
    aten.scatter.value: aten.scatter_.value,
}


def reinplace_input_updates(gm):
    """copy_(input, f(input, ...)) -> f_(input, ...) where f has an in-place form and no node
    reads the input's old value after f; returns how many were rewritten."""
    graph = gm.graph
    order = {node: position for position, node in enumerate(graph.nodes)}
    updated = []
    for copy in list(graph.nodes):
        if copy.op != "call_function" or copy.target is not aten.copy_.default or len(copy.args) < 2:
            continue
        destination, update = copy.args[0], copy.args[1]
        if not isinstance(update, torch.fx.Node) or update.op != "call_function" or update.target not in _IN_PLACE:
            continue
        if destination.op != "placeholder" or not update.args or update.args[0] is not destination:
            continue
        if any(order[user] > order[update] and user is not copy for user in destination.users):
            continue  # the old value is read after the update
        before, after = _val(destination), _val(update)
        if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor) or \
                (before.dtype, tuple(before.shape), before.stride()) != (after.dtype, tuple(after.shape), after.stride()):
            continue
        update.target = _IN_PLACE[update.target]
        copy.replace_all_uses_with(update)
        graph.erase_node(copy)
        updated.append(update)
    if updated:
        _repropagate(gm, updated)
    return len(updated)


def _writes(node, argument):
    """Whether `node` may write the tensor it is given as `argument` (its schema's alias_info)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return node.op == "call_function"  # not an op: assume it may
    for position, formal in enumerate(schema.arguments):
        given = node.args[position] if position < len(node.args) else node.kwargs.get(formal.name)
        tree = given if isinstance(given, (list, tuple)) else [given]
        if any(item is argument for item in tree) and formal.alias_info is not None and formal.alias_info.is_write:
            return True
    return False


def _is_view(node):
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _written(value):
    """Whether any op writes `value` or a view of it."""
    aliases, seen = [value], {value}
    while aliases:
        alias = aliases.pop()
        for user in alias.users:
            if _writes(user, alias):
                return True
            if user.op == "call_function" and _is_view(user) and user not in seen:
                seen.add(user)
                aliases.append(user)
    return False


def drop_identity_copies(gm):
    """aten.copy(destination, source) -> source when the copy only takes source's values: equal
    dtype, device, shape, strides and offset, so nothing is cast, broadcast or laid out anew.
    Functionalization leaves one per in-place update of a value that is not an input, as
    transformers' row-parallel `dist.all_reduce(output)` (its result is copied into `output`'s
    place); the copy is a launch of its own in a program. Kept: a copy that is a graph output
    (its identity is the caller's), and any copy of a graph input or of a value some op writes
    (a later write would show through)."""
    graph = gm.graph
    outputs = {n for node in graph.nodes if node.op == "output"
               for n in torch.utils._pytree.tree_leaves(node.args) if isinstance(n, torch.fx.Node)}
    dropped = 0
    for copy in list(graph.nodes):
        if copy.op != "call_function" or copy.target is not aten.copy.default or len(copy.args) < 2 or \
                copy in outputs:
            continue
        source = copy.args[1]
        if not isinstance(source, torch.fx.Node) or source.op != "call_function" or \
                not isinstance(_val(source), torch.Tensor) or not _same_meta(_val(copy), _val(source)):
            continue
        schema = getattr(source.target, "_schema", None)
        if schema is None or any(r.alias_info is not None for r in schema.returns):
            continue  # a view of something else, which may be written
        if _written(source):
            continue
        copy.replace_all_uses_with(source)
        graph.erase_node(copy)
        dropped += 1
    if dropped:
        gm.recompile()
    return dropped


_WITH_GENERATOR = {}


def _signature(arguments):
    """What a call binds to: each argument's name, real type (ScalarType, not int), whether it
    is keyword-only, and its default."""
    return [(a.name, str(a.real_type), a.kwarg_only, repr(a.default_value) if a.has_default_value() else None)
            for a in arguments]


def _with_generator(target):
    """The overload of `target` whose arguments are `target`'s (same names, types, keyword-only
    flags and defaults) plus a keyword `generator` (rand -> rand.generator, randint_like.Tensor
    -> randint_like.Tensor_generator, not randint_like.generator whose `high` is an int), or None."""
    if target not in _WITH_GENERATOR:
        found = None
        schema = getattr(target, "_schema", None)
        if schema is not None and not any(a.name == "generator" for a in schema.arguments):
            signature = _signature(schema.arguments)
            packet = target.overloadpacket
            for overload in packet.overloads():
                arguments = getattr(packet, overload)._schema.arguments
                extra = [a for a in arguments if a.name == "generator"]
                if extra and extra[0].kwarg_only and \
                        _signature([a for a in arguments if a.name != "generator"]) == signature:
                    found = getattr(packet, overload)
                    break
        _WITH_GENERATOR[target] = found
    return _WITH_GENERATOR[target]


_RNG_STATE_BYTES = 16  # a neuron generator's state: seed, offset (Note [Philox generator])


def _register_rng_state_fake():
    """neuron::rng_state's value under fake tensors: 16 bytes on the device it names (its Meta
    kernel knows no device; FakeTensor would put an op without tensor arguments on meta)."""
    if getattr(_register_rng_state_fake, "done", False):
        return
    _register_rng_state_fake.done = True

    @torch.library.register_fake("neuron::rng_state")
    def _(device):
        return torch.empty(_RNG_STATE_BYTES, dtype=torch.uint8, device=device)


def _state_value(fake_mode, device):
    with fake_mode:
        return torch.empty(_RNG_STATE_BYTES, dtype=torch.uint8, device=device)


def replay_random_ops(gm):
    """Note [Random ops replayed in compiled graphs] (csrc/kernels/Random.cpp): in a forward graph,
    `run_and_save_rng_state(op, *args)` becomes `neuron::rng_state(device)` followed by `op(*args)`
    (the state before the op draws, saved for backward); in a backward graph,
    `run_with_rng_state(state, op, *args)` becomes `op(*args)` drawing from a generator at `state`
    (its Generator argument, set by generators_from_saved_states after seeded_ops_take_a_generator
    has given the op one). Returns how many were rewritten."""
    from torch._prims import rng_prims
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (rng_prims.run_and_save_rng_state,
                                                            rng_prims.run_with_rng_state):
            continue
        saving = node.target is rng_prims.run_and_save_rng_state
        op, args = (node.args[0], node.args[1:]) if saving else (node.args[1], node.args[2:])
        if not isinstance(op, torch._ops.OpOverload):
            raise LoweringError(f"{node.format_node()}: a recomputed random op that is not an ATen op ({op})")
        users = list(node.users)
        if saving:
            results = {user.args[1]: user for user in users}
            if any(user.target is not operator.getitem for user in users) or not results.keys() <= {0, 1}:
                raise LoweringError(f"{node.format_node()}: its results are used other than as (state, output)")
        # the partitioner gives these nodes no fake value: the op's own, on its arguments' values
        val = node.meta["val"][1] if "val" in node.meta else _recompute_call(op, args, node.kwargs)
        device = _tensors(val)[0].device if _tensors(val) else None
        if device is None or device.type != "neuron":
            raise LoweringError(f"{node.format_node()}: a recomputed random op on {device}: only ops on the neuron "
                                "device are replayed from a saved state (move its inputs to the neuron device)")
        fake_mode = _tensors(val)[0].fake_mode
        with graph.inserting_before(node):
            if saving:
                _register_rng_state_fake()
                state = graph.call_function(torch.ops.neuron.rng_state.default, (device,))
                state.meta["val"] = _state_value(fake_mode, device)
            out = graph.call_function(op, tuple(args), dict(node.kwargs))
        out.meta["val"] = val
        if saving:
            out.meta["neuron_rng_saved_by"] = state
            for index, user in results.items():
                user.replace_all_uses_with(state if index == 0 else out)
                graph.erase_node(user)
        else:
            saved = node.args[0]
            out.meta["neuron_rng_state"] = saved
            if saved.op == "placeholder":  # traced as the CPU generator's state (5056 bytes)
                saved.meta["val"] = _state_value(fake_mode, device)
            node.replace_all_uses_with(out)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def generators_from_saved_states(gm):
    """The second half of replay_random_ops: each backward op replayed from a saved state gets it
    as its Generator argument (the executor makes a generator at that state)."""
    for node in gm.graph.nodes:
        saved = node.meta.get("neuron_rng_state")
        if saved is None:
            continue
        if not any(a.name == "generator" for a in node.target._schema.arguments):
            raise LoweringError(f"{node.format_node()}: a recomputed random op without a Generator argument; "
                                "it cannot be replayed from the forward's state")
        node.kwargs = {**node.kwargs, "generator": saved}
    gm.recompile()


def seeded_ops_take_a_generator(gm):
    """Random ops without a Generator argument would draw from the CPU's default generator in
    the executor (kernels run on host views); their overloads with one draw from the device's
    generator (the executor passes it), as eager ops do. A random op that makes a CPU tensor keeps
    drawing from the CPU's generator, as it does eagerly. Returns how many were rewritten."""
    rewritten = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            with_generator = _with_generator(node.target)
            made = _tensors(node.meta.get("val"))
            if made and made[0].device.type != "neuron":
                continue  # a CPU random op draws from the CPU's default generator, as it does eagerly
            if with_generator is not None:
                node.target = with_generator
                rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


# eager's message for a failed torch._assert_async(x) (ATen's _assert_async CPU kernel)
_ASSERT_MESSAGE = "Expected Tensor with single nonzero value, but got zero"


def keep_asserts(gm):
    """torch._assert_async(x) without a message becomes aten._assert_async.default, which FX
    does not count as a side effect (its .msg overload it does), so AOTAutograd's dead code
    elimination drops it and a failing assert passes silently (as with Inductor). Given eager's
    own message, it traces to the .msg overload and is kept. On Dynamo's graph; returns how
    many calls were rewritten."""
    rewritten = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch._assert_async and len(node.args) == 1 \
                and "assert_msg" not in node.kwargs:
            node.args = (node.args[0], _ASSERT_MESSAGE)
            rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def eliminate_dead_code(gm):
    changed = gm.graph.eliminate_dead_code()
    gm.recompile()
    return changed


_LAZY_VIEWS = {aten.conj.default: aten.conj_physical.default, aten._conj.default: aten.conj_physical.default,
               aten._conj_copy.default: aten.conj_physical.default, aten._neg_view.default: aten.neg.default,
               aten._neg_view_copy.default: aten.neg.default}
_CONJ = (aten.conj.default, aten._conj.default, aten._conj_copy.default)
_BIT_VIEWS = (aten.conj.default, aten._conj.default, aten._neg_view.default)  # views (the _copy forms are not)


def _is_lazy(node):
    """A node that sets a bit: conj of a complex value, or _neg_view of any."""
    if node.op != "call_function" or node.target not in _LAZY_VIEWS:
        return False
    val = _val(node.args[0])
    return node.target not in _CONJ or (isinstance(val, torch.Tensor) and val.is_complex())


def _sets_bit_as_view(node):
    return node.target in _BIT_VIEWS and _is_lazy(node)


def _is_same_dtype_view(node):
    """An ATen view op (its result aliases its first argument) that keeps the dtype."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.returns or not node.args:
        return False
    alias = schema.returns[0].alias_info
    before, after = _val(node.args[0]), _val(node)
    return (alias is not None and not alias.is_write and isinstance(before, torch.Tensor)
            and isinstance(after, torch.Tensor) and before.dtype == after.dtype)


def _outputs_through_bit_views(gm):
    """Graph outputs that are views of a conj / _neg_view result (eager returns them as views of its
    base, with the bit): each becomes the same views of the base without the bit-setting nodes, and
    the bits it must get back are recorded in gm.meta["output_bits"] (output index -> ["conj"/"neg",
    ...]), which NeuronProgramCode applies to the program's output (torch._conj / torch._neg_view:
    views, so the output still aliases what eager's aliases)."""
    graph = gm.graph
    output = next(node for node in reversed(graph.nodes) if node.op == "output")
    results = output.args[0]
    flat = list(results) if isinstance(results, (list, tuple)) else [results]
    bits = {}
    for index, node in enumerate(flat):
        chain = []
        while isinstance(node, torch.fx.Node) and (_sets_bit_as_view(node) or _is_same_dtype_view(node)):
            chain.append(node)
            node = node.args[0]
        if not any(_sets_bit_as_view(link) for link in chain):
            continue
        current, applied = node, []
        with graph.inserting_before(output):
            for link in reversed(chain):
                if _sets_bit_as_view(link):
                    applied.append("conj" if link.target in _CONJ else "neg")
                else:
                    current = graph.call_function(link.target, (current, *link.args[1:]), dict(link.kwargs))
                    current.meta.update(link.meta)
        flat[index] = current
        bits[index] = applied
    if bits:
        output.args = (type(results)(flat) if isinstance(results, (list, tuple)) else flat[0],)
    return bits


def materialize_lazy_views(gm):
    """conj / _neg_view nodes of complex values become conj_physical / neg (the module's docstring);
    conj of a real tensor is the tensor itself and stays. A graph output that is (a view of) such a
    node keeps its aliasing instead: _outputs_through_bit_views. Returns how many were rewritten."""
    bits = _outputs_through_bit_views(gm)
    if bits:
        gm.meta["output_bits"] = bits
    rewritten = 0
    for node in gm.graph.nodes:
        if _is_lazy(node):
            node.target = _LAZY_VIEWS[node.target]
            rewritten += 1
    if rewritten or bits:
        gm.graph.eliminate_dead_code()
        _propagate(gm)
    return rewritten + len(bits)


def run_passes(gm, on_device_ops):
    """All passes in order; returns counts for the compile record."""
    stats = {"flex_attention": flex_attention.inline_flex_attention(gm)}
    stats["lazy_views"] = materialize_lazy_views(gm)
    stats["histc"] = integer_histc(gm)
    stats["replayed_random"] = replay_random_ops(gm)
    stats["seeded"] = seeded_ops_take_a_generator(gm)
    if stats["replayed_random"]:
        generators_from_saved_states(gm)
    stats["narrowed_64bit"] = narrow_64bit(gm, on_device_ops)
    stats["reinplaced"] = reinplace_input_updates(gm)  # before folding: it propagates fake values again
    stats["identity_copies"] = drop_identity_copies(gm)
    stats["folded"] = fold_constants(gm)
    eliminate_dead_code(gm)
    stats["nodes"] = sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem)
    return stats


def generator_at(state):
    """A neuron Generator at `state` (a 16-byte state tensor): what the executor makes for an op
    whose Generator argument is a saved state, for the same graph run eagerly."""
    generator = torch.Generator(device=state.device)
    generator.set_state(state.cpu())
    return generator


def eager_runnable(gm):
    """A copy of `gm` that runs op by op (fallback execution, Note [Random ops replayed in compiled
    graphs]): the random-op replays of run_passes applied (a graph from the cache has not been
    through them; ATen has no neuron kernel for run_and_save_rng_state / run_with_rng_state), and
    each Generator argument that is a saved state made a Generator at that state (generator_at),
    so the eager graph draws what the program draws. `gm` is left as it is."""
    from torch._prims import rng_prims
    eager = copy.deepcopy(gm)
    hops = (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state)
    if any(node.op == "call_function" and node.target in hops for node in eager.graph.nodes):
        replay_random_ops(eager)
        seeded_ops_take_a_generator(eager)
        generators_from_saved_states(eager)
    graph = eager.graph
    for node in list(graph.nodes):
        state = node.kwargs.get("generator") if node.op == "call_function" else None
        if isinstance(state, torch.fx.Node):
            with graph.inserting_before(node):
                made = graph.call_function(generator_at, (state,))
            node.kwargs = {**node.kwargs, "generator": made}
    eager.recompile()
    return eager
