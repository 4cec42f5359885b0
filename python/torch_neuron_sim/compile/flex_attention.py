"""Note [FlexAttention on neuron]
torch.nn.attention.flex_attention runs as a higher-order operator (HOP), flex_attention, whose
body is the user's score_mod and the block mask's mask_mod as graphs; its backward is a second
HOP, flex_attention_backward, given those graphs and the score_mod's joint graph.

Eager: the HOPs' dense implementations (torch/_higher_order_ops/flex_attention.py: sdpa_dense,
sdpa_dense_backward, registered for CompositeExplicitAutograd) and their autograd rule
(DispatchKey.Autograd) are device-agnostic. register() names them as the forward HOP's kernel
for our key (py_impl(DispatchKey.PrivateUse1), the extension point a device has for a HOP),
after one check: kernel_options BACKEND="FLASH" (FlashAttention's CUDA kernels) is refused, as
the entry point would read the dense implementation's log2 logsumexp as a natural one. The only
refusal of the device is in the Python entry point (a hard-coded list in its _validate_device):
patch 4 of Note [Patches of torch internals] (torch_patches.py) accepts "neuron" there, with
backward (the CPU is refused backward there).

Compiled: AOTAutograd leaves the HOPs in the forward, backward and inference graphs (the
Autograd rule splits them; Inductor would lower them to its own kernels). A program runs ATen
ops, so inline_flex_attention (a pass, first of passes.run_passes) replaces each HOP node by
the ATen ops of the same dense implementation eager runs, traced with the node's own fake
values (make_fx under the graph's fake mode; vmap over score_mod and mask_mod traces to
batched ATen ops): the compiled graph computes what eager computes, and the forward keeps only
the output and the logsumexp for the backward, which recomputes the scores, as the HOP does.
Like the eager implementation, this materializes the [B, H, Q, KV] scores: the block mask's
sparsity (which blocks are skipped) is not used, its mask_mod is applied densely."""
import operator

from torch._C import DispatchKey
from torch._higher_order_ops.flex_attention import (flex_attention, flex_attention_backward, sdpa_dense,
                                                    sdpa_dense_backward)
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

# Positions of the HOPs' arguments (graphs call them positionally):
# flex_attention(query, key, value, score_mod, block_mask, scale, kernel_options, score_mod buffers,
#                mask_mod buffers)
# flex_attention_backward(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph,
#                         joint_graph, block_mask, scale, kernel_options, score_mod buffers, mask_mod buffers)
KERNEL_OPTIONS = 6
BACKWARD_JOINT_GRAPH, BACKWARD_SCORE_MOD_BUFFERS = 8, 12


def check_kernel_options(kernel_options):
    """Raises for kernel options the neuron device cannot honour (Note [FlexAttention on neuron])."""
    if kernel_options.get("BACKEND") == "FLASH":
        raise NotImplementedError(
            "flex_attention(kernel_options={'BACKEND': 'FLASH'}) selects FlashAttention's CuTe DSL kernels, "
            "which run on CUDA only; on the neuron device flex_attention runs its dense implementation, eager or "
            "compiled: leave BACKEND out or pass 'AUTO'")


def _neuron_flex_attention(query, key, value, score_mod, block_mask, scale, kernel_options,
                           score_mod_other_buffers=(), mask_mod_other_buffers=()):
    check_kernel_options(kernel_options)
    return sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
                      mask_mod_other_buffers)


def register():
    """The forward HOP's eager kernel for the neuron device (PrivateUse1). Idempotent."""
    if DispatchKey.PrivateUse1 not in flex_attention.py_kernels:
        flex_attention.py_impl(DispatchKey.PrivateUse1)(_neuron_flex_attention)


def _resolved(gm, args):
    """The node's arguments with subgraphs (get_attr of a GraphModule) as the modules themselves."""
    def resolve(a):
        if isinstance(a, Node) and a.op == "get_attr" and isinstance(getattr(gm, a.target, None), GraphModule):
            return getattr(gm, a.target)
        return a
    return pytree.tree_map(resolve, args)


def _traced(dense, args, buffers_needing_grad=()):
    """(ATen graph of `dense` on the node's arguments, the argument nodes it takes, in order).
    `buffers_needing_grad`: for the backward, whether each score_mod buffer gets a gradient."""
    leaves, spec = pytree.tree_flatten(args)
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Node)]

    def call(*tensors):
        filled = list(leaves)
        for position, tensor in zip(positions, tensors):
            filled[position] = tensor
        filled = list(pytree.tree_unflatten(filled, spec))
        if buffers_needing_grad:
            # The dense backward makes a gradient for the buffers that require grad; values in
            # AOTAutograd's graphs do not (_buffers_needing_grad says which did).
            buffers = filled[BACKWARD_SCORE_MOD_BUFFERS]
            filled[BACKWARD_SCORE_MOD_BUFFERS] = tuple(b.detach().requires_grad_() if needs else b
                                                       for b, needs in zip(buffers, buffers_needing_grad))
        return dense(*filled)
    values = [leaves[i].meta["val"] for i in positions]
    return make_fx(call, tracing_mode="fake")(*values), [leaves[i] for i in positions]


def _inline(gm, node):
    """Replaces `node` (a HOP) by its dense implementation's ATen ops."""
    args = _resolved(gm, node.args)
    if node.target is flex_attention:
        check_kernel_options(args[KERNEL_OPTIONS])
        traced, arguments = _traced(sdpa_dense, args)
    else:
        traced, arguments = _traced(sdpa_dense_backward, args, _buffers_needing_grad(args[BACKWARD_JOINT_GRAPH]))
    graph = gm.graph
    env = {}
    placeholders = iter(arguments)
    result = None
    with graph.inserting_before(node):
        for inner in traced.graph.nodes:
            if inner.op == "placeholder":
                env[inner] = next(placeholders)
            elif inner.op == "get_attr":  # a constant the implementation made (torch.tensor(-inf))
                name = _free_name(gm, f"_flex_{inner.target}")
                setattr(gm, name, getattr(traced, inner.target))  # as make_fx keeps its constants
                env[inner] = graph.create_node("get_attr", name)
                env[inner].meta = dict(inner.meta)
            elif inner.op == "output":
                result = pytree.tree_map(lambda n: env[n] if isinstance(n, Node) else n, inner.args[0])
            else:
                env[inner] = graph.node_copy(inner, lambda n: env[n])
    _replace_results(node, result)
    graph.erase_node(node)


def _buffers_needing_grad(joint_graph):
    """Whether each score_mod buffer required grad when the forward ran: the score_mod's joint
    graph returns the gradients of (score, b, h, q_idx, kv_idx, *buffers), None where none was
    required (torch/_higher_order_ops/flex_attention.py, create_fw_bw_graph)."""
    if joint_graph is None:  # the dense backward makes it, from values that require no grad here
        return ()
    output = next(n for n in joint_graph.graph.nodes if n.op == "output")
    return tuple(grad is not None for grad in output.args[0][5:])


def _free_name(gm, base):
    name, n = base, 0
    while hasattr(gm, name):
        n += 1
        name = f"{base}_{n}"
    return name


def _replace_results(node, result):
    """The HOP's results are read through getitem (nested for the backward's buffer gradients):
    each reader gets the inlined node (or structure) it stands for."""
    for user in list(node.users):
        if user.op != "call_function" or user.target is not operator.getitem:
            raise RuntimeError(f"{user.format_node()}: reads {node.name}'s results other than by index")
        value = result[user.args[1]]
        if isinstance(value, Node):
            user.replace_all_uses_with(value)
        else:
            _replace_results(user, value)
        user.graph.erase_node(user)


def inline_flex_attention(gm):
    """Note [FlexAttention on neuron]: every flex_attention / flex_attention_backward node of an
    ATen graph (AOTAutograd's) becomes the ATen ops of its dense implementation. Returns how many
    were inlined. The subgraphs it called stay as (unused) attributes."""
    nodes = [n for n in gm.graph.nodes
             if n.op == "call_function" and n.target in (flex_attention, flex_attention_backward)]
    for node in nodes:
        _inline(gm, node)
    if nodes:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return len(nodes)
