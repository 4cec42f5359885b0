"""Decompositions applied while AOTAutograd traces a graph for the neuron device, for ops whose
neuron kernels are ours rather than the CPU's (a program runs its ops on host views with the
CPU's kernels):
- the device's fused attention op (the overrideable SDPA, Accelerator.cpp) becomes the CPU
  flash-attention op it computes with, forward and backward;
- the accelerator-only ops PyTorch selects for the device (no CPU kernel: Recurrent.cpp,
  AcceleratorOnly.cpp; COVERAGE.md "Accelerator-only ops") become the plain ops their kernels
  compute, with the same rules (half and bfloat16 computed in float32, CUDA's outputs);
- FlashAttention's ops and varlen_attn's custom ops that call them become neuron's own
  flash_attention ops, which have CPU kernels (Note [FlashAttention's ops on neuron])."""
import torch

aten = torch.ops.aten


def _attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
               scale=None):
    output, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_bias, scale=scale)
    empty = query.new_empty((0,), dtype=torch.int64)
    return (output, logsumexp, empty, empty, query.shape[2], key.shape[2], empty, empty,
            query.new_empty((0,)))


def _attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                        cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=None):
    grad_query, grad_key, grad_value = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
        attn_mask=attn_bias if attn_bias is not None and attn_bias.numel() else None, scale=scale)
    return grad_query, grad_key, grad_value, None


# ---- accelerator-only ops (the kernels of Recurrent.cpp and AcceleratorOnly.cpp) ----------------

def _widened(t):
    return t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t


def _accumulate_type(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    dtype = input_gates.dtype
    gates = _widened(input_gates) + _widened(hidden_gates)
    if input_bias is not None:
        gates = gates + _widened(input_bias) + _widened(hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * _widened(cx) + i * g
    hy = o * cy.tanh()
    return hy.to(dtype).contiguous(), cy.to(dtype).contiguous(), torch.cat([i, f, g, o], 1).to(dtype)


def _lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    dtype = workspace.dtype
    batch, hidden = cx.shape
    i, f, g, o = _widened(workspace).reshape(batch, 4 * hidden).chunk(4, 1)  # read as [B, 4H], as CUDA does
    tanh_cy = _widened(cy).tanh()
    if grad_hy is not None:
        grad_o = _widened(grad_hy) * tanh_cy
        grad_c = _widened(grad_hy) * o * (1 - tanh_cy * tanh_cy)
        if grad_cy is not None:
            grad_c = grad_c + _widened(grad_cy)
    else:
        grad_o = torch.zeros_like(tanh_cy)
        grad_c = _widened(grad_cy)
    grad_gates = torch.cat([grad_c * g * (1 - i) * i, grad_c * _widened(cx) * (1 - f) * f, grad_c * i * (1 - g * g),
                            grad_o * (1 - o) * o], 1)
    grad_bias = grad_gates.sum(0).to(dtype) if has_bias else None
    return grad_gates.to(dtype), (grad_c * f).to(dtype).contiguous(), grad_bias


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    dtype = input_gates.dtype
    ir, ii, in_ = _widened(input_gates).chunk(3, 1)
    hr, hi, hn = _widened(hidden_gates).chunk(3, 1)
    if input_bias is not None:
        b1, b2 = _widened(input_bias).chunk(3), _widened(hidden_bias).chunk(3)
        ir, ii, in_, hn = ir + hr + b1[0] + b2[0], ii + hi + b1[1] + b2[1], in_ + b1[2], hn + b2[2]
    else:
        ir, ii = ir + hr, ii + hi
    r, z = ir.sigmoid(), ii.sigmoid()
    n = (in_ + r * hn).tanh()
    h = _widened(hx)
    return (n + z * (h - n)).to(dtype).contiguous(), torch.cat([r, z, n, h, hn], 1).to(dtype)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    dtype = grad_hy.dtype
    r, z, n, hx, hn = _widened(workspace).chunk(5, 1)
    go = _widened(grad_hy)
    grad_z = go * (hx - n) * (1 - z) * z
    grad_n = go * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * (1 - r) * r
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    biases = (grad_input_gates.sum(0).to(dtype), grad_hidden_gates.sum(0).to(dtype)) if has_bias else (None, None)
    return (grad_input_gates.to(dtype), grad_hidden_gates.to(dtype), (go * z).to(dtype).contiguous()) + biases


def _per_channel(stat, dims):
    return stat.reshape([1, -1] + [1] * (dims - 2))


def _reduced(dims):
    return [0] + list(range(2, dims))


def _batch_norm_stats(input, eps):
    var, mean = torch.var_mean(_widened(input), _reduced(input.dim()), correction=0)
    return mean, (var + eps).rsqrt()


def _batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    dims = input.dim()
    out = (_widened(input) - _per_channel(_widened(mean), dims)) * _per_channel(_widened(invstd), dims)
    if weight is not None:
        out = out * _per_channel(_widened(weight), dims)
    if bias is not None:
        out = out + _per_channel(_widened(bias), dims)
    return out.to(input.dtype)


def _gather_stats(mean, invstd, running_mean, running_var, momentum, eps, counts):
    stat_type = _accumulate_type(mean.dtype)
    mean, invstd = mean.to(stat_type), invstd.to(stat_type)
    count = counts.to(stat_type).reshape(-1, 1)
    n = count.sum(0)
    avg = (mean * count).sum(0) / n
    std = invstd.reciprocal()
    var_n = ((std * std - eps) * count).sum(0) + ((mean - avg) * (mean - avg) * count).sum(0)
    if running_mean is not None:  # each running statistic is updated when given, as on CUDA
        running_mean.copy_(_widened(running_mean) * (1 - momentum) + avg * momentum)
    if running_var is not None:
        running_var.copy_(_widened(running_var) * (1 - momentum) + var_n / (n - 1) * momentum)
    return avg, (var_n / n + eps).rsqrt()


def _batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    return _gather_stats(mean, invstd, running_mean, running_var, momentum, eps, counts)


def _batch_norm_gather_stats(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    counts = torch.full((mean.shape[0],), count, dtype=_accumulate_type(mean.dtype), device=mean.device)
    return _gather_stats(mean, invstd, running_mean, running_var, momentum, eps, counts)


def _batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    dims = input.dim()
    dy = _widened(grad_out)
    sum_dy = dy.sum(_reduced(dims)).to(mean.dtype)
    sum_dy_xmu = (dy * (_widened(input) - _per_channel(_widened(mean), dims))).sum(_reduced(dims)).to(mean.dtype)
    param_type = weight.dtype if weight is not None else input.dtype
    return (sum_dy if input_g else None, sum_dy_xmu if input_g else None,
            (_widened(sum_dy_xmu) * _widened(invstd)).to(param_type) if weight_g else None,
            sum_dy.to(param_type) if bias_g else None)


def _batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    dims = input.dim()
    mean, invstd = _widened(mean), _widened(invstd)
    norm = count.to(mean.dtype).sum().reciprocal()
    grad_mean = _per_channel(_widened(sum_dy) * norm, dims)
    proj_scale = _per_channel(invstd * invstd * _widened(sum_dy_xmu) * norm, dims)
    grad_scale = invstd * _widened(weight) if weight is not None else invstd
    grad_input = (_widened(grad_out) - grad_mean - (_widened(input) - _per_channel(mean, dims)) * proj_scale) * \
        _per_channel(grad_scale, dims)
    return grad_input.to(input.dtype)


def _native_dropout(input, p, train):
    """native_dropout as the device's eager kernel computes it (csrc/kernels/Random.cpp): a bool
    mask drawn by bernoulli(1 - p) from the device's generator (passes.py gives bernoulli.p its
    Generator argument), then input * mask * 1/(1 - p). So a compiled dropout drops what the eager
    one drops after the same seed. PyTorch's own decomposition (rand_like(input) > p) draws other
    numbers; native_dropout's kernel has no generator argument."""
    if train is not None and not train:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    keep = 1.0 - p
    if keep == 0:  # p == 1: everything dropped, nothing drawn
        return torch.zeros_like(input), torch.zeros_like(input, dtype=torch.bool)
    mask = aten.bernoulli.p(torch.empty_like(input, dtype=torch.bool), keep)
    return input * mask * (1.0 / keep), mask


def _fused_dropout(input, p, generator=None):
    mask = aten.bernoulli.p(torch.empty_like(input, dtype=torch.uint8), p, generator=generator)  # functional
    scale = 1.0 / p if p > 0 else 0.0
    return (_widened(input) * mask * scale).to(input.dtype), mask


def _masked_scale(input, mask, scale):
    return (_widened(input) * mask * scale).to(input.dtype)


# ---- FlashAttention's ops (csrc/kernels/VarlenAttention.cpp) ----------------------------------------

def _rng_outputs(query):
    return query.new_zeros((2,), dtype=torch.uint64), query.new_zeros((), dtype=torch.uint64)


def _refuse_flash_options(dropout_p=0.0, return_debug_mask=False, alibi_slopes=None, block_table=None):
    # the kernels' own errors, raised while tracing
    if dropout_p or return_debug_mask or alibi_slopes is not None or block_table is not None:
        raise RuntimeError("_flash_attention_forward on neuron: dropout_p, return_debug_mask, alibi_slopes and "
                           "block_table are not supported (Note [FlashAttention's ops on neuron])")


def _flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                             return_debug_mask, *, scale=None, window_size_left=None, window_size_right=None,
                             seqused_k=None, alibi_slopes=None, block_table=None, num_splits=None):
    _refuse_flash_options(dropout_p, return_debug_mask, alibi_slopes, block_table)
    output, logsumexp = torch.ops.neuron.flash_attention_forward(
        query, key, value, cum_seq_q, cum_seq_k, is_causal, scale, window_size_left, window_size_right, seqused_k)
    return (output, logsumexp, *_rng_outputs(query), query.new_empty((0,)))


def _flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                              dropout_p, is_causal, rng_state, unused, *, scale=None, window_size_left=None,
                              window_size_right=None):
    _refuse_flash_options(dropout_p)
    return torch.ops.neuron.flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q,
                                                     cum_seq_k, is_causal, scale, window_size_left, window_size_right)


def _window(window_size):
    left, right = (window_size or [-1, -1])
    return left, right


def _varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None,
                 window_size=None, enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    _refuse_flash_options(block_table=block_table)
    left, right = _window(window_size)
    output, logsumexp = torch.ops.neuron.flash_attention_forward(query, key, value, cu_seq_q, cu_seq_k, is_causal,
                                                                 scale, left, right, seqused_k)
    return output, logsumexp, _rng_outputs(query)[0]


def _varlen_attn_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, is_causal,
                          rng_state, scale=None, window_size=None):
    left, right = _window(window_size)
    return torch.ops.neuron.flash_attention_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k,
                                                     is_causal, scale, left, right)


def _varlen_decompositions():
    import torch.nn.attention.varlen  # noqa: F401  defines torch.ops.torch_attn
    torch_attn = torch.ops.torch_attn
    return {
        torch_attn._varlen_attn.default: _varlen_attn,
        torch_attn._varlen_attn_backward.default: _varlen_attn_backward,
    }


def decomposition_table():
    return {
        aten.native_dropout.default: _native_dropout,
        aten._scaled_dot_product_fused_attention_overrideable.default: _attention,
        aten._scaled_dot_product_fused_attention_overrideable_backward.default: _attention_backward,
        aten._thnn_fused_lstm_cell.default: _lstm_cell,
        aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward_impl,
        aten._thnn_fused_gru_cell.default: _gru_cell,
        aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
        aten.batch_norm_stats.default: _batch_norm_stats,
        aten.batch_norm_elemt.default: _batch_norm_elemt,
        aten.batch_norm_gather_stats.default: _batch_norm_gather_stats,
        aten.batch_norm_gather_stats_with_counts.default: _batch_norm_gather_stats_with_counts,
        aten.batch_norm_backward_reduce.default: _batch_norm_backward_reduce,
        aten.batch_norm_backward_elemt.default: _batch_norm_backward_elemt,
        aten._fused_dropout.default: _fused_dropout,
        aten._masked_scale.default: _masked_scale,
        aten._flash_attention_forward.default: _flash_attention_forward,
        aten._flash_attention_backward.default: _flash_attention_backward,
        **_varlen_decompositions(),
    }
