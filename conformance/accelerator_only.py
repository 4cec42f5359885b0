"""Accelerator-only ATen ops: a CUDA kernel and no CPU kernel, and what neuron does with each.

The neuron device computes with ATen's CPU kernels (README, "Kernels"), so an op that
PyTorch implements for accelerators only cannot run through the generic path. Such an op
matters when PyTorch's own code picks it for a non-CPU device (e.g. RNN.cpp runs the fused
LSTM/GRU cells on "CUDA, XPU or PrivateUse1" tensors; SyncBatchNorm runs on "cuda", "xpu",
"hpu" or the PrivateUse1 device): then ordinary programs reach it on neuron, and the device
needs a kernel of its own. The class is every op of PyTorch's native_functions.yaml (the copy
inside torchgen, so the installed version's) whose dispatch table has CUDA and neither CPU
nor a Composite* kernel; each is classified below:

- "kernel": PyTorch's code selects it for the neuron device; neuron has a kernel.
- "kernel, called directly": PyTorch's code does not select it (any more), but it is a
  public torch function; neuron has a kernel.
- "not reached": the selection is guarded by a CUDA-only condition (cuDNN, MIOpen, a CUDA
  tensor check) or by a per-device choice that neuron answers itself, so it never happens on
  neuron.
- "called directly": only an explicit call reaches it (private APIs, CUDA-specific
  features); neuron raises a NotImplementedError naming the op (no kernel).

tests/kernels/test_accelerator_only.py checks that this table covers exactly the installed
PyTorch's class, that every "kernel" op has a PrivateUse1 kernel, and that PyTorch's
accelerator paths run on neuron. `section()` renders the table for COVERAGE.md.
"""

from __future__ import annotations

import pathlib

KERNEL = "kernel"
KERNEL_DIRECT = "kernel, called directly"
NOT_REACHED = "not reached"
DIRECT = "called directly"

# Groups of ops: (category, ops, how PyTorch selects them, what neuron does).
GROUPS = [
    (KERNEL,
     ["_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell",
      "_thnn_fused_gru_cell_backward"],
     "RNN.cpp's LSTMCell / GRUCell use them for CUDA, XPU and PrivateUse1 inputs "
     "(`is_privateuseone()`): every step of nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell (packed or not); the "
     "backward ops come from derivatives.yaml (`_thnn_fused_lstm_cell_backward` and the "
     "`_thnn_differentiable_*` backward ops are composite)",
     "csrc/kernels/Recurrent.cpp: CUDA's outputs and workspace layouts, float32 compute for "
     "half/bfloat16; tests/kernels/test_rnn.py"),
    (KERNEL,
     ["batch_norm_stats", "batch_norm_elemt", "batch_norm_elemt.out", "batch_norm_gather_stats",
      "batch_norm_gather_stats_with_counts", "batch_norm_backward_reduce", "batch_norm_backward_elemt"],
     "nn.SyncBatchNorm (torch/nn/modules/batchnorm.py, _functions.py) in training with a process "
     "group of more than one rank, for \"cuda\", \"hpu\", \"xpu\" and the PrivateUse1 device",
     "csrc/kernels/AcceleratorOnly.cpp: CUDA's formulas and dtypes (statistics in float32 for "
     "half/bfloat16); tests/kernels/test_accelerator_only.py runs SyncBatchNorm's autograd function over "
     "a simulated two-rank group"),
    (KERNEL,
     ["record_stream"],
     "`Tensor.record_stream`, called by PyTorch's distributed code (FSDP, DDP, collectives) on "
     "tensors of non-CPU devices",
     "csrc/kernels/Minimal.cpp (buffer reuse waits for the recorded stream)"),
    (KERNEL_DIRECT,
     ["_fused_dropout", "_masked_scale"],
     "no longer selected: PyTorch 2.13's dropout uses native_dropout on accelerators; "
     "`torch._fused_dropout` (p = probability to keep; uint8 mask) and its backward "
     "`_masked_scale` (derivatives.yaml) remain public",
     "csrc/kernels/AcceleratorOnly.cpp (its mask from bernoulli_: the device's Philox generator)"),
    (NOT_REACHED,
     ["_cudnn_rnn", "_cudnn_rnn_backward", "_cudnn_rnn_flatten_weight", "_cudnn_init_dropout_state",
      "_use_cudnn_ctc_loss", "_use_cudnn_ctc_loss.Tensor", "_cudnn_ctc_loss", "_cudnn_ctc_loss.Tensor",
      "cudnn_affine_grid_generator", "cudnn_affine_grid_generator_backward", "cudnn_batch_norm",
      "cudnn_batch_norm.out", "cudnn_batch_norm_backward", "cudnn_convolution", "cudnn_convolution.out",
      "cudnn_convolution_transpose", "cudnn_convolution_relu", "cudnn_convolution_add_relu",
      "cudnn_grid_sampler", "cudnn_grid_sampler_backward"],
     "cuDNN: chosen only for CUDA tensors (`cudnn_is_acceptable`, `use_cudnn`, the CTC loss's "
     "and RNNBase.flatten_parameters' device checks)",
     "the device-generic paths run instead (plain RNN cells, ctc_loss, affine_grid, "
     "grid_sampler, native batch norm, convolution_overrideable)"),
    (NOT_REACHED,
     ["miopen_batch_norm", "miopen_batch_norm_backward", "miopen_convolution",
      "miopen_convolution_transpose", "miopen_depthwise_convolution", "miopen_convolution_relu",
      "miopen_convolution_add_relu", "miopen_rnn", "miopen_rnn_backward", "_use_miopen_ctc_loss",
      "_use_miopen_ctc_loss.Tensor", "miopen_ctc_loss", "miopen_ctc_loss.Tensor"],
     "MIOpen (ROCm): chosen only for CUDA (HIP) tensors",
     "as above"),
    (NOT_REACHED,
     ["_conv_depthwise2d", "_conv_depthwise2d.out", "conv_depthwise3d"],
     "Convolution.cpp's backend choice picks them for CUDA tensors only; other devices get "
     "ConvBackend::Overrideable",
     "convolution_overrideable (csrc/kernels/Accelerator.cpp) runs ATen's CPU convolution"),
    (NOT_REACHED,
     ["_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention.quantized",
      "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention",
      "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention",
      "_scaled_dot_product_cudnn_attention_backward", "_flash_attention_forward.quantized",
      "_efficient_attention_forward", "_efficient_attention_backward",
      "_cudnn_attention_forward", "_cudnn_attention_backward", "_fill_mem_eff_dropout_mask_"],
     "scaled_dot_product_attention picks its kernel with `_fused_sdp_choice`, a per-device "
     "dispatch stub (the same class through a stub: without neuron's registration it would fail)",
     "neuron registers the stub (csrc/kernels/Accelerator.cpp): the overrideable fused op or "
     "the math decomposition, never these (the quantized FP8 overload of _flash_attention_forward "
     "takes descale factors, CUDA's FlashAttention 3 only)"),
    (KERNEL,
     ["_flash_attention_forward", "_flash_attention_backward", "_flash_attention_forward_no_dropout_inplace"],
     "variable-length attention calls them by name for every device but cuDNN's: "
     "`torch.nn.attention.varlen.varlen_attn` (forward, and backward through its autograd) and "
     "`varlen_attn_out`; torchtitan's VarlenAttention (`llama3_debugmodel_varlen_attn`)",
     "csrc/kernels/VarlenAttention.cpp: FlashAttention 2's contract (packed or dense layouts, grouped "
     "KV heads, bottom-right causal and sliding windows, seqused_k, logsumexp +inf for a row without "
     "keys), float32 compute per sequence; dropout, ALiBi and paged KV refused with an error; "
     "tests/kernels/test_varlen_attention.py"),
    (NOT_REACHED,
     ["_fused_rms_norm_backward"],
     "the autograd formula of `_fused_rms_norm`, used only where the device has a "
     "`_fused_rms_norm` kernel",
     "neuron has none: `_fused_rms_norm` runs its CompositeImplicitAutograd decomposition, whose "
     "backward is ordinary ops"),
    (DIRECT,
     ["mm.dtype", "mm.dtype_out", "bmm.dtype", "bmm.dtype_out", "addmm.dtype", "addmm.dtype_out",
      "baddbmm.dtype", "baddbmm.dtype_out"],
     "the `out_dtype=` overloads of the matmuls: explicit calls only",
     "no kernel: NotImplementedError naming the op"),
    (DIRECT,
     ["_cslt_compress", "_cslt_sparse_mm", "_cslt_sparse_mm_search", "_sparse_semi_structured_tile",
      "_sparse_semi_structured_apply", "_sparse_semi_structured_apply_dense",
      "_sparse_semi_structured_linear", "_sparse_semi_structured_mm", "_sparse_semi_structured_addmm",
      "_to_sparse_semi_structured", "_mixed_dtypes_linear"],
     "2:4 semi-structured sparsity (cuSPARSELt, CUTLASS) and CUTLASS mixed-dtype linear: "
     "`to_sparse_semi_structured`, explicit calls",
     "no kernel (sparse layouts are not supported on neuron)"),
    (DIRECT,
     ["_convert_weight_to_int4pack", "_weight_int4pack_mm"],
     "int4 weight-only quantization; libraries pick the `_for_cpu` variants for CPU tensors "
     "and these for CUDA/MPS by device type",
     "no kernel"),
    (DIRECT,
     ["_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_triton_scaled_dot_attention",
      "_triton_multi_head_attention"],
     "float8 grouped matmul (MoE libraries) and Triton attention: explicit calls",
     "no kernel"),
    (DIRECT,
     ["_philox_key_split", "_philox_key_fold_in", "_philox_normal_", "_philox_uniform_"],
     "torch.func._random (experimental stateless RNG; fails on CPU as well)",
     "no kernel"),
]

OPS = {op: (category, selected, neuron) for category, ops, selected, neuron in GROUPS for op in ops}
assert len(OPS) == sum(len(ops) for _, ops, _, _ in GROUPS), "an op is listed twice"


def installed_class() -> list[str]:
    """The installed PyTorch's accelerator-only ops ("name" or "name.overload"), in
    native_functions.yaml's order."""
    import torchgen
    import yaml

    path = pathlib.Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    ops = []
    for entry in yaml.load(path.read_text(), Loader=loader):
        dispatch = entry.get("dispatch")
        if not dispatch:
            continue
        keys = {key.strip() for group in dispatch for key in group.split(",")}
        if "CUDA" in keys and "CPU" not in keys and not any(k.startswith("Composite") for k in keys):
            ops.append(entry["func"].split("(", 1)[0])
    return ops


def section() -> list[str]:
    """The COVERAGE.md section (Markdown lines)."""
    counts = {c: sum(len(ops) for cat, ops, _, _ in GROUPS if cat == c)
              for c in (KERNEL, KERNEL_DIRECT, NOT_REACHED, DIRECT)}
    out = ["## Accelerator-only ops\n",
           "ATen ops with a CUDA kernel and no CPU kernel (the installed native_functions.yaml: "
           "CUDA in the dispatch table, neither CPU nor Composite*). The simulated device computes "
           "with CPU kernels, so these need a kernel of their own wherever PyTorch's code picks "
           "them for a non-CPU device (issue 11: nn.LSTM and nn.GRU failed on the fused cells). "
           f"{len(OPS)} ops: {counts[KERNEL]} selected by PyTorch for the device and given neuron "
           f"kernels, {counts[KERNEL_DIRECT]} given kernels though only called directly, "
           f"{counts[NOT_REACHED]} never reached on neuron, {counts[DIRECT]} reached only by explicit "
           "calls (NotImplementedError naming the op). Under `torch.compile(backend=\"neuron\")` the "
           "ops with kernels are decomposed into the ops their kernels compute "
           "(`python/torch_neuron_sim/compile/decompositions.py`). Table: "
           "`conformance/accelerator_only.py`; checks: `tests/kernels/test_accelerator_only.py`, "
           "`tests/kernels/test_rnn.py`.\n",
           "| ops | neuron | how PyTorch selects them | what neuron does |",
           "|---|---|---|---|"]
    for category, ops, selected, neuron in GROUPS:
        assert "|" not in selected + neuron, "a table cell cannot hold '|'"
        out.append(f"| {', '.join(f'`{op}`' for op in ops)} | {category} | {selected} | {neuron} |")
    out.append("")
    out.append("Related, not in this class: nn.TransformerEncoder's fast path (eval, "
               "`enable_nested_tensor=True` with a padding mask) also runs on the PrivateUse1 device and "
               "builds a nested tensor (`_nested_tensor_from_mask`, which has a CPU kernel); nested "
               "tensors of the strided layout run on the zero-copy path with the CPU's nested kernels "
               "(Note [Nested tensors] in `csrc/kernels/Nested.cpp`), so that path gives the CPU's "
               "result (`tests/kernels/test_nested.py`). "
               "Found by the same survey and fixed: under a dispatch mode (an op census, for one) "
               "F.ctc_loss takes its composite path, `_ctc_loss.Tensor`, which CUDA runs with CPU length "
               "tensors (the usual way to pass them; cuDNN requires it); neuron refused them as a mix of "
               "devices and now accepts them, as CUDA does (the lengths only: CPU `log_probs` or "
               "`targets` are refused, as CUDA's kernel does).\n")
    return out
