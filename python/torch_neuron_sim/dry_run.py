"""The dry run (issue 25 §2): a Hugging Face causal LM built from its config on the meta device,
run without computing values, each ATen op costed by the device clock's own cost path
(`_C._cost_op`: the same description and cost model as a live launch, from sizes and dtypes
only), so a model of any size is predicted on a laptop.

Tensor parallelism of degree T is approximated by running one rank's shard of the model: the
column-parallel linears (q/k/v/gate/up) have their output dimension divided by T and the
row-parallel ones (o/down) their input dimension (heads, key-value heads (at least one per
rank, replicated as NxD Inference does) and the MLP's intermediate size divided by T), plus two
all-reduces of the hidden states per decoder layer. The embedding and the LM head stay whole
(not vocabulary-parallel), which overcounts them.

    python -m torch_neuron_sim.dry_run CONFIG_DIR --platform trn2 --tp 4 --input-tokens 192 --output-tokens 192
"""
import argparse
import dataclasses
import math
import os
import unittest.mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import torch_neuron_sim  # noqa: F401  (loads _C and the platform data file)
from torch_neuron_sim import _C

# Collectives are not in the cost model yet (issue 25 phase 3). Until they are, an all-reduce
# costs what the live clock charges a collective launch (one eager launch's fixed cost) plus
# this ALPHA-BETA PLACEHOLDER: 2 * ceil(log2 T) steps of COLLECTIVE_STEP_NS, and the ring's
# 2 (T - 1) / T of the bytes over the chip's NeuronLink bandwidth. Not fitted to anything.
NEURONLINK_CHIP_GBPS = {
    "trn1": 768,  # assumed: NeuronLink-v2 per chip, not in the project's reference files
    "trn2": 1280,  # DELTA 2.1: NeuronLink-v3 1.28 TB/s per chip
    "trn3": 2560,  # DELTA 2.1: NeuronLink-v4 2.56 TB/s per chip
}
COLLECTIVE_STEP_NS = 2000  # assumed: per-step latency of a collective; no published figure


def costs_a_launch(func):
    """True when the live device launches a kernel for `func`: not for views and metadata ops."""
    schema = func._schema
    if func.is_view or func.name() in NO_LAUNCH:
        return False
    return not (schema.returns and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns))


NO_LAUNCH = {"aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::detach",
             "aten::lift_fresh", "aten::_local_scalar_dense", "aten::resize_", "aten::set_.source_Storage", "aten::_unsafe_view"}


def _attention_as_on_the_device(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                enable_gqa=False):
    """What scaled_dot_product_attention launches for neuron tensors (PrivateUse1 chooses the
    overrideable fused kernel: one launch), where on meta it would decompose into the math path."""
    return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]


def _dry_run_attention(*args, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    with unittest.mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", _attention_as_on_the_device):
        return sdpa_attention_forward(*args, **kwargs)


ATTENTION = "neuron_dry_run"


def _register_attention():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(ATTENTION, _dry_run_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the masks of "sdpa", as the live model


def _shapes(tree):
    leaves, _ = tree_flatten(tree)
    return [(list(t.shape), t.dtype, True) for t in leaves if isinstance(t, torch.Tensor)]


class CostingMode(TorchDispatchMode):
    """Costs every launching op that runs under it; `ns` accumulates, `launches` counts."""

    def __init__(self, platform="trn2", logical_nc_config=2, eager_launch=True):
        super().__init__()
        self.platform, self.lnc, self.eager_launch = platform, logical_nc_config, eager_launch
        self.ns = 0
        self.launches = 0
        self.by_op = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            # A host read of a value the dry run does not have (transformers asks whether the
            # positions are packed sequences, `(...).all()`): the answer of an ordinary batch.
            return True if args[0].dtype == torch.bool else 0
        result = func(*args, **kwargs)
        if costs_a_launch(func):
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
            ns = _C._cost_op(name, inputs, outputs, self.platform, self.lnc, copy, self.eager_launch)[0]
            self.ns += ns
            self.launches += 1
            total, count = self.by_op.get(name, (0, 0))
            self.by_op[name] = (total + ns, count + 1)
        return result


@dataclasses.dataclass
class Prediction:
    ttft_ms: float
    per_token_ms: float
    prefill_launches: int
    decode_launches: int
    allreduce_ms_per_forward: float


def allreduce_ns(nbytes, tp, platform, logical_nc_config, eager_launch=True):
    """One all-reduce of `nbytes` over `tp` ranks (see NEURONLINK_CHIP_GBPS: a placeholder)."""
    if tp <= 1:
        return 0
    launch = _C._cost_op("allreduce", [], [], platform, logical_nc_config, False, eager_launch)[0]
    steps = 2 * math.ceil(math.log2(tp))
    return launch + steps * COLLECTIVE_STEP_NS + 2 * (tp - 1) / tp * nbytes / NEURONLINK_CHIP_GBPS[platform]


def shard_config(config, tp):
    """One rank's shard of a Llama-style config at tensor parallel degree `tp`."""
    import copy
    config = copy.deepcopy(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    config.head_dim = head_dim
    if config.num_attention_heads % tp or config.intermediate_size % tp:
        raise ValueError(f"tp {tp} must divide the {config.num_attention_heads} attention heads and the "
                         f"intermediate size {config.intermediate_size}; choose a divisor")
    config.num_attention_heads //= tp
    config.num_key_value_heads = max(1, config.num_key_value_heads // tp)
    config.intermediate_size //= tp
    return config


def build(config_or_dir, tp=1, dtype=torch.bfloat16):
    """The model of one rank on the meta device (no weights), from a config or a config folder."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = config_or_dir if not isinstance(config_or_dir, str) else AutoConfig.from_pretrained(config_or_dir)
    config = shard_config(config, tp)
    _register_attention()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=ATTENTION)
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


def predict(config_or_dir, platform="trn2", tp=1, logical_nc_config=2, input_tokens=192, output_tokens=192,
            eager_launch=True):
    model = build(config_or_dir, tp)
    prefill, steps = generate_costed(model, input_tokens, output_tokens,
                                     lambda: CostingMode(platform, logical_nc_config, eager_launch))
    layers, hidden = model.config.num_hidden_layers, model.config.hidden_size
    itemsize = 2

    def reduce_ns(tokens):
        return 2 * layers * allreduce_ns(tokens * hidden * itemsize, tp, platform, logical_nc_config, eager_launch)

    decode_ns = [mode.ns + reduce_ns(1) for mode in steps]
    return Prediction(
        ttft_ms=(prefill.ns + reduce_ns(input_tokens)) / 1e6,
        per_token_ms=(sum(decode_ns) / len(decode_ns) / 1e6) if decode_ns else float("nan"),
        prefill_launches=prefill.launches,
        decode_launches=steps[0].launches if steps else 0,
        allreduce_ms_per_forward=reduce_ns(1) / 1e6)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config_dir")
    parser.add_argument("--platform", default="trn2", choices=sorted(NEURONLINK_CHIP_GBPS))
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--lnc", type=int, default=2)
    parser.add_argument("--input-tokens", type=int, default=192)
    parser.add_argument("--output-tokens", type=int, default=192)
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.config_dir, "config.json")):
        parser.error(f"{args.config_dir}: no config.json there; give a folder holding a Hugging Face model's "
                     "config.json (weights are not needed), e.g. demo/configs/llama-3.1-8b")
    print(f"dry run: {args.config_dir} on {args.platform} LNC {args.lnc}, TP {args.tp}, batch 1, "
          f"{args.input_tokens} in / {args.output_tokens} out (predicted; eager = one launch per op)")
    print(f"{'mode':<28} {'TTFT ms':>10} {'per token ms':>13} {'launches prefill/step':>22}")
    for label, eager in (("eager", True), ("device work only (no launch)", False)):
        p = predict(args.config_dir, args.platform, args.tp, args.lnc, args.input_tokens, args.output_tokens, eager)
        print(f"{label:<28} {p.ttft_ms:>10.1f} {p.per_token_ms:>13.2f} "
              f"{f'{p.prefill_launches}/{p.decode_launches}':>22}")


if __name__ == "__main__":
    main()
