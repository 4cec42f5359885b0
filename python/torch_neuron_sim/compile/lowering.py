"""FX graph (ATen, after AOTAutograd and our passes) -> program (Note [Programs] in
runtime/program.h): values with a static memory plan, nodes with their arguments.

Values:
- placeholders are inputs; tensor attributes (folded constants) are constants;
- a view op (view, permute, slice, ...) makes no node: its value is a view of its base's
  storage, with the sizes, strides and offset that fake-tensor propagation gave it;
- every other op's result is a root value: planned in the arena, or an output (a fresh
  buffer per call) when the graph returns it or a view of it; an op that returns one of its
  arguments (in-place, out=) makes no new value.
The arena plan (memory_plan.py): each planned root lives from the node that makes it to the
last node that reads it or a view of it; roots whose lifetimes do not overlap share bytes."""
import dataclasses
import operator

import torch
from torch.fx import Node

from .. import _C
from . import fusion, memory_plan

# The kinds of runtime/program.h, as bound by csrc/compile/Bindings.cpp (Note [The program
# schema in Python]); kept as plain ints for the description's dicts and tuples.
_ValueKind, _ArgKind = _C.ProgramValueKind, _C.ProgramArgKind
INPUT, CONSTANT, ARENA, OUTPUT, VIEW, DYNAMIC = (int(_ValueKind.INPUT), int(_ValueKind.CONSTANT), int(_ValueKind.ARENA),
                                                 int(_ValueKind.OUTPUT), int(_ValueKind.VIEW), int(_ValueKind.DYNAMIC))
A_NONE, A_VALUE, A_INT, A_DOUBLE, A_BOOL, A_INTS, A_DOUBLES, A_BOOLS, A_VALUES, A_STRING, A_DEVICE, A_DTYPE, \
    A_LAYOUT, A_FORMAT = (int(getattr(_ArgKind, name)) for name in (
        "NONE", "VALUE", "INT", "DOUBLE", "BOOL", "INT_LIST", "DOUBLE_LIST", "BOOL_LIST", "VALUE_LIST", "STRING",
        "DEVICE", "SCALAR_TYPE", "LAYOUT", "MEMORY_FORMAT"))
# An argument of these types given as a number (a schema's default, e.g. `ScalarType? dtype=long`
# is 4) holds c10's code, which is what the argument kind's integer holds.
_ENUM_ARGUMENTS = {"ScalarType": A_DTYPE, "Layout": A_LAYOUT, "MemoryFormat": A_FORMAT}

aten = torch.ops.aten
_funcol = torch.ops._c10d_functional
# Collectives a program runs (Note [Collectives in programs] in csrc/compile/ProgramCollectives.cpp); a graph
# with any other is cut at it (Note [Graphs with collectives], segments.py).
IN_PROGRAM_COLLECTIVES = {_funcol.all_reduce.default, _funcol.all_gather_into_tensor.default,
                          _funcol.reduce_scatter_tensor.default, _funcol.wait_tensor.default}
VIEW_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.transpose.int, aten.permute.default,
    aten.expand.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default, aten.squeeze.dim,
    aten.squeeze.dims, aten.squeeze.default, aten.alias.default, aten.as_strided.default, aten.diagonal.default,
    aten.detach.default, aten.unfold.default, aten.narrow.default, aten.view_as_real.default,
    aten.view_as_complex.default, aten._reshape_alias.default, aten.view.dtype, aten.split.Tensor,
    aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default, aten.movedim.int,
}

_codes = {}


def _code(value, code_of):
    """c10's code of a torch.dtype / layout / memory_format (asked once per value)."""
    if value not in _codes:
        _codes[value] = code_of(value)
    return _codes[value]


def dtype_code(dtype):
    return _code(dtype, _C.scalar_type_code)


def _enum_kind(real_type):
    """The argument kind of a ScalarType / Layout / MemoryFormat argument (optional or not), else None."""
    text = str(real_type)
    if text.startswith("Optional[") and text.endswith("]"):
        text = text[len("Optional["):-1]
    return _ENUM_ARGUMENTS.get(text)


class LoweringError(RuntimeError):
    """The graph has something a program cannot express (reported with the node)."""


def _storage_key(t):
    return t.untyped_storage()._cdata


def _is_tensor(v):
    return isinstance(v, torch.Tensor)


@dataclasses.dataclass
class _Value:
    kind: int
    tensor: torch.Tensor  # the fake (or real) tensor: dtype, sizes, strides, offset
    index: int = 0        # input index / constant index / arena offset / base value id
    bytes: int = 0
    on_host: bool = False


class Lowering:
    def __init__(self, gm, device_type="neuron", name="graph", metadata=None):
        self.gm = gm
        self.device_type = device_type
        self.name = name
        self.metadata = dict(metadata or {})
        self.values: list[_Value] = []
        self.roots = {}          # storage key -> root value id
        self.node_values = {}    # fx node -> value id, list of value ids (multi-output), or a Python value
        self.constants = []
        self.nodes = []          # (op name, args, outputs, fx node index)
        self.inputs = []
        self.last_use = {}       # root value id -> index of the last program node that reads it
        self.ambiguous = set()   # storages of several inputs: a result over one has no single root
        self.first_use = {}      # root value id -> first program node that touches it (set by no node)
        self.in_flight = {}      # a collective's result value -> the values it uses until its wait
        # Note [Random ops replayed in compiled graphs]: program index of each neuron::rng_state
        # node, and of the last node that draws random numbers
        self.rng_state_at = {}
        self.last_draw = -1

    # ---- values ---------------------------------------------------------------------------
    def _on_host(self, t):
        return t.device.type == "cpu" and self.device_type != "cpu"

    def _new_root(self, kind, t, index=0, nbytes=None):
        vid = len(self.values)
        nbytes = t.untyped_storage().nbytes() if nbytes is None else nbytes
        on_host = self._on_host(t)
        if on_host and kind == ARENA:
            kind = DYNAMIC  # a host tensor made inside the graph: made by its kernel, per call
        self.values.append(_Value(kind, t, index, nbytes, on_host))
        self.roots[_storage_key(t)] = vid
        return vid

    def _view(self, base_root, t):
        vid = len(self.values)
        self.values.append(_Value(VIEW, t, base_root, 0, self._on_host(t)))
        return vid

    def _value_for(self, t, node):
        """The value of tensor `t` made by `node`: a view of a known storage, or a new root."""
        key = _storage_key(t)
        if key in self.ambiguous:
            raise LoweringError(f"{node.format_node()}: its result shares the storage of several graph inputs")
        if key in self.roots:
            root = self.roots[key]
            base = self.values[root].tensor
            if (t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) == \
                    (base.dtype, tuple(base.shape), base.stride(), base.storage_offset()):
                return root
            return self._view(root, t)
        return self._new_root(ARENA, t)

    # ---- nodes ----------------------------------------------------------------------------
    def _arg(self, value, argument):
        type_text = str(argument.type)
        if value is None:
            return (A_NONE, 0, 0.0, [], [], "")
        if isinstance(value, Node):
            mapped = self.node_values[value]
            if isinstance(mapped, int):
                self._use(mapped)
                return (A_VALUE, mapped, 0.0, [], [], "")
            return self._arg(mapped, argument)  # a constant Python value made by a node
        if isinstance(value, torch.dtype):
            return (A_DTYPE, dtype_code(value), 0.0, [], [], "")
        if isinstance(value, torch.layout):
            return (A_LAYOUT, _code(value, _C.layout_code), 0.0, [], [], "")
        if isinstance(value, torch.memory_format):
            return (A_FORMAT, _code(value, _C.memory_format_code), 0.0, [], [], "")
        if isinstance(value, torch.device):
            return (A_DEVICE, 0, 0.0, [], [], "")
        if isinstance(value, bool):
            return (A_BOOL, int(value), 0.0, [], [], "")
        if isinstance(value, int):
            return (_enum_kind(argument.real_type) or A_INT, value, 0.0, [], [], "")
        if isinstance(value, float):
            return (A_DOUBLE, 0, value, [], [], "")
        if isinstance(value, str):
            return (A_STRING, 0, 0.0, [], [], value)
        if isinstance(value, (list, tuple)):
            if "Tensor" in type_text:
                ids = []
                for item in value:
                    if item is None:
                        ids.append(-1)
                    else:
                        vid = self.node_values[item]
                        self._use(vid)
                        ids.append(vid)
                return (A_VALUES, 0, 0.0, ids, [], "")
            if all(isinstance(v, bool) for v in value) and value and "bool" in type_text:
                return (A_BOOLS, 0, 0.0, [int(v) for v in value], [], "")
            if all(isinstance(v, int) for v in value):
                return (A_INTS, 0, 0.0, list(value), [], "")
            if all(isinstance(v, (int, float)) for v in value):
                return (A_DOUBLES, 0, 0.0, [], [float(v) for v in value], "")
        raise LoweringError(f"an argument of type {type(value).__name__} ({value!r}) for {argument.real_type}")

    def _use(self, vid):
        root = self._root_of(vid)
        self.last_use[root] = len(self.nodes)

    def _root_of(self, vid):
        while self.values[vid].kind == VIEW:
            vid = self.values[vid].index
        return vid

    def _schema_args(self, node):
        schema = node.target._schema
        args = []
        kwargs = dict(node.kwargs)
        for i, argument in enumerate(schema.arguments):
            if i < len(node.args) and not argument.kwarg_only:
                args.append(node.args[i])
            elif argument.name in kwargs:
                args.append(kwargs.pop(argument.name))
            elif argument.has_default_value():
                args.append(argument.default_value)
            elif "Generator" in str(argument.type):
                args.append(None)  # the executor passes the device's default generator
            else:
                raise LoweringError(f"{node.format_node()}: no value for argument {argument.name}")
        return [self._arg(value, argument) for value, argument in zip(args, schema.arguments)]

    def _op_name(self, target):
        schema = target._schema
        return schema.name + ("." + schema.overload_name if schema.overload_name else "")

    def lower(self):
        graph = self.gm.graph
        self.fusion = fusion.Plan(graph, self.device_type) if fusion.enabled() else None
        input_index = 0
        for node in graph.nodes:
            if node.op == "placeholder":
                val = node.meta.get("val")
                if not _is_tensor(val):
                    self.node_values[node] = val  # a non-tensor input (a constant under static shapes)
                    continue
                vid = self._value_for_input(val, input_index)
                self.inputs.append(vid)
                self.node_values[node] = vid
                input_index += 1
            elif node.op == "get_attr":
                attribute = getattr(self.gm, node.target)
                if not _is_tensor(attribute):
                    self.node_values[node] = attribute
                    continue
                self.node_values[node] = self._constant(attribute, node.meta.get("val"))
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self._outputs(node)
        return self._finish()

    def _value_for_input(self, val, index):
        # Every input is its own root, also when inputs shared a storage while tracing: a later
        # call may pass independent tensors (AOTAutograd gives mutated aliases one base input).
        key = _storage_key(val)
        vid = len(self.values)
        self.values.append(_Value(INPUT, val, index, val.untyped_storage().nbytes(), self._on_host(val)))
        if key in self.roots:
            self.ambiguous.add(key)
        else:
            self.roots[key] = vid
        return vid

    def _constant(self, tensor, val=None):
        """A constant: its bytes are uploaded to the device once, when the program loads. Where
        the graph has it (`val`, the node's traced value; else the tensor's own device) says
        whether it is a host value: a folded constant is computed and kept on the CPU
        (passes.fold_constants) but stands for the device tensor the eager op made."""
        on_host = self._on_host(val if _is_tensor(val) else tensor)
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            tensor = tensor.detach().cpu().contiguous()
            data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        index = len(self.constants)
        self.constants.append(data)
        vid = len(self.values)
        self.values.append(_Value(CONSTANT, tensor, index, len(data), on_host))
        return vid

    def _call(self, node):
        if self.fusion is not None:
            if node in self.fusion.inline:
                return  # computed inside the groups that read it
            if node in self.fusion.groups:
                self._fused(node, *self.fusion.groups[node])
                return
        target = node.target
        val = node.meta.get("val")
        if target is operator.getitem:
            base, index = node.args
            mapped = self.node_values[base]
            self.node_values[node] = mapped[index] if isinstance(mapped, (list, tuple)) else mapped
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise LoweringError(f"{node.format_node()}: not an ATen op ({target})")
        if target in IN_PROGRAM_COLLECTIVES:
            self._collective(node)
            return
        if target in VIEW_OPS:
            base_node = node.args[0]
            base = self.node_values[base_node]
            root = self._root_of(base)
            if self.values[root].kind != DYNAMIC:
                if isinstance(val, (list, tuple)):
                    self.node_values[node] = [self._view(root, t) for t in val]
                else:
                    self.node_values[node] = root if self._same_as_root(root, val) else self._view(root, val)
                return
        args = self._schema_args(node)
        draws = any("Generator" in str(a.type) for a in target._schema.arguments)
        saved_by = node.meta.get("neuron_rng_saved_by")
        if saved_by is not None and self.rng_state_at.get(saved_by, len(self.nodes)) <= self.last_draw:
            # the saved state must be the one this op draws from: no draw between the two
            raise LoweringError(f"{node.format_node()}: another random op runs between it and the state saved "
                                "for its recomputation")
        pairs, form = returned_values(target._schema, val, node)
        outputs = []
        mapped = []
        for returned, result in pairs:
            if not _is_tensor(result):
                outputs.append(-1)
                mapped.append(result)
                continue
            alias = returned.alias_info is not None and returned.alias_info.is_write
            if alias:  # in-place / out=: the argument itself
                outputs.append(-1)
                mapped.append(self._written_argument(node, returned))
                continue
            vid = self._value_for(result, node)
            outputs.append(vid)
            mapped.append(vid)
        self.nodes.append((self._op_name(target), args, outputs))
        if draws:
            self.last_draw = len(self.nodes) - 1
        if target is torch.ops.neuron.rng_state.default:
            self.rng_state_at[node] = len(self.nodes) - 1
        for vid in outputs:
            if vid >= 0:
                self.last_use.setdefault(self._root_of(vid), len(self.nodes) - 1)
        self.node_values[node] = None if form == "none" else mapped if form == "many" else mapped[0]

    def _collective(self, node):
        """A functional collective as in-place steps on memory other steps define (Note
        [Collectives in programs] in csrc/compile/ProgramCollectives.cpp): all_reduce(x) is a copy of x into
        the result's slot and all_reduce_ on it; all_gather_into_tensor / reduce_scatter_tensor
        write the result's slot through their _out forms; wait_tensor waits on its argument's
        memory and is that value. Every tensor a collective reads or writes stays alive (its
        bytes not reused) up to the wait, while the collective may still run."""
        target = node.target
        if target is _funcol.wait_tensor.default:
            vid = self.node_values[node.args[0]]
            args = self._schema_args(node)
            for pending in self.in_flight.pop(vid, []):
                self._use(pending)
            self.nodes.append((self._op_name(target), args, [-1]))
            self.node_values[node] = vid
            return
        val = node.meta.get("val")
        if not _is_tensor(val) or not val.is_contiguous():
            raise LoweringError(f"{node.format_node()}: a collective whose result is not one contiguous tensor")
        out = self._new_root(ARENA, val)
        source = self.node_values[node.args[0]]
        if not isinstance(source, int):
            raise LoweringError(f"{node.format_node()}: its input is not a tensor the program holds")
        self.first_use.setdefault(out, len(self.nodes))
        if target is _funcol.all_reduce.default:
            self._use(source)
            self._use(out)
            self.nodes.append(("aten::copy_", [(A_VALUE, out, 0.0, [], [], ""), (A_VALUE, source, 0.0, [], [], ""),
                                               (A_BOOL, 0, 0.0, [], [], "")], [-1]))
            in_place = _funcol.all_reduce_.default
            args = [(A_VALUE, out, 0.0, [], [], "")] + self._schema_args(node)[1:]
            self.nodes.append((self._op_name(in_place), args, [-1]))
            self.in_flight[out] = [out]
        else:
            out_form = {_funcol.all_gather_into_tensor.default: _funcol.all_gather_into_tensor_out.default,
                        _funcol.reduce_scatter_tensor.default: _funcol.reduce_scatter_tensor_out.default}[target]
            self._use(out)
            args = self._schema_args(node) + [(A_VALUE, out, 0.0, [], [], "")]
            self.nodes.append((self._op_name(out_form), args, [-1]))
            self.in_flight[out] = [out, source]
        self.node_values[node] = out

    def _fused(self, root, members, leaves):
        """One neuron::pointwise node for a group (Note [Fused pointwise kernels])."""
        ids = []
        for leaf in leaves:
            vid = self.node_values[leaf]
            self._use(vid)
            ids.append(vid)
        code, scalars = fusion.code_for(members, leaves, dtype_code)
        out = self._value_for(root.meta["val"], root)
        self.nodes.append(("neuron::pointwise", [(A_VALUES, 0, 0.0, ids, [], ""), (A_INTS, 0, 0.0, code, [], ""),
                                                 (A_DOUBLES, 0, 0.0, [], scalars, "")], [out]))
        self.last_use.setdefault(self._root_of(out), len(self.nodes) - 1)
        self.node_values[root] = out

    def _written_argument(self, node, returned):
        """The value of the argument an in-place / out= return aliases."""
        schema = node.target._schema
        for i, argument in enumerate(schema.arguments):
            info = argument.alias_info
            if info is not None and info.is_write and set(info.before_set) & set(returned.alias_info.before_set):
                value = node.args[i] if i < len(node.args) and not argument.kwarg_only else \
                    node.kwargs.get(argument.name)
                if isinstance(value, Node) and isinstance(self.node_values.get(value), int):
                    return self.node_values[value]
        raise LoweringError(f"{node.format_node()}: cannot tell which argument its result aliases")

    def _same_as_root(self, root, t):
        base = self.values[root].tensor
        return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) == \
            (base.dtype, tuple(base.shape), base.stride(), base.storage_offset())

    def _outputs(self, node):
        self.outputs = []     # value id per tensor output
        self.layout = []      # per graph output: ("value", position) or ("constant", python value)
        for item in node.args[0]:
            if item is None:
                self.layout.append(("constant", None))
                continue
            if isinstance(item, Node) and isinstance(item.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
                # A value the program computes on the host (item() with capture_scalar_outputs):
                # the layout holds only tensors and constants, so it cannot be returned.
                raise LoweringError(f"{item.format_node()}: the graph returns a scalar it computes "
                                    f"({item.meta['val']}); only tensors and constants can be program outputs")
            mapped = self.node_values[item] if isinstance(item, Node) else item
            if isinstance(mapped, int) and isinstance(item, Node) and _is_tensor(item.meta.get("val")):
                root = self._root_of(mapped)
                if self.values[root].kind == ARENA and not self.values[root].on_host:
                    self.values[root].kind = OUTPUT  # returned: a fresh buffer per call
                elif self.values[root].kind not in (INPUT, OUTPUT):
                    # a folded constant or a host value made in the graph: the caller gets a copy
                    mapped = self._copy_out(mapped)
                self.layout.append(("value", len(self.outputs)))
                self.outputs.append(mapped)
            else:
                self.layout.append(("constant", mapped))

    def _copy_out(self, vid):
        """A fresh output (device, or host for a host value) holding a copy of value `vid`."""
        t = self.values[vid].tensor
        out = len(self.values)
        self.values.append(_Value(OUTPUT, t, 0, t.untyped_storage().nbytes(), self.values[vid].on_host))
        self._use(vid)
        self.nodes.append(("aten::clone", [(A_VALUE, vid, 0.0, [], [], ""), (A_NONE, 0, 0.0, [], [], "")], [out]))
        return out

    def _finish(self):
        # The arena plan (memory_plan.py) of the planned roots: intermediates on the device.
        planned = [vid for vid, v in enumerate(self.values) if v.kind == ARENA and not v.on_host]
        defined = {}
        for position, (_, _, outputs) in enumerate(self.nodes):
            for vid in outputs:
                if vid >= 0:
                    defined.setdefault(self._root_of(vid), position)
        for vid, position in self.first_use.items():
            defined[vid] = min(position, defined.get(vid, position))
        if self.in_flight:
            raise LoweringError(f"collective result(s) {sorted(self.in_flight)} never waited for (wait_tensor)")
        lifetimes = [memory_plan.Lifetime(self.values[vid].bytes, defined.get(vid, 0),
                                          self.last_use.get(vid, defined.get(vid, 0))) for vid in planned]
        arena = memory_plan.plan(lifetimes)
        for vid, offset, size in zip(planned, arena.offsets, arena.sizes):
            self.values[vid].index = offset
            self.values[vid].bytes = size
        return {
            "name": self.name,
            "values": [self._describe(v) for v in self.values],
            "inputs": self.inputs,
            "constants": self.constants,
            "nodes": [{"op": op, "args": args, "outputs": outputs} for op, args, outputs in self.nodes],
            "outputs": self.outputs,
            "arena_bytes": arena.arena_bytes,
            "metadata": {k: str(v) for k, v in self.metadata.items()},
        }

    def _describe(self, v):
        t = v.tensor
        return {"kind": v.kind, "index": v.index, "bytes": v.bytes, "on_host": v.on_host, "dtype": dtype_code(t.dtype),
                "sizes": list(t.shape), "strides": list(t.stride()), "offset": t.storage_offset()}


def returned_values(schema, val, node=None):
    """The results of a node of op `schema` whose traced value is `val`, each paired with the
    return it belongs to, and the form of the node's own value: "none" (no return, as
    _assert_async: the value is None), "one" (the single result's) or "many" (a list, one per
    result; a single Tensor[] return gives one per element)."""
    returns = list(schema.returns)
    if not returns:
        return [], "none"
    many = isinstance(val, (list, tuple))
    results = list(val) if many else [val]
    if len(returns) == 1 and isinstance(returns[0].type, torch.ListType) and many:
        returns = returns * len(results)
    if len(returns) != len(results) or (len(returns) > 1 and not many):
        where = node.format_node() if node is not None else str(schema)
        raise LoweringError(f"{where}: {len(results)} traced result(s) for {len(returns)} return(s) of {schema.name}")
    return list(zip(returns, results)), "many" if many else "one"


def lower(gm, name, metadata=None, device_type="neuron"):
    """(program description for _C.Program.from_desc, output layout)."""
    lowering = Lowering(gm, device_type, name, metadata)
    program = lowering.lower()
    return program, lowering.layout
