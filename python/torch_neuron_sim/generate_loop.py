"""The dry run of transformers' generate() (issue 41 §5): the loop the user runs, not the forward
alone. A compiled static-cache generate() on the device pays, besides its forwards, the eager ops
generate adds each token (the logits copy, the logits processors, argmax, stopping criteria, the
next step's positions and mask); on the demo model they are most of a token's device time.

Note [The generate loop, dry]
generate()'s loop runs on the device for real, with a stand-in of the model (the same class,
vocabulary and generation config, one small layer: the loop's ops do not depend on the model's
insides, only on the logits' shape and the lengths): each op the loop launches outside the
forwards is costed for the platform asked for, as a live eager launch (dry_run.CostingMode,
which equals the live clock op for op), and each forward call is noted (its arguments' shapes,
eager or compiled, the cache it was given). The noted calls are then replayed on the model of
one rank on the meta device: an eager call under dry_run.CostingMode, a compiled one through
dry_run.ProgramCosts (the program the device would run), with the cache kind generate chose, so
a compiled generate's eager prefill, its cache allocated inside that prefill, and its compiled
decode steps are costed as the live device runs them. Layers of one kind are replayed with two
and three layers and extrapolated, as the dry run's forward. TTFT is the device time from
generate's start to the start of the second forward (the first token chosen and the next
step's inputs made); a later token's time is the rest over the later tokens. The stand-in's
argmax is held on one ordinary token (a forward hook, inside the forward, not costed as loop), so
it generates exactly the tokens asked for, as a prompt that meets no end-of-sequence token.
Sampling settings of the model folder's generation_config.json are the loop's (their processors
are costed); nothing else the user may pass to generate() is (beam search, streamers, assisted
decoding, chunked prefill).
"""
import copy
import dataclasses
import os

import torch
from torch.utils._python_dispatch import _disable_current_modes

from . import dry_run

LOOPS = {"eager": "transformers' generate(), eager: a dynamic cache, every forward and the loop's ops eager",
         "compiled": "transformers' generate() with cache_implementation=\"static\": an eager prefill, compiled "
                     "decode steps (torch.compile(backend=\"neuron\"), as transformers chooses for the device), "
                     "the loop's ops eager"}

# the stand-in's sizes (Note [The generate loop, dry]); an attribute is set only where the config has it
_STAND_IN = {"hidden_size": 64, "intermediate_size": 64, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "num_local_experts": 4,
             "num_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
             "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 32,
             "first_k_dense_replace": 0, "n_group": 1, "topk_group": 1}


@dataclasses.dataclass(frozen=True)
class _TensorSpec:
    shape: tuple
    dtype: torch.dtype


@dataclasses.dataclass(frozen=True)
class _CacheSpec:
    index: int  # which cache of the run (one generate: one cache)
    kind: type
    max_cache_len: int


@dataclasses.dataclass
class _Call:
    compiled: bool
    args: tuple
    kwargs: dict
    loop_ns_before: float  # the loop's device time before this call


@dataclasses.dataclass
class LoopRun:
    """generate()'s loop on the stand-in: its ops' costs and the forward calls it made."""
    calls: list
    loop_ns: float  # every op outside the forwards
    compile_config: object  # the CompileConfig generate compiled the decode steps with (None: eager)


def stand_in_config(config):
    """The stand-in's config: the model's own, small sizes (_STAND_IN), one layer of each kind
    (generate makes a mask per attention kind), the same vocabulary and special tokens."""
    small = copy.deepcopy(config)
    for name, value in _STAND_IN.items():
        # head_dim set where the config has it at all (None: its model derives it, not every one can)
        if getattr(small, name, None) is not None or (name == "head_dim" and hasattr(small, name)):
            setattr(small, name, value)
    kinds = list(dict.fromkeys(getattr(small, "layer_types", None) or []))
    small.num_hidden_layers = max(1, len(kinds))
    if kinds:
        small.layer_types = kinds
    if hasattr(small, "mlp_only_layers"):
        small.mlp_only_layers = []
    return small


def _ordinary_token(config, generation_config):
    special = set()
    for source in (config, generation_config):
        for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
            value = getattr(source, name, None)
            special.update(value if isinstance(value, (list, tuple)) else [value])
    token = next((t for t in range(config.vocab_size) if t not in special), None)
    if token is None:
        raise ValueError(f"every token of this vocabulary of {config.vocab_size} is a special token "
                         f"({sorted(t for t in special if t is not None)}): the generate loop needs an ordinary one "
                         "to generate the tokens asked for")
    return token


def _spec(value, caches):
    from transformers import Cache
    if isinstance(value, torch.Tensor):
        return _TensorSpec(tuple(value.shape), value.dtype)
    if isinstance(value, Cache):
        index = caches.setdefault(id(value), len(caches))
        return _CacheSpec(index, type(value), value.get_max_length())
    if isinstance(value, (list, tuple)):
        return type(value)(_spec(v, caches) for v in value)
    if isinstance(value, dict):
        return {k: _spec(v, caches) for k, v in value.items()}
    return value


def run_loop(config, input_tokens, output_tokens, compiled, platform, logical_nc_config, generation_config=None,
             model=None):
    """generate() on the device with the stand-in of `config` (Note [The generate loop, dry]):
    `input_tokens` of prompt (with its attention mask, as a tokenizer gives it), `output_tokens`
    new tokens, greedy unless `generation_config` samples; `compiled`: with a static cache.
    `model`: a model on the device to run instead of the stand-in (the tests' check that the
    stand-in's loop is the model's)."""
    import transformers
    from transformers import AutoModelForCausalLM, GenerationConfig
    if input_tokens < 1 or output_tokens < 1:
        raise ValueError(f"input_tokens {input_tokens} and output_tokens {output_tokens} must be 1 or more")
    generation_config = copy.deepcopy(generation_config) if generation_config else GenerationConfig.from_model_config(config)
    token = _ordinary_token(config, generation_config)
    calls, caches = [], {}
    loop = dry_run.CostingMode(platform, logical_nc_config, routed=False)  # the live model's attention
    compile_configs = []

    def note(compiled_call, args, kwargs):
        calls.append(_Call(compiled_call, _spec(args, caches), _spec(kwargs, caches), loop.ns))

    if model is None:
        torch.manual_seed(0)
        with torch.device("cpu"):
            model = AutoModelForCausalLM.from_config(stand_in_config(config), dtype=torch.bfloat16)
        model = model.eval().to("neuron")

        def hold_the_token(module, args, output):  # inside the forward: not the loop's
            # every other token 1e4 below it: certain after any temperature, finite after any
            output.logits.zero_()
            output.logits[..., token] = 1e4
            return output
        model.register_forward_hook(hold_the_token)
    original = type(model)

    class Noted(original):
        def __call__(self, *args, **kwargs):
            note(False, args, kwargs)
            with _disable_current_modes():
                return super().__call__(*args, **kwargs)

        def get_compiled_call(self, compile_config):
            compile_config = compile_config or self._default_compile_config()
            compile_configs.append(compile_config)
            inner = torch.compile(super().__call__, **compile_config.to_dict())

            def run(*args, **kwargs):
                note(True, args, kwargs)
                with _disable_current_modes():
                    return inner(*args, **kwargs)
            return run

    ids = torch.full((1, input_tokens), token, dtype=torch.long, device="neuron")
    mask = torch.ones(1, input_tokens, dtype=torch.long, device="neuron")
    generation_config.max_new_tokens = output_tokens
    # the loop asked for, whatever the folder's generation config says: eager is a dynamic cache
    # and no compile, compiled a static cache (transformers then compiles the decode steps)
    generation_config.cache_implementation = "static" if compiled else None
    generation_config.disable_compile = not compiled
    kwargs = dict(generation_config=generation_config)
    torch._dynamo.reset()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # generate's notes on pad/eos tokens of a config-built model
    model.__class__ = Noted
    try:
        with torch.no_grad(), loop:
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    except (RuntimeError, TypeError, ValueError, KeyError) as error:
        raise RuntimeError(f"transformers' generate() did not run with this {config.model_type} model and these "
                           f"settings: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}; "
                           "loop='forward' predicts the model's forward alone") from error
    finally:
        model.__class__ = original
        transformers.logging.set_verbosity(verbosity)
        torch._dynamo.reset()
    made = out.shape[1] - input_tokens
    if made != output_tokens:
        raise RuntimeError(f"generate() made {made} tokens, not {output_tokens}: its loop stopped early")
    return LoopRun(calls, loop.ns, compile_configs[0] if compile_configs else None)


def _meta(value, caches, config):
    from transformers import DynamicCache, StaticCache
    if isinstance(value, _TensorSpec):
        return torch.zeros(value.shape, dtype=value.dtype, device="meta")
    if isinstance(value, _CacheSpec):
        if value.index not in caches:
            caches[value.index] = (StaticCache(config=config, max_cache_len=value.max_cache_len)
                                   if issubclass(value.kind, StaticCache) else DynamicCache(config=config))
        return caches[value.index]
    if isinstance(value, (list, tuple)):
        return type(value)(_meta(v, caches, config) for v in value)
    if isinstance(value, dict):
        return {k: _meta(v, caches, config) for k, v in value.items()}
    return value


def _replay(config, tp, platform, logical_nc_config, run, layers=None):
    """Each noted forward call on the meta model of one rank: [ns per call], [launches per call]."""
    model = dry_run.build(config, tp, layers=layers)
    caches, costs, launches = {}, [], []
    programs = dry_run.ProgramCosts(platform, logical_nc_config)
    compiled = None
    if run.compile_config is not None:
        options = run.compile_config.to_dict()
        compiled = torch.compile(model.__call__, backend=programs.backend, fullgraph=options.get("fullgraph", False),
                                 dynamic=options.get("dynamic"))
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            for call in run.calls:
                args, kwargs = _meta(call.args, caches, model.config), _meta(call.kwargs, caches, model.config)
                if call.compiled:
                    before, calls = programs.ns, programs.calls
                    with dry_run.routed_attention():
                        compiled(*args, **kwargs)
                    costs.append(programs.ns - before)
                    launches.append(programs.calls - calls)
                else:
                    mode = dry_run.CostingMode(platform, logical_nc_config)
                    with mode:
                        model(*args, **kwargs)
                    costs.append(mode.ns)
                    launches.append(mode.launches)
    finally:
        torch._dynamo.reset()
    return costs, launches


def forward_costs(config, tp, platform, logical_nc_config, run):
    """[ns per noted call] and [launches per call] of the whole model: replayed whole, or from a
    two- and a three-layer replay when the layers are of one kind (dry_run.compiled_forward_ns)."""
    layers = config.num_hidden_layers
    if layers <= 3 or not dry_run._uniform_layers(config, tp):
        return _replay(config, tp, platform, logical_nc_config, run)
    two, launches_two = _replay(config, tp, platform, logical_nc_config, run, layers=2)
    three, launches_three = _replay(config, tp, platform, logical_nc_config, run, layers=3)
    return dry_run.extrapolated(two, three, layers), dry_run.extrapolated(launches_two, launches_three, layers)


def _generation_config(config_or_dir):
    from transformers import GenerationConfig
    if isinstance(config_or_dir, str) and os.path.isfile(os.path.join(config_or_dir, "generation_config.json")):
        return GenerationConfig.from_pretrained(config_or_dir)
    return None


def _tokens(call):
    """The positions a noted forward call runs (its input_ids' length)."""
    ids = call.kwargs.get("input_ids")
    return ids.shape[1] if isinstance(ids, _TensorSpec) else 1


def predict_generate(config_or_dir, platform, tp, logical_nc_config, input_tokens, output_tokens, mode):
    """dry_run.Prediction of transformers' generate() (Note [The generate loop, dry]); `mode`:
    "eager" (a dynamic cache) or "compiled" (cache_implementation="static")."""
    if mode not in LOOPS:
        raise ValueError(f"mode {mode!r}: choose one of {', '.join(LOOPS)}")
    config = dry_run._load_config(config_or_dir)
    dry_run.shard_config(config, tp)  # refuses a TP degree the model cannot take, before the device runs
    with torch.random.fork_rng(devices=[torch.neuron.current_device()], device_type="neuron"):
        # the stand-in's weights and draws leave the caller's random state as it was
        run = run_loop(config, input_tokens, output_tokens, mode == "compiled", platform, logical_nc_config,
                       _generation_config(config_or_dir))
    try:
        costs, launches = forward_costs(config, tp, platform, logical_nc_config, run)
    except (ValueError, RuntimeError):
        raise
    except Exception as error:  # noqa: BLE001  (Dynamo's and the model's own errors on meta)
        raise RuntimeError(f"the dry run could not replay this {config.model_type} model's forward calls on the meta "
                           f"device ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                           "try other lengths, mode='eager', or loop='forward'") from error
    collectives = [dry_run._collectives_ns(config, _tokens(call), tp, platform, logical_nc_config)
                   for call in run.calls]
    forwards = [c + k for c, k in zip(costs, collectives)]
    second = run.calls[1].loop_ns_before if len(run.calls) > 1 else run.loop_ns
    ttft_ns = second + forwards[0]
    later = output_tokens - 1
    per_token_ns = (run.loop_ns - second + sum(forwards[1:])) / later if later else float("nan")
    flops, step_bytes = dry_run._model_figures(config, tp, input_tokens, input_tokens + output_tokens // 2)
    peak_flops, peak_bytes = dry_run._C._peak_rates(platform, logical_nc_config)
    return dry_run.Prediction(
        platform=platform, tp=tp, mode=mode, serving="device", logical_nc_config=logical_nc_config,
        ttft_ms=ttft_ns / 1e6, per_token_ms=per_token_ns / 1e6, prefill_launches=launches[0],
        decode_launches=launches[1] if len(launches) > 1 else 0,
        collectives_ms_per_token=(sum(collectives[1:]) / later if later else 0.0) / 1e6,
        mfu_prefill=flops / (ttft_ns * 1e-9) / peak_flops,
        mbu_decode=step_bytes / (per_token_ns * 1e-9) / peak_bytes if later else float("nan"),
        prefill_tokens=input_tokens, loop=dry_run.loop_of(mode, "device", "generate"))
