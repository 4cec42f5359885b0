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

Compiled: not yet (AOTAutograd leaves the HOPs in its graphs; a program runs ATen ops)."""
from torch._C import DispatchKey
from torch._higher_order_ops.flex_attention import flex_attention, sdpa_dense


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

