"""Pointwise fusion (Note [Fused pointwise kernels], csrc/compile/Pointwise.h): which nodes of
the ATen graph become one "neuron::pointwise" program node, and its code.

A pointwise node whose every user is itself fusable is not materialised: it is computed
inside each group that reads it (recomputed when several do: cheap elementwise work against
one more kernel launch and buffer), unless several groups would recompute it and it has several
inputs (then recomputing reads more than materialising: a residual stream's adds). A fusable node with a user that is not fusable, or that
the graph returns, is a group's root: its group is its closure over non-materialised
pointwise arguments, bounded by MAX_INSTRUCTIONS (beyond, the node is materialised). Groups
of one op stay the ATen op (its direct kernel)."""
import os

import torch

aten = torch.ops.aten

ADD, SUB, MUL, NEG, RSQRT, SQUARE, CONVERT, WHERE = range(8)
MAX_INSTRUCTIONS = 16
MAX_INPUTS = 12
# float16 is left to ATen: its kernels round some scalar operands to half first (differs by
# an ulp near zero).
FLOATS = (torch.float32, torch.bfloat16)
_OPCODES = {aten.add.Tensor: ADD, aten.sub.Tensor: SUB, aten.mul.Tensor: MUL, aten.neg.default: NEG,
            aten.rsqrt.default: RSQRT, aten.pow.Tensor_Scalar: SQUARE, aten._to_copy.default: CONVERT,
            aten.where.self: WHERE}


def enabled():
    """NEURON_SIM_FUSION=0 turns fusion off (to compare, or to isolate a fault)."""
    return os.environ.get("NEURON_SIM_FUSION", "1") != "0"


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _device_tensor(val, device_type, dtypes=FLOATS):
    return isinstance(val, torch.Tensor) and val.device.type == device_type and val.dtype in dtypes


def fusable(node, device_type):
    """Whether `node` is an op the fused kernel computes exactly as ATen does."""
    if node.op != "call_function" or node.target not in _OPCODES:
        return False
    val = _val(node)
    if not _device_tensor(val, device_type):
        return False
    target = node.target
    args = list(node.args)
    if target in (aten.add.Tensor, aten.sub.Tensor):
        if node.kwargs.get("alpha", 1) != 1 or (len(args) > 2 and args[2] != 1):
            return False
        args = args[:2]
    elif target is aten.rsqrt.default and val.dtype != torch.float32:
        return False  # ATen's vectorised reduced-precision rsqrt is not 1/sqrt rounded once
    elif target is aten.pow.Tensor_Scalar:
        if len(args) != 2 or args[1] != 2 or node.kwargs:
            return False
        args = args[:1]
    elif target is aten._to_copy.default:
        if len(args) != 1 or set(node.kwargs) - {"dtype", "device", "layout"} or \
                node.kwargs.get("layout") not in (None, torch.strided):
            return False
        source = _val(args[0])
        if not isinstance(source, torch.Tensor) or source.device != val.device:
            return False
    elif node.kwargs:
        return False
    scalars = 0
    for index, arg in enumerate(args):
        if isinstance(arg, torch.fx.Node):
            dtypes = (torch.bool,) if target is aten.where.self and index == 0 else FLOATS
            if not _device_tensor(_val(arg), device_type, dtypes):
                return False
        elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
            scalars += 1
        else:
            return False
    return scalars <= 1 and (target is not aten.where.self or isinstance(args[0], torch.fx.Node))


class Plan:
    """groups: root node -> (members in graph order, root last; leaf inputs in order);
    inline: the nodes computed only inside groups (never materialised)."""

    def __init__(self, graph, device_type):
        nodes = list(graph.nodes)
        self._order = {n: i for i, n in enumerate(nodes)}
        candidates = {n for n in nodes if fusable(n, device_type)}
        returned = set()
        for n in nodes:
            if n.op == "output":
                torch.fx.node.map_arg(n.args, returned.add)
        materialised = {n for n in candidates if n in returned or any(u not in candidates for u in n.users)}
        inline = candidates - materialised
        self._materialise_shared(inline, materialised)
        # Every inlined node is computed by each group that reaches it; a group too large
        # materialises its root's inlined arguments, until every group fits.
        while True:
            groups, changed = {}, False
            for root in sorted(materialised, key=self._order.__getitem__):
                members = self._closure(root, inline)
                leaves = self._leaves(members, inline)
                if len(members) > MAX_INSTRUCTIONS or len(leaves) > MAX_INPUTS:
                    for arg in root.args:
                        if isinstance(arg, torch.fx.Node) and arg in inline:
                            inline.discard(arg)
                            materialised.add(arg)
                            changed = True
                    continue
                if len(members) >= 2:
                    groups[root] = (members, leaves)
            if not changed:
                break
        self.groups = groups
        self.inline = inline

    def _materialise_shared(self, inline, materialised):
        """Recomputing a node in each group that reads it reads its inputs once per group: free for
        a node of one input (a convert read twice instead of written once and read twice), but a
        node of several inputs that reaches several groups' roots is materialised, or a chain of
        such nodes (a residual stream of adds, each read by the next layer's norm and add) would be
        recomputed by ever larger groups, reading every earlier input again. A node read twice
        inside one group (a diamond) stays inline: it is computed once there."""
        changed = True
        while changed:
            changed = False
            for node in sorted(inline, key=self._order.__getitem__):
                if len(node.users) > 1 and len(self._roots_reached(node, inline, materialised)) > 1 and \
                        len(self._leaves(self._closure(node, inline), inline)) > 1:
                    inline.discard(node)
                    materialised.add(node)
                    changed = True

    @staticmethod
    def _roots_reached(node, inline, materialised):
        """The groups' roots whose closures hold `node`: its users' users, through inlined nodes."""
        roots, seen, stack = set(), {node}, [node]
        while stack:
            for user in stack.pop().users:
                if user in inline:
                    if user not in seen:
                        seen.add(user)
                        stack.append(user)
                elif user in materialised:
                    roots.add(user)
        return roots

    @staticmethod
    def _leaves(members, inline):
        """The inputs of a group of `members`: their arguments computed outside it, in order."""
        leaves = []
        for m in members:
            for arg in m.args:
                if isinstance(arg, torch.fx.Node) and arg not in inline and arg is not m and arg not in leaves:
                    leaves.append(arg)
        return leaves

    def _closure(self, root, inline):
        """root and its inlined ancestors, in graph order (root last)."""
        seen = {root}
        stack = [root]
        while stack:
            n = stack.pop()
            for arg in n.args:
                if isinstance(arg, torch.fx.Node) and arg in inline and arg not in seen:
                    seen.add(arg)
                    stack.append(arg)
        return sorted(seen, key=self._order.__getitem__)


def code_for(members, leaves, dtype_code):
    """(code integers, scalars) of a group: one instruction per member, the root last."""
    register = {leaf: i for i, leaf in enumerate(leaves)}
    code, scalars = [], []
    for k, node in enumerate(members):
        opcode = _OPCODES[node.target]
        operands = []
        scalar = 0.0
        args = node.args[:2] if opcode in (ADD, SUB) else node.args[:1] if opcode == SQUARE else node.args
        for arg in args:
            if isinstance(arg, torch.fx.Node):
                operands.append(register[arg])
            else:
                operands.append(-1)
                scalar = float(arg)
                if opcode in (ADD, SUB) and _val(node).dtype == torch.bfloat16:
                    # ATen's bfloat16 add/sub rounds a Python scalar to bfloat16 first (its mul
                    # keeps it in float): the fused code must add the same number.
                    scalar = float(torch.tensor(scalar, dtype=torch.bfloat16))
        operands += [-1] * (3 - len(operands))
        code += [opcode] + operands + [dtype_code(_val(node).dtype)]
        scalars.append(scalar)
        register[node] = len(leaves) + k
    return code, scalars

