"""Note [Graphs with collectives]
A program runs the functional all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
wait_tensor itself (Note [Collectives in programs] in csrc/compile/ProgramCollectives.cpp): a graph whose
collectives are only those is one program. A graph with any other collective (all_to_all_single,
broadcast, DTensor's own ops) is cut at it: each maximal run of other
nodes becomes a segment compiled into a program as any graph is; the collectives (with
wait_tensor and the getitems of their results) run between the segments, through the dispatcher,
in the graph's order. The cut keeps the graph's node order (split_module with
keep_original_order), so work the graph placed between a collective and its wait_tensor stays
there: it may overlap the collective.

What a segment receives and returns is what split_module makes of the graph: the values
defined before it and used in or after it. Before this, such graphs ran op by op (a decode step
of a ~5M-parameter Llama on 2 ranks ran at a third of one rank's speed compiled, slower than
eager); see BENCHMARKS.md for what the cut gives."""
import operator
import os

import torch
from torch.fx.passes.split_module import split_module

from .. import _C
from .lowering import IN_PROGRAM_COLLECTIVES

COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor")


def collectives_in_programs():
    """NEURON_SIM_COLLECTIVES_IN_PROGRAMS=0 cuts graphs at every collective (as before programs ran
    them): for comparing the two."""
    return os.environ.get("NEURON_SIM_COLLECTIVES_IN_PROGRAMS", "1") != "0"


def is_collective(node, every=False):
    """A collective the graph is cut at: one a program does not run (Note [Collectives in
    programs]), or with `every` any collective."""
    if node.op != "call_function" or getattr(node.target, "namespace", None) not in COLLECTIVE_NAMESPACES:
        return False
    return every or not (collectives_in_programs() and node.target in IN_PROGRAM_COLLECTIVES)


def collectives(gm, every=False):
    return [node for node in gm.graph.nodes if is_collective(node, every)]


# Note [Graphs cut at opaque ops]
# A custom op that writes to its arguments (vLLM's unified_attention_with_output, which reads its
# paged KV cache and metadata from the forward context, not from the graph) reaches the backend
# functionalized, as a higher-order auto_functionalized node: no program step can run it. Such a
# graph is cut at it as at a collective: the segments around it run as programs, the op itself
# through the dispatcher between them (vLLM's own compiler cuts its graphs at its attention ops,
# its "splitting ops", the same way). Before, the whole graph failed to compile.
OPAQUE_OPS = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)


def is_opaque(node):
    return node.op == "call_function" and node.target in OPAQUE_OPS


def opaque(gm):
    return [node for node in gm.graph.nodes if is_opaque(node)]


def runs_dispatched(node, every=False):
    """A node that runs through the dispatcher between a cut graph's programs."""
    return is_collective(node, every) or is_opaque(node)


def _partitions(gm, every=False):
    """Node -> partition number, in graph order: a new partition starts wherever a node changes
    between running through the dispatcher (a collective) and running in a program. A getitem
    goes with the node it takes from (a program never receives a tuple). Returns the map and the
    partitions that run through the dispatcher (collectives and opaque ops)."""
    partition, dispatched, number, current = {}, set(), -1, None
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and node.args[0] in partition:
            partition[node] = partition[node.args[0]]
            continue
        eager = runs_dispatched(node, every)
        if eager != current:
            number, current = number + 1, eager
            if eager:
                dispatched.add(number)
        partition[node] = number
    return partition, dispatched


class Segment(torch.nn.Module):
    """A compiled segment in the cut graph: runs its program, returns its outputs as a tuple."""

    def __init__(self, code):
        super().__init__()
        self.code = code

    def forward(self, *args):
        return tuple(self.code(*args))


class ProgramSteps(torch.nn.Module):
    """A partition of opaque ops in the cut graph: run through the dispatcher, costed on the
    device clock as steps of the graph's one program (Note [Program steps run through the
    dispatcher] in csrc/DeviceClock.h)."""

    def __init__(self, partition):
        super().__init__()
        self.partition = partition

    def forward(self, *args):
        _C._enter_program_steps()
        try:
            return self.partition(*args)
        finally:
            _C._leave_program_steps()


def split_at_collectives(gm, compile_segment, every=False, codegen=None):
    """The graph cut at its collectives (Note [Graphs with collectives]): a GraphModule whose
    compute segments are Segment modules made by compile_segment(segment_gm, example_inputs, index),
    and whose collective partitions are GraphModules run by the dispatcher; so is a segment
    compile_segment gives None for (one the compiler cannot lower runs op by op, as every graph
    with collectives did before the cut). `every`: cut also at the collectives programs run;
    `codegen`: the cut graph's (set before its one recompile)."""
    partition, dispatched = _partitions(gm, every)
    cut = split_module(gm, None, lambda node: partition[node], keep_original_order=True, tuple_return=True)
    index = 0
    for node in cut.graph.nodes:
        if node.op != "call_module":
            continue
        number = int(node.target.rsplit("_", 1)[1])
        if number in dispatched:
            partition_gm = getattr(cut, node.target)
            if any(is_opaque(n) for n in partition_gm.graph.nodes):
                setattr(cut, node.target, ProgramSteps(partition_gm))
            continue
        segment = getattr(cut, node.target)
        inputs = [p.meta.get("val") for p in segment.graph.nodes if p.op == "placeholder"]
        code = compile_segment(segment, inputs, index)
        if code is not None:
            setattr(cut, node.target, Segment(code))
        index += 1
    if codegen is not None:
        cut.graph.set_codegen(codegen)
    cut.recompile()
    return cut
