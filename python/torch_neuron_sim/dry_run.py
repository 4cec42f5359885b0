"""The dry run (issue 25 §2): a Hugging Face causal LM built from its config on the meta device,
run without computing values, costed by the device clock's own cost path, so a model of any
size is predicted on a laptop. Two modes:

- "compiled" (the default; what NxD Inference and vLLM run on Trainium): the forward is traced
  by torch.compile with the neuron backend's own passes and lowering (fused pointwise groups
  and all), one program for the prefill and one for a decode step over a static KV cache, and
  each program is costed as the live executor costs it (`_C._cost_program`: one program launch
  plus its steps).
- "eager": each ATen op that launches on the device is costed as a live eager launch
  (`_C._cost_op`: the same description and cost as a live launch, from sizes and dtypes only).

Tensor parallelism of degree T runs one rank's shard of the model, as NxD Inference shards it:
the column-parallel linears (q/k/v/gate/up) have their output dimension divided by T and the
row-parallel ones (o/down) their input dimension (heads, key-value heads (at least one per
rank, replicated) and the MLP's intermediate size divided by T), the embedding and LM head are
split by vocabulary, and each decoder layer adds two all-reduces of the hidden states (after
attention and after the MLP), costed by the cost model's collective model (`_C._cost_collective`)
as a live collective is; the logits of the vocabulary shards are gathered once per forward.
Layers of one kind are costed from a two-layer and a three-layer trace (the third layer's cost,
times the remaining layers) so a 70B config answers in seconds; a model whose layers differ
(`config.layer_types`) is traced whole.

    python -m torch_neuron_sim.dry_run CONFIG_DIR --platform trn2 --tp 4 --input-tokens 192 --output-tokens 192
"""
import argparse
import contextlib
import contextvars
import dataclasses
import functools
import math
import os
import unittest.mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import torch_neuron_sim  # noqa: F401  (loads _C and the platform data file)
from torch_neuron_sim import _C

COST_MODEL_VERSION = "v3"  # the cost model's version (runtime/cost_model.h, data/platforms.toml)
PLATFORMS = ("trn1", "trn2", "trn3")
LOOPS = ("forward", "generate")  # the generation loop a prediction costs (loop_of, generate_loop.py)


def costs_a_launch(func):
    """True when the live device launches a kernel for `func`: not for views and metadata ops."""
    schema = func._schema
    if func.is_view or func.name() in NO_LAUNCH or func.namespace in HOST_NAMESPACES:
        return False
    return not (schema.returns and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns))


# the profiler's record_function markers and TorchScript's prim ops: host bookkeeping, no launch
HOST_NAMESPACES = ("profiler", "prim")


def _without_values(tensor):
    """A tensor of sizes and dtypes only: on meta, or a fake tensor of a device (a CPU fake
    tensor may carry its constant value: FakeTensorMode answers those reads itself)."""
    from torch._subclasses.fake_tensor import FakeTensor
    return tensor.device.type == "meta" or (isinstance(tensor, FakeTensor) and tensor.device.type != "cpu")


def _on_the_host(args, kwargs, result):
    """True when every tensor of an op is a CPU tensor: the host runs it (an optimizer's step
    counters, a tokenizer's ids), the device launches nothing."""
    tensors = [t for t in tree_flatten((args, kwargs, result))[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.device.type == "cpu" for t in tensors)


NO_LAUNCH = {"aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::detach",
             "aten::lift_fresh", "aten::_local_scalar_dense", "aten::resize_", "aten::set_.source_Storage", "aten::_unsafe_view",
             "aten::new_empty", "aten::new_empty_strided"}


def _attention_as_on_the_device(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                enable_gqa=False):
    """What scaled_dot_product_attention launches for neuron tensors (PrivateUse1 chooses the
    overrideable fused kernel: one launch), where on meta it would decompose into the math path.
    A boolean mask is made additive first, as ATen does for that kernel (two scalar tensors and a
    where: three launches eager)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool and not torch.compiler.is_compiling():
        attn_mask = torch.where(attn_mask, torch.scalar_tensor(0.0, dtype=query.dtype, device=query.device),
                                torch.scalar_tensor(-math.inf, dtype=query.dtype, device=query.device))
    return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]


def routed_attention():
    """Within it, transformers' SDPA attention launches what it launches on the device (above).
    Patched around a whole forward, not inside it, so that Dynamo traces it without a break."""
    return unittest.mock.patch.object(torch.nn.functional, "scaled_dot_product_attention",
                                      _attention_as_on_the_device)


ATTENTION = "neuron_dry_run"
# A serving stack's attention kernels (NxD Inference, vLLM Neuron): the context encoding attends
# to the prompt's positions only (its keys, not the preallocated cache behind them), and, with
# `gqa_attention`, grouped key-value heads are read once.
ATTENTION_STACK = {True: "neuron_dry_run_stack_gqa", False: "neuron_dry_run_stack"}


# True while the dry run traces a prefill from position 0 (_compiled_forward_ns sets it per
# forward): a step of several tokens with a cache behind it (a speculative verify step) reads
# the cache. A plain global, which Dynamo guards on (it cannot trace a ContextVar).
_STACK_PREFILL = False


def _stack_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                             *, grouped, **kwargs):
    """transformers' SDPA attention as a serving stack's kernel runs it. A prefill (several
    query positions from position 0, the dry run's) attends causally to the prompt's keys only;
    `grouped`: the key-value heads go to the kernel as they are (enable_gqa), where
    transformers' compiled path copies them per query head (repeat_kv)."""
    q_length = query.shape[2]
    if q_length > 1 and _STACK_PREFILL:
        # Note [Prefill as a serving stack's kernel runs it]: a causal kernel visits the key tiles
        # at or below the diagonal; the dry run traces on meta (no values), so the attention is
        # costed over that share of the prompt's keys
        visited = causal_keys_visited(q_length)
        key, value = key[:, :, :visited, :], value[:, :, :visited, :]
        attention_mask, is_causal = None, False
    elif not grouped:  # a decode or verify step over the cache
        from transformers.integrations.sdpa_attention import repeat_kv
        key, value = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=bool(is_causal),
                                                           enable_gqa=grouped)
    return out.transpose(1, 2).contiguous(), None


# Note [Prefill as a serving stack's kernel runs it]
# What the dry run models of a serving stack's context encoding (the prefill program), beyond
# each op costed as the device clock costs it (docs/device-clock.md, "Prefill"):
# - causal attention as a flash-style kernel runs it: the scores are tiled, T x T, and the tiles
#   above the diagonal, every one of them masked, are skipped. For n = ceil(L / T) query tiles the
#   kernel visits n (n + 1) / 2 of the n^2 tiles: the fraction (n + 1) / (2 n) of the work (1 for a
#   prompt of one tile, about 1/2 for a long one). T is 128, the PE array's rows (assumed: the
#   kernels' tile sizes are not modelled further); the scores stay on chip.
# - sequence parallelism where the stack uses it (data/serving.toml `sequence_parallel`: NxD
#   Inference's tutorials enable it): outside attention and the MLP, each of the TP ranks works
#   on 1/TP of the sequence: the norms, residual adds and the embedding's output. The dry run
#   traces one rank of plain TP, so every program step that writes the residual stream (a
#   [1, L, hidden] value) or reduces it (a norm's statistics) and is not a matmul, an attention
#   or a cache write is costed at 1/TP
#   (_sequence_parallel_ns; not when a rank's MLP is as wide as the hidden size, whose
#   activations would look the same). The collectives keep their bytes: an all-reduce becomes a
#   reduce-scatter and an all-gather, the same ring traffic (collective_ns).
# Chunked prefill under load: Note [Serving under load].
# Not modelled: the overlap of the collectives with compute (a collective
# engine's), fusion of the norms into the matmul kernels beyond the simulator's pointwise groups,
# sliding-window layers (their causal tiles are counted as a full causal layer's: a window of W
# visits about min(L, W + T) keys per query tile) and attention sinks (gpt-oss).
CAUSAL_TILE = 128


def causal_keys_visited(length, tile=CAUSAL_TILE):
    """The number of key positions whose work matches what a causal kernel does for a prompt of
    `length` positions: length x (n + 1) / (2 n) for n = ceil(length / tile) tiles per side."""
    tiles = -(-length // tile)
    return max(1, math.ceil(length * (tiles + 1) / (2 * tiles)))


_NOT_SEQUENCE_PARALLEL = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "mv", "dot", "_scaled_mm",
                          "convolution", "index_copy_", "index_copy", "index_put_", "index_put", "scatter_",
                          "index_add_", "new_zeros", "zeros", "empty")


_REDUCTIONS = ("mean", "sum", "var", "var_mean", "amax", "amin", "norm", "linalg_vector_norm")


def _sequence_parallel_ns(desc, steps, hidden, tokens, tp):
    """The ns a rank saves in a program when its residual stream is split across `tp` ranks
    (Note [Prefill as a serving stack's kernel runs it]): each step that writes the stream (a
    [1, tokens, hidden] value, the model's batch-1 activations) or reduces it (a norm's
    statistics) and is not a matmul, attention or cache write costs 1/tp of what it costs whole.
    Steps on flattened [tokens, hidden] values (a MoE kernel's) stay whole."""
    from .compile.lowering import A_VALUE, A_VALUES
    values = desc["values"]

    def stream(index):
        sizes = values[index]["sizes"] if 0 <= index < len(values) else []
        return list(sizes) == [1, tokens, hidden]

    saved = 0.0
    for node, (op, ns) in zip(desc["nodes"], steps):
        name = op.split("::")[-1].split(".")[0]
        if name in _NOT_SEQUENCE_PARALLEL or "attention" in name or op.startswith("_c10d"):
            continue
        inputs = []
        for arg in node["args"]:
            inputs += [arg[1]] if arg[0] == A_VALUE else list(arg[3]) if arg[0] == A_VALUES else []
        if any(stream(index) for index in node["outputs"]) or (
                name in _REDUCTIONS and any(stream(index) for index in inputs)):
            saved += ns * (1 - 1 / tp)
    return saved


def _register_attention():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(ATTENTION, sdpa_attention_forward)  # under routed_attention()
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the masks of "sdpa", as the live model
    for grouped, name in ATTENTION_STACK.items():
        AttentionInterface.register(name, functools.partial(_stack_attention_forward, grouped=grouped))
        AttentionMaskInterface.register(name, sdpa_mask)


def _shapes(tree):
    leaves, _ = tree_flatten(tree)
    return [(list(t.shape), t.dtype, True) for t in leaves if isinstance(t, torch.Tensor)]


class CostingMode(TorchDispatchMode):
    """Costs every launching op that runs under it; `ns` accumulates, `launches` counts."""

    def __init__(self, platform="trn2", logical_nc_config=2, eager_launch=True, routed=True):
        super().__init__()
        # routed: transformers' SDPA launches what it launches on the device (routed_attention);
        # False where the model's own attention runs live (the generate loop's and a training
        # step's costing) or inside another mode that routes it (a composite's parts)
        self.routed = routed
        self.platform, self.lnc, self.eager_launch = platform, logical_nc_config, eager_launch
        self.ns = 0
        self.launches = 0
        self.by_op = {}
        self._routing = None

    def __enter__(self):
        self._routing = routed_attention() if self.routed else contextlib.nullcontext()
        self._routing.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._routing.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and _without_values(args[0]):
            # A host read of a value the dry run does not have (transformers asks whether the
            # positions are packed sequences, `(...).all()`): the answer of an ordinary batch.
            return True if args[0].dtype == torch.bool else 0
        composite = _DEVICE_COMPOSITES[func](*args, **kwargs) if func in _DEVICE_COMPOSITES else None
        if composite is not None:
            # Note [Composites on the device]: the device's own kernel is a composite
            return self.in_parts(composite, *args, **kwargs)[0]
        result = None
        if _has_composite(func):
            # Note [Composites on the device]
            try:
                result, parts = self.in_parts(func._op_dk, torch._C.DispatchKey.CompositeExplicitAutograd, *args,
                                              add=False, **kwargs)
            except (RuntimeError, TypeError):  # a composite that redispatches to another overload
                result = None  # (remainder.Scalar): run and costed as the op itself
            else:
                if parts.launches > 1:
                    self._add(parts)
                    return result
        if result is None:
            result = func(*args, **kwargs)
        if func is torch.ops.aten.lift_fresh.default and args[0].device.type != "cpu":
            # torch.tensor(data, device=...) copies the host data to the device below the
            # dispatcher's Python modes; this is the first op of it a mode sees: cost that copy
            self._cost("aten::_to_copy", _shapes(args[0]), _shapes(result), True)
        elif costs_a_launch(func) and not _on_the_host(args, kwargs, result):
            name = func.name()
            # A copy (copy_, or the copy_ into a fresh tensor that _to_copy is on the device)
            # takes the copy path: source in, destination out.
            copy = name in ("aten::copy_", "aten::_to_copy")
            if name == "aten::copy_":
                inputs, outputs = _shapes(args[1]), _shapes(args[0])
            elif copy:
                inputs, outputs = _shapes(args[0]), _shapes(result)
            else:
                inputs, outputs = _shapes((args, kwargs)), _shapes(result)
            self._cost(name, inputs, outputs, copy)
        return result

    def in_parts(self, run, *args, add=True, **kwargs):
        """(run's result, the mode that costed its launches one by one); with `add`, its costs
        are this mode's too (Note [Composites on the device])."""
        parts = CostingMode(self.platform, self.lnc, self.eager_launch, routed=False)
        with parts:
            result = run(*args, **kwargs)
        if add:
            self._add(parts)
        return result, parts

    def _cost(self, name, inputs, outputs, copy):
        ns = _C._cost_op(name, inputs, outputs, self.platform, self.lnc, copy, self.eager_launch)[0]
        self.ns += ns
        self.launches += 1
        total, count = self.by_op.get(name, (0, 0))
        self.by_op[name] = (total + ns, count + 1)

    def _add(self, other):
        self.ns += other.ns
        self.launches += other.launches
        for name, (ns, count) in other.by_op.items():
            total, calls = self.by_op.get(name, (0, 0))
            self.by_op[name] = (total + ns, calls + count)


# Note [Composites on the device]
# An op the device has no kernel of its own for, but ATen has a CompositeExplicitAutograd kernel
# for, runs that composite on a neuron tensor (the dispatcher picks it before the device's
# fallback): masked_fill.Scalar is a clone and a masked_fill_, two launches on the live clock.
# CostingMode runs such an op's composite under a mode of its own: two launches or more are
# costed one by one, as the live device launches them; one (clone, full, arange: an empty and
# one op) is costed as the op itself, as the live device's note of it reads.
# An op whose device kernel is itself a composite of launching ops (csrc/kernels): the same ops,
# on the values the dry run has. multinomial without replacement (or one sample) checks the
# probabilities (two reads of the host), then draws as ATen does, by the Gumbel-max trick
# (csrc/kernels/Random.cpp, neuron_multinomial_out): eleven launches.
def _multinomial_as_the_device_runs_it(probabilities, samples, replacement=False, *, generator=None):
    ((probabilities.max() < math.inf) & (probabilities.min() >= 0))
    (probabilities.sum() == 0) if probabilities.dim() == 1 else (probabilities.sum(1) == 0).sum()
    shape = [samples] if probabilities.dim() == 1 else [probabilities.shape[0], samples]
    result = torch.empty(shape, dtype=torch.long, device=probabilities.device)
    q = torch.empty_like(probabilities).exponential_(1, generator=generator)
    torch.div(probabilities, q, out=q)
    if samples == 1:
        return torch.argmax(q, dim=-1, keepdim=True, out=result)
    values = torch.empty(shape, dtype=probabilities.dtype, device=probabilities.device)
    return torch.topk(q, samples, out=(values, result))[1]


# func -> (its arguments -> the composite that costs them, or None: the device's single launch)
_DEVICE_COMPOSITES = {
    torch.ops.aten.multinomial.default: lambda probabilities, samples, replacement=False, **_: (
        _multinomial_as_the_device_runs_it if not replacement or samples == 1 else None),
}


@functools.lru_cache(maxsize=None)
def _has_composite(func):
    name = func.name()
    if not name.startswith("aten::"):  # prim:: ops are not in the dispatcher's table; others are the device's own
        return False
    return (torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd")
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
            and not func.is_view and name not in NO_LAUNCH and name not in ("aten::copy_", "aten::_to_copy"))


@dataclasses.dataclass
class Prediction:
    """Predicted figures of one platform, TP degree and mode, batch 1 (milliseconds)."""
    platform: str
    tp: int
    mode: str
    serving: str
    logical_nc_config: int
    ttft_ms: float
    per_token_ms: float
    prefill_launches: int  # launches of one rank's prefill (compiled: programs)
    decode_launches: int  # of one decode step
    collectives_ms_per_token: float  # the decode step's all-reduces and logits gather
    mfu_prefill: float  # the prefill's model FLOPs over the TTFT, against the rank's BF16 peak
    mbu_decode: float  # a decode step's weight and KV-cache bytes over its time, against the rank's HBM peak
    prefill_tokens: int = 0  # the prefill's length as run: the prompt padded to the serving stack's bucket
    loop: str = ""  # the generation loop the figures assume (loop_of)

    @property
    def tokens_per_s(self):
        return 1000.0 / self.per_token_ms if self.per_token_ms > 0 else float("nan")


def loop_of(mode, serving, loop="forward"):
    """The generation loop a prediction assumes (issue 41 §5: two predictions of "the same thing"
    disagreed 175x without saying which loop each assumed)."""
    if loop == "generate":
        from .generate_loop import LOOPS as GENERATE_LOOPS
        return GENERATE_LOOPS[mode]
    if serving != "device":
        return (f"the {serving} serving stack's loop: the model's programs per step plus the stack's fixed cost per "
                "step (data/serving.toml), sampling inside the step")
    steps = "one compiled program per step" if mode == "compiled" else "the model's eager ops per step"
    return (f"the model's forward alone: {steps}, greedy choice included; not the device ops transformers' "
            "generate() adds around it each token (argmax, stopping criteria, cache_position: about 40 eager "
            "launches a token, which `neuron-migrate run` measures on the live device and loop='generate' predicts)")


def calibration_error(moe=False):
    """The largest |predicted / published - 1| of the calibration checks (docs/device-clock.md,
    data/calibration.json) for this cost model, as a fraction; None when not calibrated. `moe`:
    of a mixture-of-experts model's figures too (its checks are of their own kinds)."""
    from .calibration import DENSE_KINDS, MOE_KINDS, calibration_error as stored
    return stored(DENSE_KINDS + (MOE_KINDS if moe else ()))


def is_moe(config_or_dir):
    """Whether the model routes tokens to experts (Note [Experts as a MoE kernel runs them])."""
    return _top_k(_load_config(config_or_dir)) is not None


def platform_constant(platform, name):
    """A constant of the platform data file (data/platforms.toml), by platform and name."""
    import tomllib
    path = os.path.join(os.path.dirname(__file__), "data", "platforms.toml")
    with open(path, "rb") as f:
        table = tomllib.load(f)
    if platform not in table:
        raise ValueError(f"platform {platform!r} is not in {path}; choose one of {', '.join(sorted(table))}")
    return table[platform][name]["value"]


def _serving_table(serving):
    import tomllib
    path = os.path.join(os.path.dirname(__file__), "data", "serving.toml")
    with open(path, "rb") as f:
        table = tomllib.load(f)
    if serving not in table:
        raise ValueError(f"serving {serving!r} is not in {path}; choose one of {', '.join(table)}")
    return table[serving]


def serving_overhead_ns(serving):
    """The fixed cost per model step of serving stack `serving` (data/serving.toml)."""
    return _serving_table(serving)["step_overhead_ns"]["value"]


def _nxdi_buckets(max_len):
    """NxD Inference's generate_buckets(128, max_len) (modules/autobucketing.py): powers of two
    from 128 below 2**round(log2(max_len)), then max_len."""
    top = round(math.log2(max_len)) if max_len > 128 else 7
    return [2 ** i for i in range(7, top)] + [max_len]


def prefill_bucket(serving, input_tokens, max_len, buckets=None):
    """The prefill length serving stack `serving` runs for a prompt of `input_tokens`: its program
    is compiled for a few lengths (buckets) and the prompt is padded to the smallest that holds
    it (data/serving.toml `prefill_buckets`, with the stack's documented rule). `max_len`: the
    largest bucket (max_model_len). `buckets`: the stack's buckets given explicitly (NxD
    Inference's context_encoding_buckets), in place of its rule."""
    if buckets is not None:
        if not isinstance(buckets, (list, tuple)) or not buckets or \
                any(type(b) is not int or b < 1 for b in buckets):
            raise ValueError(f"prefill_buckets {buckets!r}: give a non-empty list of whole numbers of positions, "
                             "1 or more (NxD Inference's context_encoding_buckets)")
        if max(buckets) < input_tokens or max(buckets) > max_len:
            raise ValueError(f"prefill buckets {sorted(buckets)}: the largest must hold the prompt ({input_tokens} "
                             f"positions) and fit the cache ({max_len})")
        return min(b for b in buckets if b >= input_tokens)
    rule = _serving_table(serving)["prefill_buckets"]["value"]
    if rule == "none":
        return input_tokens
    if rule == "nxdi-autobucketing":
        buckets = _nxdi_buckets(max_len)
    elif rule == "powers-of-two":  # vLLM Neuron's num_batched_tokens_buckets default
        buckets = [2 ** i for i in range(7, 64) if 2 ** i < max_len] + [max_len]
    else:
        raise ValueError(f"serving {serving!r}: unknown prefill_buckets rule {rule!r} in data/serving.toml")
    return min(b for b in buckets if b >= input_tokens)


def decode_bucket(serving, position, max_len):
    """The cache length a decode step at `position` reads with serving stack `serving`
    (data/serving.toml `decode_buckets`): "nxdi-autobucketing" (NxD Inference's token-generation
    buckets, generate_buckets(128, max_len)), or "max-model-len" (the whole cache)."""
    rule = _serving_table(serving)["decode_buckets"]["value"]
    if rule == "max-model-len":
        return max_len
    if rule == "nxdi-autobucketing":
        return min(b for b in _nxdi_buckets(max_len) if b > position)
    raise ValueError(f"serving {serving!r}: unknown decode_buckets rule {rule!r} in data/serving.toml")


def serving_sequence_parallel(serving):
    """True when the serving stack splits its context encoding's residual stream across the TP
    ranks (data/serving.toml `sequence_parallel`; Note [Prefill as a serving stack's kernel runs it])."""
    return bool(_serving_table(serving)["sequence_parallel"]["value"])


def serving_gqa_attention(serving):
    """True when the serving stack's attention kernel reads each key-value head once for its
    group of query heads (data/serving.toml `gqa_attention`), where transformers' compiled SDPA
    path repeats the key-value heads (repeat_kv) before attention."""
    return bool(_serving_table(serving)["gqa_attention"]["value"])


SERVING = ("device", "nxdi", "vllm-neuron")


def ranks_per_instance(platform, logical_nc_config):
    """Logical cores of one instance (the NeuronLink domain); a TP group larger spans EFA."""
    return (platform_constant(platform, "chips_per_instance") * platform_constant(platform, "physical_cores_per_chip")
            // logical_nc_config)


def collective_ns(algorithm, nbytes, tp, platform, logical_nc_config, spans_instances=None):
    """One collective of `nbytes` over `tp` ranks, as the live clock costs it (_C._cost_collective),
    the ranks packed on chips (physical cores per chip / LNC each) and combined within each chip
    first (Note [Device clock]). `spans_instances`: whether the group's ranks are on more than one
    instance (EFA); default: when there are more of them than one instance holds."""
    if tp <= 1:
        return 0
    if spans_instances is None:
        spans_instances = tp > ranks_per_instance(platform, logical_nc_config)
    link = "efa" if spans_instances else "neuronlink"
    per_chip = platform_constant(platform, "physical_cores_per_chip") // logical_nc_config
    return _C._cost_collective(algorithm, int(nbytes), tp, link, platform, logical_nc_config, per_chip)[0]


LLAMA_STYLE = ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "vocab_size")


EXPERT_WIDTHS = ("moe_intermediate_size", "shared_expert_intermediate_size", "shared_intermediate_size")


def _attribute(config, name):
    """The config's value, or None where it has none (or a per-layer one, which transformers
    refuses to read as one value)."""
    try:
        return getattr(config, name, None)
    except Exception as error:  # noqa: BLE001  (transformers' AmbiguousGlobalPerLayerAttributeError and kin)
        if "per-layer" in str(error):
            return _PER_LAYER
        raise


_PER_LAYER = object()  # a config value transformers keeps per layer


def shard_config(config, tp):
    """One rank's shard of a Llama-style config at tensor parallel degree `tp`."""
    import copy
    missing = [name for name in LLAMA_STYLE + ("head_dim", "num_key_value_heads")
               if _attribute(config, name) is _PER_LAYER]
    if missing:
        raise ValueError(f"this {config.model_type} config sets {', '.join(missing)} per layer (transformers' "
                         "per-layer configs); the dry run shards configs of one value for the whole model")
    missing = [name for name in LLAMA_STYLE if not isinstance(_attribute(config, name), int)]
    if missing:
        raise ValueError(f"the dry run shards Llama-style decoder configs; this {config.model_type} config has no "
                         f"{', '.join(missing)} of one value for the whole model (give a config with "
                         f"{', '.join(LLAMA_STYLE)})")
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp {tp!r} must be a whole number of ranks, 1 or more")
    config = copy.deepcopy(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    config.head_dim = head_dim
    if config.num_attention_heads % tp or config.intermediate_size % tp:
        raise ValueError(f"tp {tp} must divide the {config.num_attention_heads} attention heads and the "
                         f"intermediate size {config.intermediate_size}; choose a divisor")
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    if kv_heads % tp and tp % kv_heads:
        raise ValueError(f"tp {tp} must divide the {kv_heads} key-value heads, or be a multiple of them (each "
                         "rank then holds one, replicated); choose another degree")
    # experts' own widths: routed (Qwen3-MoE, DeepSeek) and shared (Qwen2-MoE, GraniteMoeShared)
    expert_widths = {name: getattr(config, name) for name in EXPERT_WIDTHS if isinstance(getattr(config, name, None), int)}
    for name, width in expert_widths.items():
        if width % tp:
            raise ValueError(f"tp {tp} must divide the experts' {name} {width}; choose a divisor")
    config.num_attention_heads //= tp
    config.num_key_value_heads = max(1, kv_heads // tp)
    config.intermediate_size //= tp
    for name, width in expert_widths.items():
        setattr(config, name, width // tp)
    config.vocab_size = -(-config.vocab_size // tp)  # vocabulary-parallel embedding and LM head
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and pad >= config.vocab_size:  # the shard holding it keeps it at its own index
        config.pad_token_id = pad % config.vocab_size
    return config


# ---- mixture of experts (issue 41 §2) --------------------------------------------------------
# Note [Experts as a MoE kernel runs them]
# transformers computes routed experts on meta as its reference code does (a loop over the experts
# hit, or every expert densely), which costs every expert's weights for every step. A MoE kernel
# (NxD Inference's, vLLM Neuron's) runs the experts the step's tokens were routed to, as one
# grouped matmul: for T tokens with top-k of E experts under uniform routing, the step touches
# E * (1 - (1 - k/E)^T) distinct experts on average (k for one decoding token, all E for a long
# prefill), reads each one's weights once, and does T * k rows of work in all. In the dry run
# each experts module's forward is replaced by that work (_moe_kernel_forward): a batched matmul
# over the touched experts' weights, T * k / touched rows each; the router (its linear, softmax,
# top-k) and shared experts run as transformers computes them. TP shards the experts' inner
# dimension (shard_config divides intermediate_size and EXPERT_WIDTHS, shared experts' too); the decode MBU
# counts the experts one token touches. Routing is uniform unless a skew is stated
# (predict(routing_skew=s): expert i chosen in proportion to 1 / (i + 1)^s, expected_experts).
# Not modelled: expert parallelism.
MOE_TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_top_k", "top_k")


# The routing skew a prediction assumes (predict(routing_skew=...)): 0 is uniform routing.
_ROUTING_SKEW = contextvars.ContextVar("routing_skew", default=0.0)


@contextlib.contextmanager
def _routing(skew):
    """The routing skew the predictions made inside assume (checked)."""
    token = _ROUTING_SKEW.set(_check_skew(skew))
    try:
        yield
    finally:
        _ROUTING_SKEW.reset(token)


def _check_skew(skew):
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not math.isfinite(skew) or skew < 0:
        raise ValueError(f"routing_skew {skew!r}: give a number of 0 or more (0: uniform routing; s: expert i of "
                         "E is chosen in proportion to 1 / (i + 1)^s)")
    return float(skew)


def expected_experts(experts, top_k, tokens, skew=None):
    """Distinct experts T tokens touch with top-k of E (at least k). Routing skew s (default: the
    prediction's, 0): expert i is chosen with probability q_i = min(1, k p_i), p_i proportional to
    1 / (i + 1)^s (Zipf); E(distinct) = sum_i 1 - (1 - q_i)^T. s = 0 is uniform routing:
    E (1 - (1 - k/E)^T)."""
    if tokens <= 0:
        return 0
    skew = _check_skew(_ROUTING_SKEW.get() if skew is None else skew)
    if skew == 0:
        expected = experts * (1 - (1 - top_k / experts) ** tokens)
    else:
        weights = [(i + 1) ** -skew for i in range(experts)]
        total = sum(weights)
        expected = sum(1 - (1 - min(1.0, top_k * w / total)) ** tokens for w in weights)
    return max(min(top_k, experts), min(experts, math.ceil(expected - 1e-9)))


def _expert_weights(module):
    """The experts' weight matrices as [E, rows, cols] views, in the module's order."""
    experts = getattr(module, "num_experts", None) or getattr(module, "moe_num_experts", None)
    weights = []
    for parameter in module.parameters():
        if parameter.dim() == 3:
            weights.append(parameter)
        elif parameter.dim() == 2 and experts and parameter.shape[0] % experts == 0 and parameter.shape[0] > experts:
            weights.append(parameter.view(experts, parameter.shape[0] // experts, parameter.shape[1]))  # DBRX
    return weights


def _moe_kernel_forward(module, top_k):
    weights = _expert_weights(module)
    experts = weights[0].shape[0]
    skew = _ROUTING_SKEW.get()  # read as the model is built: Dynamo cannot trace a ContextVar

    def forward(hidden_states, *args, **kwargs):
        hidden = hidden_states.shape[-1]
        tokens = hidden_states.numel() // hidden
        touched = expected_experts(experts, top_k, tokens, skew)
        rows = math.ceil(tokens * top_k / touched)
        x = hidden_states.new_zeros(touched, rows, hidden)
        for weight in weights:
            weight = weight[:touched]
            if x.shape[-1] == weight.shape[1]:
                x = torch.bmm(x, weight)
            elif x.shape[-1] == weight.shape[2]:
                x = torch.bmm(x, weight.transpose(1, 2))
            else:  # after a gated unit: half the width (gate * up)
                width = weight.shape[1] if weight.shape[1] < x.shape[-1] else weight.shape[2]
                x = x[..., :width]
                x = torch.bmm(x, weight if weight.shape[1] == width else weight.transpose(1, 2))
        return hidden_states + x.sum().to(hidden_states.dtype)
    return forward


def _top_k(config):
    """Experts per token of a mixture-of-experts config, or None."""
    top_k = next((getattr(config, name) for name in MOE_TOP_K if isinstance(getattr(config, name, None), int)), None)
    ffn = getattr(config, "ffn_config", None)  # DBRX keeps it there
    if top_k is None and ffn is not None:
        top_k = getattr(ffn, "moe_top_k", None)
    return top_k


def _routed_experts_as_a_kernel(model):
    """Note [Experts as a MoE kernel runs them]: each experts module of `model` (a class named
    ...Experts holding per-expert weight matrices) computes what a MoE kernel does."""
    top_k = _top_k(model.config)
    if not top_k:
        return 0
    replaced = 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts") and _expert_weights(module):
            module.forward = _moe_kernel_forward(module, top_k)
            replaced += 1
    return replaced


def _load_config(config_or_dir):
    """The config (from its folder); a multimodal model's is its text decoder's (what generates
    text: transformers' get_text_config()), where the outer config has no decoder sizes."""
    from transformers import AutoConfig
    config = config_or_dir if not isinstance(config_or_dir, str) else AutoConfig.from_pretrained(config_or_dir)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if text is not config and _attribute(config, "hidden_size") is None and _attribute(text, "hidden_size"):
        return text
    return config


def build(config_or_dir, tp=1, dtype=torch.bfloat16, layers=None, attention=ATTENTION):
    """The model of one rank on the meta device (no weights), from a config or a config folder;
    `layers` keeps the first that many decoder layers; `attention`: ATTENTION (transformers' SDPA
    path, as the live model) or one of ATTENTION_STACK (a serving stack's kernels)."""
    from transformers import AutoModelForCausalLM
    config = shard_config(_load_config(config_or_dir), tp)
    if layers is not None:
        config.num_hidden_layers = layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:layers]
    _register_attention()
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
        except KeyError as error:  # the model's own table of attention classes, without the dry run's
            raise ValueError(f"the dry run cannot build this {config.model_type} model with its attention "
                             f"({attention!r}: the model picks its attention from a table of its own, which lacks "
                             f"{error}); the dry run costs models that take transformers' attention interface") from None
    _routed_experts_as_a_kernel(model)
    return model.eval()


def generate_costed(model, input_tokens, output_tokens, mode_factory, device="meta"):
    """Greedy generation of `output_tokens` after a prefill of `input_tokens` (batch 1), each
    forward under a fresh mode from `mode_factory`; returns the prefill's mode and the decode
    steps' modes. The first token comes from the prefill (TTFT), each later one from a step."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    ids = torch.zeros(1, input_tokens, dtype=torch.long, device=device)
    modes = []
    with torch.no_grad():
        for step in range(output_tokens):
            mode = mode_factory()
            with mode:
                logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
                ids = logits[:, -1:].argmax(-1)
            modes.append(mode)
    return modes[0], modes[1:]


class ProgramCosts:
    """A Dynamo backend that lowers each graph with the neuron backend's own passes and lowering
    (compile/passes.py, compile/lowering.py: the program the device would run) and costs the
    program as the live executor would (`_C._cost_program`); the graph itself runs as traced
    (on meta). `ns` and `calls` accumulate over the programs' calls."""

    def __init__(self, platform, logical_nc_config):
        from torch._dynamo.backends.common import aot_autograd
        from .compile.backend import _decompositions
        self.platform, self.lnc = platform, logical_nc_config
        self.ns = 0
        self.calls = 0
        self.nodes = []  # per program compiled: its steps
        # (tp, hidden, tokens): the programs compiled now are split by sequence parallelism
        # (Note [Prefill as a serving stack's kernel runs it]); None: plain TP
        self.sequence_parallel = None
        self.backend = aot_autograd(fw_compiler=self._compile, inference_compiler=self._compile,
                                    decompositions=_decompositions(), keep_inference_input_mutations=True)

    def _compile(self, gm, example_inputs):
        import copy
        from . import op_set
        from .compile import passes
        from .compile.lowering import lower
        lowered = copy.deepcopy(gm)  # the passes rewrite it for the device; `gm` runs on meta
        passes.run_passes(lowered, on_device_ops=op_set.on_device())
        desc, _ = lower(lowered, f"dry_run_{len(self.nodes)}", metadata={}, device_type="meta")
        if self.sequence_parallel and self.sequence_parallel[0] > 1:
            (ns, *_), steps = _C._cost_program(desc, self.platform, self.lnc, True)
            ns -= _sequence_parallel_ns(desc, steps, self.sequence_parallel[1], self.sequence_parallel[2],
                                        self.sequence_parallel[0])
        else:
            ns = _C._cost_program(desc, self.platform, self.lnc)[0]
        self.nodes.append(len(desc["nodes"]))

        def run(*args):
            self.ns += ns
            self.calls += 1
            return gm(*args)
        return run


def _compiled_forward_ns(config, tp, platform, logical_nc_config, input_tokens, cache_len, layers=None,
                        step_tokens=1, gqa_attention=None, prefill_tokens=None, decode_cache_len=None, batch=1,
                        sequence_parallel=False):
    """(prefill ns, decode step ns, programs per forward) of one rank, compiled: the prefill of
    `input_tokens` (run as `prefill_tokens`, a serving stack's bucket) into a static KV cache of
    `cache_len` positions, and one decode step of `step_tokens` (a speculative verify step:
    several) at position `input_tokens` over a cache of `decode_cache_len` (default `cache_len`:
    a compiled decode step reads its whole cache bucket). `gqa_attention` None: the model as
    transformers runs it (the cache allocated at its first update, inside the prefill program, as
    the live model's); True or False: a serving stack's (the caches allocated before the programs,
    as a stack allocates its cache at load, its attention kernels, ATTENTION_STACK), with or
    without grouped key-value heads read once. `batch`: the decode step runs that many sequences
    at once (a continuous-batching step; the prefill stays one request's). `sequence_parallel`:
    the prefill's residual stream is split across the TP ranks (Note [Prefill as a serving
    stack's kernel runs it])."""
    from transformers import StaticCache
    prefill_tokens = prefill_tokens or input_tokens
    decode_cache_len = decode_cache_len or cache_len
    if prefill_tokens > cache_len or input_tokens + step_tokens > decode_cache_len:
        raise ValueError(f"a prefill of {prefill_tokens} positions into a cache of {cache_len}, or a step at position "
                         f"{input_tokens} of {step_tokens} tokens into one of {decode_cache_len}, does not fit")
    stack = gqa_attention is not None
    model = build(config, tp, layers=layers, attention=ATTENTION_STACK[gqa_attention] if stack else ATTENTION)
    shard = model.config
    head_dim = getattr(shard, "head_dim", None) or shard.hidden_size // shard.num_attention_heads

    def allocated(length, sequences=1):
        try:
            cache = StaticCache(config=shard, max_cache_len=length)
        except KeyError as error:  # a layer type transformers' static cache has no layer for
            raise ValueError(f"this {shard.model_type} model has layers transformers' StaticCache cannot hold "
                             f"(layer type {error}): it is not compiled with a static cache; try mode='eager' "
                             "(--mode eager)") from None
        if not stack:
            return cache
        cache.early_initialization(batch_size=sequences, num_heads=shard.num_key_value_heads, head_dim=head_dim,
                                   dtype=torch.bfloat16, device=torch.device("meta"))
        return cache

    costs = ProgramCosts(platform, logical_nc_config)
    torch._dynamo.reset()  # one trace per shape and model: no guards left from another run
    forward = torch.compile(model.forward, backend=costs.backend, fullgraph=True, dynamic=False)
    measured = []
    with torch.no_grad(), routed_attention(), torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        for ids, positions, cache in ((torch.zeros(1, prefill_tokens, dtype=torch.long, device="meta"),
                                       torch.arange(prefill_tokens, device="meta"), allocated(cache_len)),
                                      (torch.zeros(batch, step_tokens, dtype=torch.long, device="meta"),
                                       torch.arange(input_tokens, input_tokens + step_tokens, device="meta"),
                                       allocated(decode_cache_len, batch))):
            before_ns, before_calls = costs.ns, costs.calls
            prefill = not measured
            cache_length = cache_len if prefill else decode_cache_len
            # a rank's MLP as wide as the hidden size would look like the residual stream: then
            # nothing is split (the prefill is costed as plain TP, never the MLP's work divided)
            split = sequence_parallel and getattr(shard, "intermediate_size", None) != shard.hidden_size
            costs.sequence_parallel = (tp, shard.hidden_size, prefill_tokens) if prefill and split else None
            global _STACK_PREFILL
            _STACK_PREFILL = prefill
            try:
                forward(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1,
                        cache_position=positions)
            except Exception as error:  # noqa: BLE001  (Dynamo's and the model's own errors)
                torch._dynamo.reset()
                raise RuntimeError(
                    f"the dry run could not trace this {model.config.model_type} model compiled (a forward of "
                    f"{ids.shape[1]} tokens over a static cache of {cache_length} positions): "
                    f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}. "
                    "Try mode='eager' (--mode eager)") from error
            measured.append((costs.ns - before_ns, costs.calls - before_calls))
    torch._dynamo.reset()
    (prefill_ns, programs), (decode_ns, _) = measured
    return prefill_ns, decode_ns, programs


def _layer_signature(layer):
    """What makes two decoder layers cost the same: their modules' kinds, parameter shapes and
    attention settings."""
    parts = [(name, type(module).__name__) for name, module in layer.named_modules()]
    parts += [(name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters()]
    attention = getattr(layer, "self_attn", None)
    for name in ("attention_type", "sliding_window", "is_sliding", "is_causal"):
        parts.append((name, repr(getattr(layer, name, None)), repr(getattr(attention, name, None))))
    return tuple(parts)


def _uniform_layers(config, tp):
    """True when every decoder layer from the third on is built like the third (a one-rank shard
    on meta, no memory): then a two- and a three-layer trace give every layer's cost."""
    model = build(config, tp)
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or len(layers) != config.num_hidden_layers:
        return False
    third = _layer_signature(layers[2])
    return all(_layer_signature(layer) == third for layer in layers[3:])


def compiled_forward_ns(config, tp, platform, logical_nc_config, input_tokens, cache_len, step_tokens=1,
                        gqa_attention=None, prefill_tokens=None, decode_cache_len=None, batch=1,
                        sequence_parallel=False):
    """As _compiled_forward_ns for the whole model. Layers of one kind are costed from a two-layer
    and a three-layer trace: the third layer's cost (a layer between two others, its residual
    fused with its neighbours as inside the whole model) times each layer past the second."""
    layers = config.num_hidden_layers
    args = (config, tp, platform, logical_nc_config, input_tokens, cache_len)
    kw = dict(step_tokens=step_tokens, gqa_attention=gqa_attention, prefill_tokens=prefill_tokens,
              decode_cache_len=decode_cache_len, batch=batch, sequence_parallel=sequence_parallel)
    if layers <= 3 or not _uniform_layers(config, tp):
        return _compiled_forward_ns(*args, **kw)
    two = _compiled_forward_ns(*args, layers=2, **kw)
    three = _compiled_forward_ns(*args, layers=3, **kw)
    return tuple(extrapolated(two[:2], three[:2], layers)) + (two[2],)


def extrapolated(two, three, layers):
    """Figures of a model of `layers` uniform layers from those of its two- and three-layer
    traces: the third layer's share (a layer between two others) times each layer past the second."""
    return [a + (layers - 2) * (b - a) for a, b in zip(two, three)]


def _collectives_ns(config, tokens, tp, platform, logical_nc_config, itemsize=2, sequences=1):
    """One forward's collectives of one rank: two all-reduces of the hidden states per decoder
    layer, and the gather of the last position's logits from the vocabulary shards, for
    `sequences` sequences of `tokens` positions each."""
    per_layer = 2 * collective_ns("allreduce", sequences * tokens * config.hidden_size * itemsize, tp, platform,
                                  logical_nc_config)
    logits = collective_ns("allgather", sequences * config.vocab_size * 4, tp, platform, logical_nc_config)
    return config.num_hidden_layers * per_layer + logits


def _model_figures(config, tp, input_tokens, context, itemsize=2):
    """(prefill FLOPs, decode-step bytes) of one rank: 2 FLOPs per weight per token plus causal
    attention's q.k and p.v; a step reads every weight once and the KV cache of `context`."""
    shard = shard_config(config, tp)
    with torch.device("meta"):
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_config(shard)
    embedding = model.get_input_embeddings().weight
    weights = sum(p.numel() for p in model.parameters() if p is not embedding)
    top_k = _top_k(shard)
    for module in model.modules():  # a decode step reads the experts one token touches (Note [Experts as ...])
        experts = _expert_weights(module) if type(module).__name__.endswith("Experts") and top_k else []
        if experts:
            count = experts[0].shape[0]
            weights -= sum(w.numel() for w in experts) * (1 - expected_experts(count, top_k, 1) / count)
    head = model.get_output_embeddings()
    if head is not None and head.weight is embedding:
        weights += embedding.numel()  # tied: the LM head reads the embedding's matrix
    heads_dim = shard.num_attention_heads * shard.head_dim
    flops = 2 * weights * input_tokens + 2 * shard.num_hidden_layers * heads_dim * input_tokens * input_tokens
    kv = 2 * shard.num_hidden_layers * shard.num_key_value_heads * shard.head_dim * context * itemsize
    return flops, weights * itemsize + kv


def predict(config_or_dir, platform="trn2", tp=1, logical_nc_config=None, input_tokens=192, output_tokens=192,
            mode="compiled", serving="device", step_tokens=1, max_model_len=None, prefill_buckets=None,
            routing_skew=0.0, loop="forward"):
    """Predicted TTFT and per-token latency of greedy generation, batch 1 (see the module's doc).
    `logical_nc_config` defaults to the platform's (2 on trn2/trn3, 1 on trn1).
    `serving` adds a serving stack's fixed cost per step (data/serving.toml; "device": none);
    `step_tokens` > 1 predicts a speculative verify step of that many tokens (compiled only;
    per_token_ms is then the step's time). `max_model_len` is the static KV cache's length
    (default: input + output tokens): a compiled step reads all of it, as vLLM Neuron's decode
    programs read their whole `max_model_len` block table. `prefill_buckets`: the serving
    stack's prefill lengths given explicitly (NxD Inference's context_encoding_buckets; default:
    the stack's rule, data/serving.toml). `routing_skew`: of a mixture-of-experts model's router
    (expected_experts; 0, the default, is uniform: Note [Experts as a MoE kernel runs them]).
    `loop`: "forward" (the model's forward per step, loop_of) or "generate" (transformers'
    generate() as the user calls it, its own eager ops per token included: generate_loop.py;
    the device alone, one token per step).
    Raises ValueError when `tp` does not divide the
    model's heads or MLP, or for an unknown platform, mode, loop or serving stack."""
    with _routing(routing_skew):
        return _predict(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, mode, serving,
                        step_tokens, max_model_len, prefill_buckets, loop)


def _predict(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, mode, serving, step_tokens,
             max_model_len, prefill_buckets, loop="forward"):
    if loop not in LOOPS:
        raise ValueError(f"loop {loop!r}: choose one of {', '.join(LOOPS)}")
    if mode not in ("compiled", "eager"):
        raise ValueError(f"mode {mode!r}: choose 'compiled' (what NxD Inference and vLLM run) or 'eager'")
    if input_tokens < 1 or output_tokens < 1:
        raise ValueError(f"input_tokens {input_tokens} and output_tokens {output_tokens} must be at least 1")
    config = _load_config(config_or_dir)
    most = platform_constant(platform, "max_logical_nc_config")  # an unknown platform is refused here
    if logical_nc_config is None:
        logical_nc_config = int(most)  # the platform's default: LNC 2 on trn2 and trn3, 1 on trn1
    if logical_nc_config not in range(1, int(most) + 1):
        raise ValueError(f"logical core configuration (LNC) {logical_nc_config} is not offered on {platform} "
                         f"(1 to {int(most)})")
    overhead_ns = serving_overhead_ns(serving)
    if loop == "generate":
        stack = {"serving": serving != "device", "step_tokens": step_tokens != 1, "max_model_len": max_model_len,
                 "prefill_buckets": prefill_buckets}
        if any(stack.values()):
            raise ValueError("loop 'generate' is transformers' generate() on the device alone; "
                             f"{', '.join(k for k, v in stack.items() if v)}: a serving stack's loop (loop 'forward')")
        from .generate_loop import predict_generate
        return predict_generate(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, mode)
    if step_tokens != 1 and mode != "compiled":
        raise ValueError("step_tokens > 1 (a verify step) is predicted in compiled mode only")
    shard_config(config, tp)  # a TP degree that does not divide is refused before any trace
    prefill_tokens = input_tokens
    if mode == "compiled":
        cache_len = max_model_len or input_tokens + output_tokens
        if cache_len < input_tokens + output_tokens:
            raise ValueError(f"max_model_len {cache_len} is shorter than {input_tokens} input + {output_tokens} "
                             "output tokens")
        prefill_tokens = prefill_bucket(serving, input_tokens, cache_len, prefill_buckets)
        # The decode step reads its whole cache bucket: NxD Inference's token-generation buckets
        # (the one holding the generation's middle position), else all of max_model_len (vLLM
        # Neuron's block table, a static cache).
        decode_cache_len = decode_bucket(serving, input_tokens + output_tokens // 2, cache_len)
        prefill_ns, step_ns, programs = compiled_forward_ns(
            config, tp, platform, logical_nc_config, input_tokens, cache_len + step_tokens - 1, step_tokens,
            None if serving == "device" else serving_gqa_attention(serving), prefill_tokens,
            decode_cache_len + step_tokens - 1, sequence_parallel=serving_sequence_parallel(serving))
        prefill_launches = decode_launches = programs
    else:
        model = build(config, tp)
        prefill, steps = generate_costed(model, input_tokens, output_tokens,
                                         lambda: CostingMode(platform, logical_nc_config))
        prefill_ns = prefill.ns
        step_ns = sum(m.ns for m in steps) / len(steps) if steps else 0.0
        prefill_launches, decode_launches = prefill.launches, steps[0].launches if steps else 0
    step_collectives = _collectives_ns(config, step_tokens, tp, platform, logical_nc_config)
    ttft_ns = prefill_ns + _collectives_ns(config, prefill_tokens, tp, platform, logical_nc_config) + overhead_ns
    per_token_ns = step_ns + step_collectives + overhead_ns if output_tokens > 1 else float("nan")
    flops, step_bytes = _model_figures(config, tp, input_tokens, input_tokens + output_tokens // 2)
    peak_flops, peak_bytes = _C._peak_rates(platform, logical_nc_config)
    return Prediction(
        platform=platform, tp=tp, mode=mode, serving=serving, logical_nc_config=logical_nc_config, ttft_ms=ttft_ns / 1e6, per_token_ms=per_token_ns / 1e6,
        prefill_launches=prefill_launches, decode_launches=decode_launches,
        collectives_ms_per_token=step_collectives / 1e6,
        mfu_prefill=flops / (ttft_ns * 1e-9) / peak_flops,
        mbu_decode=step_bytes / (per_token_ns * 1e-9) / peak_bytes if output_tokens > 1 else float("nan"),
        prefill_tokens=prefill_tokens, loop=loop_of(mode, serving))


# ---- serving under load (issue 41 §1) -------------------------------------------------------
# Note [Serving under load]
# A serving stack (vLLM Neuron, NxD Inference) batches concurrent requests: continuous batching.
# The dry run costs the programs such a stack runs, compiled: one request's prefill (context
# encoding, padded to the stack's prefill bucket), and a decode step of B sequences (token
# generation), for B in the stack's batch buckets (powers of two up to max_num_seqs, the level's
# concurrency: a step of b running sequences runs the smallest bucket that holds them, as vLLM
# Neuron pads its decode batch). simulate() then serves requests over those step costs:
# - closed loop (simulate): `concurrency` clients, each sending its next request when its last one
#   ends, `requests_per_client` each, all starting at time 0; open loop (simulate_rate): requests
#   arriving at a fixed rate, at most max_num_seqs running at once, the others waiting;
# - the scheduler, as vLLM's default without chunked prefill: waiting requests' prefills run
#   before the next decode step (prefills first, one request at a time); a request's first token
#   comes from its prefill;
# - a decode step gives every running sequence one token; the stack's fixed cost per step is paid
#   once per step, shared by the batch;
# - the requests' lengths: every request input_tokens in and output_tokens out, or `lengths`, a
#   list of (input, output) pairs served in turn (a workload's prompts): each prompt's prefill is
#   costed at its own length (its prefill bucket), the decode steps at the requests' mean position
#   over a cache holding the longest;
# - chunked prefill (`chunked_prefill`: a step's token budget, vLLM's max_num_batched_tokens, the
#   guide's PREFILL_CHUNK_SIZE), decodes first as vLLM's scheduler: each step runs the running
#   sequences' next tokens, then the next chunk of one waiting prompt in the budget they leave
#   (vLLM packs several prompts' chunks into what is left; here one prompt a step, so a budget
#   far above the prompts' lengths is used less fully than vLLM would); a prompt's first token
#   comes with its last chunk. The budget must hold the batch (at least the largest concurrency,
#   as vLLM requires: max_num_batched_tokens >= max_num_seqs). A chunk of c tokens is costed as the compiled program
#   of c new tokens over the cache (padded to chunk_buckets: powers of two from 128, then the
#   budget); a step with decodes and a chunk is one program: the two programs' times less one
#   read of the weights at the peak HBM rate (never less than either), the stack's cost once.
# Outputs per level: output tokens/s (all requests' output over the time to serve them), TTFT
# (arrival to the first token), TPOT (time per later token), request latency, each P50/P95.
# Not modelled: sequences at their own positions (a compiled step reads its whole cache bucket,
# whatever the positions), prefix caching, speculative decoding under load, preemption when the
# KV cache is full.


@dataclasses.dataclass
class ServingLevel:
    """Predicted serving figures at one concurrency level (milliseconds)."""
    concurrency: int
    requests: int
    tokens_per_s: float
    ttft_ms: dict  # {"p50", "p95"}
    tpot_ms: dict
    latency_ms: dict
    decode_step_ms: dict  # batch bucket -> one decode step's time, collectives and stack overhead included
    rate_per_s: float = None  # open loop: the arrival rate (None: closed loop at `concurrency`)


def _percentiles(values):
    ordered = sorted(values)
    if not ordered:
        return {"p50": float("nan"), "p95": float("nan")}

    def at(q):  # linear interpolation, as numpy.percentile's default
        position = (len(ordered) - 1) * q
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return {"p50": at(0.5), "p95": at(0.95)}


def batch_buckets(max_num_seqs):
    """The decode batch sizes a stack compiles for up to `max_num_seqs`: powers of two, then it."""
    buckets = [b for b in (2 ** i for i in range(0, 16)) if b < max_num_seqs]
    return buckets + [max_num_seqs]


def _serve_requests(prefill_ms, decode_step_ms, arrivals, max_running, next_arrival, chunk_tokens=None,
                    chunk_ms=None, overhead_ms=0.0, shared_ms=0.0):
    """The scheduler of Note [Serving under load] over `arrivals` [(time, client, (input tokens,
    output tokens))]; a finished request's client asks `next_arrival(client, now)` for its next
    one ((time, (input, output)) or None: no more). `prefill_ms(input tokens)`: a whole prefill's
    time. With `chunk_tokens` (a step's token budget: chunked prefill), `chunk_ms(tokens)` is a
    prefill chunk's time within a step (its stack overhead left out: the step pays `overhead_ms`
    once); a step with decodes and a chunk is one program: their times added less `shared_ms`
    (reading the weights once; never less than either part). Returns ([(arrival, first token, end, output tokens)], the time the last request ended)."""
    buckets = sorted(decode_step_ms)
    waiting = [(time, client, tuple(lengths)) for time, client, lengths in arrivals]
    running = []  # [arrival, first_token_at, tokens_made, client, output tokens]
    prefilling = None  # chunked: [arrival, client, input, output, positions done]
    done = []
    now = 0.0

    def finished(request):
        done.append((request[0], request[1], now, request[4]))
        follow = next_arrival(request[3], now)
        if follow is not None:
            waiting.append((follow[0], request[3], tuple(follow[1])))

    def admitted(arrival, client, output):  # its first token has just come
        request = [arrival, now, 1, client, output]
        if output == 1:
            finished(request)
        else:
            running.append(request)

    def decode():
        for request in list(running):
            request[2] += 1
            if request[2] == request[4]:
                running.remove(request)
                finished(request)

    def step_ms():
        return decode_step_ms[next((b for b in buckets if b >= len(running)), buckets[-1])]

    while waiting or running or prefilling:
        waiting.sort(key=lambda item: (item[0], item[1]))
        ready = bool(waiting) and waiting[0][0] <= now
        if chunk_tokens is None:
            if ready and len(running) < max_running:
                arrival, client, (inputs, output) = waiting.pop(0)
                now += prefill_ms(inputs)
                admitted(arrival, client, output)
                continue
            if not running:  # nothing to run until the next arrival
                now = waiting[0][0]
                continue
            now += step_ms()
            decode()
            continue
        # chunked prefill: each step runs the running sequences' next tokens, then as much of one
        # request's prompt as the step's token budget leaves (vLLM's scheduler: decodes first)
        if prefilling is None and ready and len(running) < max_running:
            arrival, client, (inputs, output) = waiting.pop(0)
            prefilling = [arrival, client, inputs, output, 0]
        chunk = min(chunk_tokens - len(running), prefilling[2] - prefilling[4]) if prefilling else 0
        if not running and chunk <= 0:  # nothing to run until the next arrival
            now = waiting[0][0]
            continue
        if chunk > 0 and running:  # one program: the weights both would read are read once
            now += max(step_ms(), chunk_ms(chunk) + overhead_ms, step_ms() + chunk_ms(chunk) - shared_ms)
        else:
            now += step_ms() if running else overhead_ms + chunk_ms(chunk)
        decode()
        if chunk > 0:
            prefilling[4] += chunk
            if prefilling[4] == prefilling[2]:
                arrival, client, _, output, _ = prefilling
                prefilling = None
                admitted(arrival, client, output)
    return done, now


def _level(done, span_ms, concurrency, decode_step_ms, rate=None):
    ttft = [first - arrival for arrival, first, _, _ in done]
    latency = [end - arrival for arrival, _, end, _ in done]
    tpot = [(end - first) / (output - 1) for _, first, end, output in done if output > 1]
    produced = sum(output for *_, output in done)
    return ServingLevel(concurrency=concurrency, requests=len(done),
                        tokens_per_s=produced / span_ms * 1000 if span_ms > 0 else float("nan"),
                        ttft_ms=_percentiles(ttft), tpot_ms=_percentiles(tpot), latency_ms=_percentiles(latency),
                        decode_step_ms=dict(decode_step_ms), rate_per_s=rate)


def _positive_rate(rate):
    """A request rate the scheduler can serve: a number above 0 (inf: all at once; not NaN)."""
    return isinstance(rate, (int, float)) and not math.isnan(rate) and rate > 0


def _check_lengths(lengths):
    """[(input tokens, output tokens)] of the requests, checked."""
    if not isinstance(lengths, (list, tuple)) or not lengths or any(
            not isinstance(pair, (list, tuple)) or len(pair) != 2 or
            any(type(n) is not int or n < 1 for n in pair) for pair in lengths):
        raise ValueError(f"lengths {lengths!r}: give a non-empty list of (input tokens, output tokens) pairs, "
                         "whole numbers 1 or more")
    return [tuple(pair) for pair in lengths]


def _as_function(costs):
    return costs if callable(costs) else lambda _: costs


def simulate(prefill_ms, decode_step_ms, output_tokens, concurrency, requests_per_client=4, lengths=None,
             chunk_tokens=None, chunk_ms=None, overhead_ms=0.0, shared_ms=0.0):
    """Note [Serving under load]: serves `concurrency` closed-loop clients over the step costs
    (`decode_step_ms`: batch bucket -> ms of one step; `prefill_ms`: ms, or a function of the
    prompt's tokens); returns a ServingLevel. `lengths` [(input, output)]: the requests' lengths
    in turn (the r-th request of client c is lengths[(c x requests_per_client + r) % n]; default:
    every request `output_tokens` out). `chunk_tokens`, `chunk_ms`, `overhead_ms`: chunked prefill
    (_serve_requests)."""
    if concurrency < 1 or requests_per_client < 1:
        raise ValueError(f"concurrency {concurrency} and requests_per_client {requests_per_client} must be 1 or more")
    lengths = _default_lengths(lengths, output_tokens)
    _check_chunking(chunk_tokens, chunk_ms, concurrency)
    sent = {client: 0 for client in range(concurrency)}

    def request(client):
        return lengths[(client * requests_per_client + sent[client]) % len(lengths)]

    def again(client, now):
        sent[client] += 1
        return (now, request(client)) if sent[client] < requests_per_client else None
    done, end = _serve_requests(_as_function(prefill_ms), decode_step_ms,
                                [(0.0, client, request(client)) for client in range(concurrency)], concurrency, again,
                                chunk_tokens, chunk_ms, overhead_ms, shared_ms)
    return _level(done, end, concurrency, decode_step_ms)


def _check_chunking(chunk_tokens, chunk_ms, max_running=1):
    if chunk_tokens is None:
        return
    if type(chunk_tokens) is not int or chunk_tokens < 1 or chunk_ms is None:
        raise ValueError(f"chunked prefill {chunk_tokens!r}: give the step's token budget, a whole number 1 or more "
                         "(vLLM's max_num_batched_tokens), with the chunk's cost")
    if chunk_tokens < max_running:  # vLLM's SchedulerConfig refuses it too: the batch could never fill
        raise ValueError(f"chunked prefill {chunk_tokens}: a step's token budget below the batch ({max_running} "
                         "sequences) never runs the batch full; give a budget of at least the largest concurrency "
                         "(vLLM: max_num_batched_tokens >= max_num_seqs)")


def _default_lengths(lengths, output_tokens):
    """The requests' lengths, checked: `lengths`, or every request `output_tokens` out."""
    if lengths is not None:
        return _check_lengths(lengths)
    if type(output_tokens) is not int or output_tokens < 1:
        raise ValueError(f"output_tokens {output_tokens!r}: give the tokens each request makes, a whole number 1 "
                         "or more (or the requests' lengths)")
    return [(1, output_tokens)]


def simulate_rate(prefill_ms, decode_step_ms, output_tokens, rate_per_s, requests, max_num_seqs, lengths=None,
                  chunk_tokens=None, chunk_ms=None, overhead_ms=0.0, shared_ms=0.0):
    """Open loop: `requests` arriving at `rate_per_s` (evenly spaced), at most `max_num_seqs`
    running at once (the stack's batch), the rest waiting; a ServingLevel whose `concurrency` is
    max_num_seqs. Throughput counts from the first arrival to the last answer. `lengths` and
    chunking as simulate's (request k is lengths[k % n])."""
    if not _positive_rate(rate_per_s) or requests < 1 or max_num_seqs < 1:
        raise ValueError(f"rate {rate_per_s!r} must be a number above 0, requests {requests} and max_num_seqs "
                         f"{max_num_seqs} 1 or more")
    lengths = _default_lengths(lengths, output_tokens)
    _check_chunking(chunk_tokens, chunk_ms, max_num_seqs)
    arrivals = [(index * 1000.0 / rate_per_s, index, lengths[index % len(lengths)]) for index in range(requests)]
    done, end = _serve_requests(_as_function(prefill_ms), decode_step_ms, arrivals, max_num_seqs,
                                lambda client, now: None, chunk_tokens, chunk_ms, overhead_ms, shared_ms)
    return _level(done, end, max_num_seqs, decode_step_ms, rate=rate_per_s)


def serve(config_or_dir, platform="trn2", tp=1, logical_nc_config=None, input_tokens=192, output_tokens=192,
          concurrency=(1,), serving="device", max_model_len=None, requests_per_client=4, rates=(), routing_skew=0.0,
          prefill_buckets=None, lengths=None, chunked_prefill=None):
    """[ServingLevel] per concurrency level (Note [Serving under load]), compiled programs: each
    prompt's prefill and a decode step per batch bucket up to the largest level, each costed as
    predict() costs it (collectives, the stack's fixed cost per step); then one per arrival rate in
    `rates` (requests/s, open loop, max_num_seqs the largest concurrency level); `routing_skew` and
    `prefill_buckets` as predict's. `lengths` [(input tokens, output tokens)]: the requests' own
    lengths, served in turn (a workload's prompts; default: every request input_tokens in and
    output_tokens out). `chunked_prefill`: a step's token budget (vLLM's max_num_batched_tokens,
    the guide's PREFILL_CHUNK_SIZE): prompts are prefilled in chunks inside the decode steps."""
    with _routing(routing_skew):
        return _serve(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, concurrency,
                      serving, max_model_len, requests_per_client, rates, prefill_buckets, lengths, chunked_prefill)


MAX_PREFILL_PROGRAMS = 16  # distinct prefill lengths one serve() traces


def chunk_buckets(chunk_tokens):
    """The token counts a chunk's program is compiled for up to a step's budget: powers of two from
    128 below it, then the budget (vLLM Neuron's num_batched_tokens_buckets rule)."""
    return [2 ** i for i in range(7, 64) if 2 ** i < chunk_tokens] + [chunk_tokens]


def _serve(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, concurrency, serving,
           max_model_len, requests_per_client, rates, prefill_buckets, lengths=None, chunked_prefill=None):
    if not concurrency or any(not isinstance(c, int) or c < 1 for c in concurrency):
        raise ValueError(f"concurrency {concurrency!r}: give one or more whole numbers of requests, 1 or more")
    if any(not _positive_rate(r) for r in rates):
        raise ValueError(f"rates {rates!r}: give request rates (requests per second) above 0")
    if not isinstance(requests_per_client, int) or requests_per_client < 1:
        raise ValueError(f"requests_per_client {requests_per_client!r}: give 1 or more")
    _check_chunking(chunked_prefill, lambda tokens: 0.0, max(concurrency))
    if lengths is None:
        lengths = [(input_tokens, output_tokens)]
        cache_len = max_model_len
    else:  # the decode steps are costed at the requests' mean lengths, over a cache holding the longest
        lengths = _check_lengths(lengths)
        longest = max(i + o for i, o in lengths)
        cache_len = max_model_len or longest
        if cache_len < longest:
            raise ValueError(f"max_model_len {cache_len} is shorter than the longest request ({longest} positions)")
        # at least 2 out: a decode step to cost even where most requests make one token (the cache
        # then a position longer than the longest request, where the dry run sizes it)
        output_tokens = max(2, sum(o for _, o in lengths) // len(lengths))
        input_tokens = max(1, min(sum(i for i, _ in lengths) // len(lengths), cache_len - output_tokens))
        cache_len = max_model_len or max(cache_len, input_tokens + output_tokens)
    single = predict(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, "compiled",
                     serving, 1, cache_len, prefill_buckets, routing_skew=_ROUTING_SKEW.get())  # validates the arguments; batch 1's step and TTFT
    config = _load_config(config_or_dir)
    lnc = single.logical_nc_config
    overhead_ns = serving_overhead_ns(serving)
    cache_len = cache_len or input_tokens + output_tokens
    decode_cache_len = decode_bucket(serving, input_tokens + output_tokens // 2, cache_len)
    gqa = None if serving == "device" else serving_gqa_attention(serving)
    steps = {1: single.per_token_ms}
    for bucket in sorted({b for c in concurrency for b in batch_buckets(c)} - {1}):
        _, step_ns, _ = compiled_forward_ns(config, tp, platform, lnc, input_tokens, cache_len, 1, gqa,
                                            single.prefill_tokens, decode_cache_len, batch=bucket)
        collectives = _collectives_ns(config, 1, tp, platform, lnc, sequences=bucket)
        steps[bucket] = (step_ns + collectives + overhead_ns) / 1e6

    def program_ms(tokens, prefill):  # a prefill of `tokens` positions, or a chunk of them (a step)
        prefill_ns, step_ns, _ = compiled_forward_ns(
            config, tp, platform, lnc, 0 if not prefill else tokens, cache_len, 1 if prefill else tokens, gqa,
            tokens, tokens + 1 if prefill else cache_len, sequence_parallel=prefill and serving_sequence_parallel(serving))
        return ((prefill_ns if prefill else step_ns) + _collectives_ns(config, tokens, tp, platform, lnc)) / 1e6

    chunk_ms = shared_ms = None
    if chunked_prefill is None:
        padded = {i: prefill_bucket(serving, i, cache_len, prefill_buckets) for i, _ in lengths}
        if len(set(padded.values())) > MAX_PREFILL_PROGRAMS:
            raise ValueError(f"the requests' prompts run {len(set(padded.values()))} prefill lengths; the dry run "
                             f"traces at most {MAX_PREFILL_PROGRAMS}: give fewer distinct lengths, or a serving stack "
                             "with prefill buckets (serving='vllm-neuron' or 'nxdi')")
        prefills = {single.prefill_tokens: single.ttft_ms}
        for positions in sorted(set(padded.values()) - set(prefills)):
            prefills[positions] = program_ms(positions, prefill=True) + overhead_ns / 1e6
        prefill_ms = lambda inputs: prefills[padded[inputs]]  # noqa: E731
    else:
        budget = min(chunked_prefill, cache_len)
        chunks = {b: program_ms(b, prefill=False) for b in chunk_buckets(budget)}
        chunk_ms = lambda tokens: chunks[min(b for b in chunks if b >= tokens)]  # noqa: E731
        # a step with decodes and a chunk reads the weights once (one program)
        _, weight_bytes = _model_figures(config, tp, 1, 0)
        shared_ms = weight_bytes / _C._peak_rates(platform, lnc)[1] * 1e3
        prefill_ms = None
    chunking = dict(chunk_tokens=chunked_prefill and min(chunked_prefill, cache_len), chunk_ms=chunk_ms,
                    overhead_ms=overhead_ns / 1e6, shared_ms=shared_ms or 0.0)
    levels = []
    for c in concurrency:
        buckets = {b: steps[b] for b in batch_buckets(c)}
        levels.append(simulate(prefill_ms, buckets, output_tokens, c, requests_per_client, lengths, **chunking))
    most = max(concurrency)
    for rate in rates:
        buckets = {b: steps[b] for b in batch_buckets(most)}
        levels.append(simulate_rate(prefill_ms, buckets, output_tokens, rate, requests_per_client * most, most,
                                    lengths, **chunking))
    return levels


def train(config_or_dir, platform="trn2", logical_nc_config=None, **kwargs):
    """A training step's prediction (train_dry_run.predict_train, Note [A training step, dry]):
    this module is the dry run's public entry point, for training too."""
    from .train_dry_run import predict_train
    return predict_train(config_or_dir, platform, logical_nc_config, **kwargs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config_dir")
    parser.add_argument("--platform", default="trn2", choices=PLATFORMS)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--lnc", type=int, choices=(1, 2), help="logical core configuration (default: the platform's)")
    parser.add_argument("--input-tokens", type=int, default=192)
    parser.add_argument("--output-tokens", type=int, default=192)
    parser.add_argument("--mode", default="compiled", choices=("compiled", "eager"))
    parser.add_argument("--serving", default="device", choices=SERVING,
                        help="a serving stack's fixed cost per step, prefill buckets and attention (data/serving.toml); "
                             "default: the device alone")
    parser.add_argument("--step-tokens", type=int, default=1, help="tokens per decode step (a verify step: >1)")
    parser.add_argument("--max-model-len", type=int, help="the static KV cache's length (default: input + output)")
    parser.add_argument("--loop", default="forward", choices=LOOPS,
                        help="forward: the model's forward per token (a serving stack's loop); generate: "
                             "transformers' generate() as the user calls it, its own eager ops per token included")
    parser.add_argument("--routing-skew", type=float, default=0.0,
                        help="a mixture-of-experts router's skew (0: uniform; s: expert i chosen as 1 / (i + 1)^s)")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.config_dir, "config.json")):
        parser.error(f"{args.config_dir}: no config.json there; give a folder holding a Hugging Face model's "
                     "config.json (weights are not needed), e.g. demo/configs/llama-3.1-8b")
    try:
        p = predict(args.config_dir, args.platform, args.tp, args.lnc, args.input_tokens, args.output_tokens,
                    args.mode, args.serving, args.step_tokens, args.max_model_len, routing_skew=args.routing_skew,
                    loop=args.loop)
    except (ValueError, RuntimeError) as error:
        parser.error(str(error))
    print(f"dry run: {args.config_dir} on {args.platform} LNC {p.logical_nc_config}, TP {args.tp}, batch 1, "
          f"{args.input_tokens} in / {args.output_tokens} out, {args.mode}, serving: {args.serving} "
          f"(predicted, cost model {COST_MODEL_VERSION})")
    print(f"TTFT {p.ttft_ms:.1f} ms, per token {p.per_token_ms:.2f} ms ({p.tokens_per_s:.1f} tokens/s), "
          f"collectives {p.collectives_ms_per_token:.2f} ms per token, MFU (prefill) {p.mfu_prefill:.1%}, "
          f"MBU (decode) {p.mbu_decode:.1%}, launches prefill/step {p.prefill_launches}/{p.decode_launches}")
    print(f"loop: {p.loop}")
    if p.prefill_tokens != args.input_tokens:
        print(f"the prefill runs {p.prefill_tokens} positions: {args.serving} pads the prompt to its bucket")


if __name__ == "__main__":
    main()
