// Note [FlashAttention's ops on neuron]
// aten::_flash_attention_forward, _flash_attention_backward and
// _flash_attention_forward_no_dropout_inplace are FlashAttention's kernels: CUDA ships them, the
// CPU does not. scaled_dot_product_attention never picks them on neuron (its per-device choice
// is neuron's, csrc/kernels/Accelerator.cpp), but variable-length attention calls them by name
// for every device (torch.nn.attention.varlen.varlen_attn; torchtitan's VarlenAttention, its
// `llama3_debugmodel_varlen_attn` config). Here they follow CUDA's FlashAttention 2 contract:
//
//  - varlen: query [total_q, Hq, D], key/value [total_k, Hkv, D] (Hq a multiple of Hkv: grouped
//    query attention), cum_seq_q / cum_seq_k [N + 1] offsets of the N sequences; logsumexp
//    [Hq, total_q] in float32. Dense: query [B, Sq, Hq, D], key/value [B, Sk, Hkv, D] (no
//    offsets); logsumexp [B, Hq, Sq]. The output has the query's shape and dtype.
//  - the mask of query row i and key column j of one sequence (sq queries, sk keys) is
//    FlashAttention's, aligned to the bottom right: j <= i + sk - sq + right and
//    j >= i + sk - sq - left, where is_causal sets right = 0 and a negative side is unbounded.
//    A row with no key left gives a zero output and a logsumexp of +inf (as CUDA's kernel).
//  - seqused_k: sequence b attends to its first seqused_k[b] keys only (forward only, as on CUDA).
//  - rng_state is a uint64 [2] (seed, offset) and `unused` a uint64 scalar, as CUDA returns them;
//    with dropout_p = 0 (what varlen_attn passes) neither is read.
// Windows are the documented mask as given: CUDA's kernel also treats a side of max_k or more as
// unbounded and gives a one-sided window max_k on its other side, which differs only for a
// sequence with more than max_k + 1 queries more than keys. varlen_attn_out (the in-place custom
// op) runs eagerly; in a compiled graph it is auto_functionalized and not lowered (an error).
// Refused with an error that says so: dropout (use scaled_dot_product_attention's dropout_p),
// ALiBi slopes, a paged KV cache (block_table), a value head size other than the query's (the
// meta function gives the output the query's shape), the quantized (FP8 descale) overload.
//
// Computed per sequence in float32 with ATen's CPU matmuls on host views (a body of
// run_kernel, KernelBody.h): the scores of one sequence are materialized, [Hq, sq, sk], as
// FlexAttention's and the math SDPA path are on this device. The backward recomputes the
// probabilities from logsumexp (FlashAttention's backward): dV = P^T dO, dS = P (dO V^T - rowsum(dO O)),
// dQ = scale dS K, dK = scale dS^T Q, summed over a group's query heads for grouped KV.
#include <ATen/ops/arange.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/TensorOperators.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "../NeuronCommon.h"
#include "../OpTracking.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {
namespace {

const at::Tensor& value_or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t && t->defined() ? *t : undefined;
}

// The shapes and options every call checks and uses.
struct Attention {
  bool varlen = false;
  int64_t batch = 0;           // sequences
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  double scale = 0;
  int64_t left = -1, right = -1;  // window sides, -1: unbounded
};

Attention check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& cum_q, const at::Tensor& cum_k, double dropout_p, bool is_causal,
                       std::optional<double> scale, std::optional<int64_t> left, std::optional<int64_t> right) {
  Attention a;
  a.varlen = cum_q.defined();
  TORCH_CHECK(cum_q.defined() == cum_k.defined(), op, ": give both cum_seq_q and cum_seq_k (variable-length) or "
              "neither (dense), got ", cum_q.defined() ? "cum_seq_q only" : "cum_seq_k only");
  const int64_t dims = a.varlen ? 3 : 4;
  const char* layout = a.varlen ? "[total, heads, head_dim] with cum_seq_q/cum_seq_k" : "[batch, seqlen, heads, head_dim]";
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"query", &q}, {"key", &k}, {"value", &v}}) {
    TORCH_CHECK(t->dim() == dims, op, ": expected ", name, " of shape ", layout, ", got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), op, ": query, key and value need one dtype, got ", q.scalar_type(),
                " and ", t->scalar_type(), " (", name, ")");
  }
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), op, ": expected floating query/key/value, got ", q.scalar_type());
  TORCH_CHECK(dropout_p == 0.0, op, ": dropout_p=", dropout_p, " is not supported on neuron (FlashAttention's ",
              "dropout); use scaled_dot_product_attention(dropout_p=...) for attention with dropout");
  a.heads_q = q.size(-2);
  a.heads_kv = k.size(-2);
  a.head_dim = q.size(-1);
  TORCH_CHECK(a.head_dim > 0, op, ": expected a head size of 1 or more, got query ", q.sizes());
  TORCH_CHECK(k.size(-1) == a.head_dim && v.size(-1) == a.head_dim, op, ": expected key and value with the query's head ",
              "size ", a.head_dim, ", got ", k.size(-1), " and ", v.size(-1),
              " (FlashAttention 2's contract: the output takes the query's shape)");
  TORCH_CHECK(v.size(-2) == a.heads_kv && v.size(0) == k.size(0) && (a.varlen || v.size(1) == k.size(1)), op,
              ": key ", k.sizes(), " and value ", v.sizes(), " must match in every dimension but the last");
  TORCH_CHECK(a.heads_kv > 0 && a.heads_q % a.heads_kv == 0, op, ": the query's ", a.heads_q,
              " heads must be a multiple of the key/value's ", a.heads_kv, " (grouped-query attention)");
  if (a.varlen) {
    for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"cum_seq_q", &cum_q}, {"cum_seq_k", &cum_k}}) {
      TORCH_CHECK(t->dim() == 1 && t->numel() >= 1 && !at::isFloatingType(t->scalar_type()), op, ": expected ", name,
                  " as a 1-D integer tensor of N + 1 offsets, got ", t->sizes(), " ", t->scalar_type());
    }
    TORCH_CHECK(cum_q.numel() == cum_k.numel(), op, ": cum_seq_q has ", cum_q.numel(), " offsets and cum_seq_k ",
                cum_k.numel(), ": one sequence count for both");
    a.batch = cum_q.numel() - 1;
  } else {
    TORCH_CHECK(k.size(0) == q.size(0), op, ": query has batch ", q.size(0), ", key ", k.size(0));
    a.batch = q.size(0);
  }
  a.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim));
  a.left = left.value_or(-1);
  a.right = is_causal ? 0 : right.value_or(-1);
  TORCH_CHECK(a.left >= -1 && a.right >= -1, op, ": window sizes are -1 (unbounded) or 0 and more, got (", a.left, ", ",
              a.right, ")");
  return a;
}

// Offsets of the sequences, read from a host view (int64).
std::vector<int64_t> offsets(const at::Tensor& host) {
  const at::Tensor longs = host.to(at::kLong).contiguous();
  return std::vector<int64_t>(longs.data_ptr<int64_t>(), longs.data_ptr<int64_t>() + longs.numel());
}

// Where sequence b's rows are: [q0, q0 + sq) of the queries, [k0, k0 + sk) of the keys, checked
// against the tensors' sizes.
struct Span {
  int64_t q0, sq, k0, sk;
};

std::vector<Span> spans(const char* op, const Attention& a, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& cum_q, const at::Tensor& cum_k, const at::Tensor& seqused_k) {
  std::vector<Span> result;
  const std::vector<int64_t> used = seqused_k.defined() ? offsets(seqused_k) : std::vector<int64_t>();
  TORCH_CHECK(!seqused_k.defined() || static_cast<int64_t>(used.size()) == a.batch, op, ": seqused_k has ",
              used.size(), " entries for ", a.batch, " sequences");
  if (!a.varlen) {
    for (int64_t b = 0; b < a.batch; ++b) result.push_back({b, q.size(1), b, k.size(1)});
  } else {
    const std::vector<int64_t> oq = offsets(cum_q), ok = offsets(cum_k);
    for (int64_t b = 0; b < a.batch; ++b) {
      TORCH_CHECK(oq[b] >= 0 && oq[b] <= oq[b + 1] && oq[b + 1] <= q.size(0) && ok[b] >= 0 && ok[b] <= ok[b + 1] &&
                      ok[b + 1] <= k.size(0),
                  op, ": sequence ", b, " spans queries [", oq[b], ", ", oq[b + 1], ") and keys [", ok[b], ", ",
                  ok[b + 1], "): offsets must rise and stay within the ", q.size(0), " queries and ", k.size(0), " keys");
      result.push_back({oq[b], oq[b + 1] - oq[b], ok[b], ok[b + 1] - ok[b]});
    }
  }
  for (size_t b = 0; b < used.size(); ++b) {
    TORCH_CHECK(used[b] >= 0 && used[b] <= result[b].sk, op, ": seqused_k[", b, "] = ", used[b], " is outside [0, ",
                result[b].sk, "], the keys of sequence ", b);
    result[b].sk = used[b];
  }
  return result;
}

// One sequence's rows of a tensor as [heads, rows, head_dim] in float32.
at::Tensor rows(const Attention& a, const at::Tensor& t, int64_t first, int64_t count, bool dense_batch) {
  const at::Tensor part = dense_batch ? t.select(0, first).narrow(0, 0, count) : t.narrow(0, first, count);
  return part.to(at::kFloat).transpose(0, 1);
}

// Key/value heads repeated for their query heads (grouped-query attention).
at::Tensor per_query_head(const Attention& a, const at::Tensor& kv) {
  const int64_t group = a.heads_q / a.heads_kv;
  return group == 1 ? kv : kv.repeat_interleave(group, 0);
}

// The scores of one sequence [Hq, sq, sk], masked with -inf (FlashAttention's bottom-right window).
at::Tensor masked_scores(const Attention& a, const at::Tensor& q, const at::Tensor& k, int64_t sq, int64_t sk) {
  at::Tensor scores = at::bmm(q, per_query_head(a, k).transpose(1, 2)) * a.scale;
  if (a.left < 0 && a.right < 0) return scores;
  const at::Tensor i = at::arange(sq, at::TensorOptions().dtype(at::kLong)).unsqueeze(1) + (sk - sq);
  const at::Tensor j = at::arange(sk, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  at::Tensor allowed = at::ones({sq, sk}, at::TensorOptions().dtype(at::kBool));
  if (a.right >= 0) allowed = allowed & (j <= i + a.right);
  if (a.left >= 0) allowed = allowed & (j >= i - a.left);
  return scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
}

// The logsumexp of a sequence's rows [Hq, sq], +inf for a row without keys (CUDA's convention).
at::Tensor row_logsumexp(const at::Tensor& scores) {
  const at::Tensor lse = at::logsumexp(scores, -1);
  return at::where(lse == -std::numeric_limits<float>::infinity(),
                   at::full({}, std::numeric_limits<float>::infinity(), lse.options()), lse);
}

// Writes [heads, rows, dim] back into rows of a [total, heads, dim] or [B, S, heads, dim] result.
void put_rows(at::Tensor& into, const at::Tensor& value, int64_t first, int64_t count, bool dense_batch) {
  at::Tensor part = dense_batch ? into.select(0, first).narrow(0, 0, count) : into.narrow(0, first, count);
  part.copy_(value.transpose(0, 1));
}

// The forward: [output, logsumexp] on host views (or meta tensors for their shapes).
std::vector<at::Tensor> forward_body(const char* op, const Attention& a, const std::vector<at::Tensor>& in) {
  const at::Tensor &q = in[0], &k = in[1], &v = in[2];
  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse = a.varlen ? at::full({a.heads_q, q.size(0)}, std::numeric_limits<float>::infinity(),
                                       q.options().dtype(at::kFloat))
                            : at::full({a.batch, a.heads_q, q.size(1)}, std::numeric_limits<float>::infinity(),
                                       q.options().dtype(at::kFloat));
  if (q.is_meta()) return {out, lse};
  const bool dense = !a.varlen;
  for (const Span& s : spans(op, a, q, k, in[3], in[4], in[5])) {
    if (s.sq == 0) continue;
    const at::Tensor qs = rows(a, q, s.q0, s.sq, dense), ks = rows(a, k, s.k0, s.sk, dense),
                     vs = rows(a, v, s.k0, s.sk, dense);
    const at::Tensor scores = masked_scores(a, qs, ks, s.sq, s.sk);
    const at::Tensor row_lse = row_logsumexp(scores);                     // [Hq, sq]
    const at::Tensor probs = (scores - row_lse.unsqueeze(-1)).exp();      // 0 for a row without keys
    put_rows(out, at::bmm(probs, per_query_head(a, vs)).to(q.scalar_type()), s.q0, s.sq, dense);
    if (a.varlen) {
      lse.narrow(1, s.q0, s.sq).copy_(row_lse);
    } else {
      lse.select(0, s.q0).copy_(row_lse);
    }
  }
  return {out, lse};
}

// The logsumexp stays float32 whatever the inputs' dtype (CUDA's contract and the meta function's):
// run_kernel's 64-bit rule would widen it back to float64 for float64 inputs.
std::vector<at::Tensor> float32_logsumexp(std::vector<at::Tensor> results) {
  if (results[1].scalar_type() != at::kFloat) results[1] = results[1].to(at::kFloat);
  return results;
}

using FiveTensors = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

std::vector<at::Tensor> forward(const char* op, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                const std::optional<at::Tensor>& cum_seq_q, const std::optional<at::Tensor>& cum_seq_k,
                                double dropout_p, bool is_causal, std::optional<double> scale,
                                std::optional<int64_t> window_size_left, std::optional<int64_t> window_size_right,
                                const std::optional<at::Tensor>& seqused_k, const std::optional<at::Tensor>& alibi_slopes,
                                const std::optional<at::Tensor>& block_table) {
  TORCH_CHECK(!alibi_slopes.has_value() || !alibi_slopes->defined(), op,
              ": alibi_slopes are not supported on neuron; give the bias as FlexAttention's score_mod instead");
  TORCH_CHECK(!block_table.has_value() || !block_table->defined(), op,
              ": a paged KV cache (block_table) is not supported on neuron; pass the keys and values of each sequence "
              "contiguously with cum_seq_k");
  const at::Tensor &cum_q = value_or_undefined(cum_seq_q), &cum_k = value_or_undefined(cum_seq_k);
  const Attention a = check_inputs(op, query, key, value, cum_q, cum_k, dropout_p, is_causal, scale, window_size_left,
                                   window_size_right);
  const std::vector<at::Tensor> inputs{query, key, value, cum_q, cum_k, value_or_undefined(seqused_k)};
  if (query.device().type() != kNeuron) return forward_body(op, a, inputs);  // CPU (a program's host views) or Meta
  TensorBody body = [op, a](const std::vector<at::Tensor>& in) { return forward_body(op, a, in); };
  return float32_logsumexp(run_kernel(op, inputs, body));
}

// rng_state and `unused` as CUDA returns them (seed and offset for dropout; dropout_p is 0 here),
// and the debug mask (empty unless asked for; FlashAttention's debug mask needs dropout).
FiveTensors with_rng_outputs(const std::vector<at::Tensor>& r, const at::Tensor& query, bool return_debug_mask) {
  TORCH_CHECK(!return_debug_mask, "_flash_attention_forward: return_debug_mask=True is not supported on neuron (it ",
              "returns FlashAttention's dropout pattern; dropout is not supported)");
  const auto uint64 = query.options().dtype(at::kUInt64);
  return {r[0], r[1], at::zeros({2}, uint64), at::zeros({}, uint64), at::empty({0}, query.options())};
}

FiveTensors flash_attention_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                    const std::optional<at::Tensor>& cum_seq_q,
                                    const std::optional<at::Tensor>& cum_seq_k, int64_t max_q, int64_t max_k,
                                    double dropout_p, bool is_causal, bool return_debug_mask,
                                    std::optional<double> scale, std::optional<int64_t> window_size_left,
                                    std::optional<int64_t> window_size_right,
                                    const std::optional<at::Tensor>& seqused_k,
                                    const std::optional<at::Tensor>& alibi_slopes,
                                    const std::optional<at::Tensor>& block_table, std::optional<int64_t> num_splits) {
  static TrackedOp counter("aten::_flash_attention_forward", KernelPath::kHot);
  return run_tracked(counter, [&]() -> FiveTensors {
    // max_q / max_k size CUDA's launch grid; num_splits its split-KV (this kernel is exact and
    // batch-invariant without either).
    auto r = forward("_flash_attention_forward", query, key, value, cum_seq_q, cum_seq_k, dropout_p, is_causal, scale,
                     window_size_left, window_size_right, seqused_k, alibi_slopes, block_table);
    return with_rng_outputs(r, query, return_debug_mask);
  });
}

at::Tensor flash_attention_forward_no_dropout_inplace(
    at::Tensor& out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& cum_seq_q, const std::optional<at::Tensor>& cum_seq_k, int64_t max_q,
    int64_t max_k, double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale,
    std::optional<int64_t> window_size_left, std::optional<int64_t> window_size_right,
    const std::optional<at::Tensor>& seqused_k, const std::optional<at::Tensor>& alibi_slopes,
    const std::optional<at::Tensor>& block_table, std::optional<int64_t> num_splits) {
  static TrackedOp counter("aten::_flash_attention_forward_no_dropout_inplace", KernelPath::kHot);
  return run_tracked(counter, [&]() -> at::Tensor {
    const char* op = "_flash_attention_forward_no_dropout_inplace";
    TORCH_CHECK(!return_debug_mask, op, ": return_debug_mask=True is not supported");
    TORCH_CHECK(out.sizes() == query.sizes() && out.scalar_type() == query.scalar_type() &&
                    out.device() == query.device(),
                op, ": expected `out` of the query's shape ", query.sizes(), ", dtype ", query.scalar_type(),
                " and device ", query.device(), ", got ", out.sizes(), " ", out.scalar_type(), " on ", out.device());
    auto r = forward(op, query, key, value, cum_seq_q, cum_seq_k, dropout_p, is_causal, scale, window_size_left,
                     window_size_right, seqused_k, alibi_slopes, block_table);
    out.copy_(r[0]);
    return r[1];
  });
}

// The backward of one call: [grad_query, grad_key, grad_value] on host views.
std::vector<at::Tensor> backward_body(const char* op, const Attention& a, const std::vector<at::Tensor>& in) {
  const at::Tensor &grad_out = in[0], &q = in[1], &k = in[2], &v = in[3], &out = in[4], &lse = in[5];
  at::Tensor dq = at::zeros(q.sizes(), q.options()), dk = at::zeros(k.sizes(), k.options()),
             dv = at::zeros(v.sizes(), v.options());
  if (q.is_meta()) return {dq, dk, dv};
  const bool dense = !a.varlen;
  const int64_t group = a.heads_q / a.heads_kv;
  for (const Span& s : spans(op, a, q, k, in[6], in[7], at::Tensor())) {
    if (s.sq == 0 || s.sk == 0) continue;
    const at::Tensor qs = rows(a, q, s.q0, s.sq, dense), ks = rows(a, k, s.k0, s.sk, dense),
                     vs = rows(a, v, s.k0, s.sk, dense), dos = rows(a, grad_out, s.q0, s.sq, dense),
                     os = rows(a, out, s.q0, s.sq, dense);
    const at::Tensor row_lse = a.varlen ? lse.narrow(1, s.q0, s.sq) : lse.select(0, s.q0);
    // +inf for a row without keys: its probabilities are exp(-inf) = 0
    const at::Tensor probs = (masked_scores(a, qs, ks, s.sq, s.sk) - row_lse.to(at::kFloat).unsqueeze(-1)).exp();
    const at::Tensor dv_heads = at::bmm(probs.transpose(1, 2), dos);                        // [Hq, sk, D]
    const at::Tensor dp = at::bmm(dos, per_query_head(a, vs).transpose(1, 2));              // [Hq, sq, sk]
    const at::Tensor ds = probs * (dp - (dos * os).sum(-1, /*keepdim=*/true));
    const at::Tensor dq_s = at::bmm(ds, per_query_head(a, ks)) * a.scale;                   // [Hq, sq, D]
    const at::Tensor dk_heads = at::bmm(ds.transpose(1, 2), qs) * a.scale;                  // [Hq, sk, D]
    auto per_kv_head = [&](const at::Tensor& t) {
      return group == 1 ? t : t.reshape({a.heads_kv, group, t.size(1), t.size(2)}).sum(1);
    };
    put_rows(dq, dq_s.to(q.scalar_type()), s.q0, s.sq, dense);
    put_rows(dk, per_kv_head(dk_heads).to(k.scalar_type()), s.k0, s.sk, dense);
    put_rows(dv, per_kv_head(dv_heads).to(v.scalar_type()), s.k0, s.sk, dense);
  }
  return {dq, dk, dv};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(
    const char* op, const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k,
    double dropout_p, bool is_causal, std::optional<double> scale, std::optional<int64_t> window_size_left,
    std::optional<int64_t> window_size_right) {
  const Attention a = check_inputs(op, query, key, value, cum_seq_q, cum_seq_k, dropout_p, is_causal, scale,
                                   window_size_left, window_size_right);
  TORCH_CHECK(grad_out.sizes() == query.sizes() && out.sizes() == query.sizes(), op, ": expected grad_out and out of ",
              "the query's shape ", query.sizes(), ", got ", grad_out.sizes(), " and ", out.sizes());
  const std::vector<int64_t> lse_shape =
      a.varlen ? std::vector<int64_t>{a.heads_q, query.size(0)} : std::vector<int64_t>{a.batch, a.heads_q, query.size(1)};
  TORCH_CHECK(logsumexp.sizes() == c10::IntArrayRef(lse_shape), op, ": expected the forward's logsumexp of shape ",
              c10::IntArrayRef(lse_shape), ", got ", logsumexp.sizes());
  const std::vector<at::Tensor> inputs{grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k};
  std::vector<at::Tensor> r;
  if (query.device().type() == kNeuron) {
    TensorBody body = [op, a](const std::vector<at::Tensor>& in) { return backward_body(op, a, in); };
    r = run_kernel(op, inputs, body);
  } else {  // CPU (a program's host views) or Meta
    r = backward_body(op, a, inputs);
  }
  return {r[0], r[1], r[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k,
    int64_t max_q, int64_t max_k, double dropout_p, bool is_causal, const at::Tensor& rng_state,
    const at::Tensor& unused, std::optional<double> scale, std::optional<int64_t> window_size_left,
    std::optional<int64_t> window_size_right) {
  static TrackedOp counter("aten::_flash_attention_backward", KernelPath::kHot);
  return run_tracked(counter, [&]() -> std::tuple<at::Tensor, at::Tensor, at::Tensor> {
    return backward("_flash_attention_backward", grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
                    dropout_p, is_causal, scale, window_size_left, window_size_right);
  });
}

// neuron::flash_attention_forward / _backward: the same kernels as ops of our own, with CPU and
// Meta kernels as well. A compiled program runs its steps with CPU kernels on host views, and
// the aten ops have none; compile/decompositions.py rewrites varlen_attn's custom ops and the
// aten ops to these (forward: output and logsumexp; backward: grad_query, grad_key, grad_value).
std::tuple<at::Tensor, at::Tensor> neuron_forward(const at::Tensor& query, const at::Tensor& key,
                                                  const at::Tensor& value, const std::optional<at::Tensor>& cum_seq_q,
                                                  const std::optional<at::Tensor>& cum_seq_k, bool is_causal,
                                                  std::optional<double> scale, std::optional<int64_t> window_size_left,
                                                  std::optional<int64_t> window_size_right,
                                                  const std::optional<at::Tensor>& seqused_k) {
  auto r = forward("neuron::flash_attention_forward", query, key, value, cum_seq_q, cum_seq_k, 0.0, is_causal, scale,
                   window_size_left, window_size_right, seqused_k, std::nullopt, std::nullopt);
  return {r[0], r[1]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> neuron_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, const std::optional<at::Tensor>& cum_seq_q,
    const std::optional<at::Tensor>& cum_seq_k, bool is_causal, std::optional<double> scale,
    std::optional<int64_t> window_size_left, std::optional<int64_t> window_size_right) {
  return backward("neuron::flash_attention_backward", grad_out, query, key, value, out, logsumexp,
                  value_or_undefined(cum_seq_q), value_or_undefined(cum_seq_k), 0.0, is_causal, scale,
                  window_size_left, window_size_right);
}

TORCH_LIBRARY(neuron, m) {
  m.def("flash_attention_forward(Tensor query, Tensor key, Tensor value, Tensor? cum_seq_q, Tensor? cum_seq_k, "
        "bool is_causal, float? scale=None, int? window_size_left=None, int? window_size_right=None, "
        "Tensor? seqused_k=None) -> (Tensor output, Tensor logsumexp)");
  m.def("flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, "
        "Tensor logsumexp, Tensor? cum_seq_q, Tensor? cum_seq_k, bool is_causal, float? scale=None, "
        "int? window_size_left=None, int? window_size_right=None) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(neuron, PrivateUse1, m) {
  m.impl("flash_attention_forward", TORCH_FN(neuron_forward));
  m.impl("flash_attention_backward", TORCH_FN(neuron_backward));
}
TORCH_LIBRARY_IMPL(neuron, CPU, m) {
  m.impl("flash_attention_forward", TORCH_FN(neuron_forward));
  m.impl("flash_attention_backward", TORCH_FN(neuron_backward));
}
TORCH_LIBRARY_IMPL(neuron, Meta, m) {
  m.impl("flash_attention_forward", TORCH_FN(neuron_forward));
  m.impl("flash_attention_backward", TORCH_FN(neuron_backward));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_flash_attention_forward", TORCH_FN(flash_attention_forward));
  m.impl("_flash_attention_forward_no_dropout_inplace", TORCH_FN(flash_attention_forward_no_dropout_inplace));
  m.impl("_flash_attention_backward", TORCH_FN(flash_attention_backward));
}

}  // namespace
}  // namespace torch_neuron
