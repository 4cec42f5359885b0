"""How fast on Trainium, and at what cost, before renting one: torch-neuron-sim's dry run (its
public module `torch_neuron_sim.dry_run`: the model built from its config on the meta device, no
weights, every op costed by the device clock's cost model) per platform x TP degree, with the
team's prices. Every figure is a prediction and says so (`label`).

Cost per 1M output tokens (Note [Predicted cost]): the price of one instance-hour of the
platform's largest instance (workload `cost.price_per_hour.<platform>`, else `.neuron`), times the
share of its logical cores the TP group uses (TP / cores per instance: the other cores serve other
replicas; more than one instance when TP is larger), over the predicted output tokens per second
of one request at batch 1, its prefill included."""
import math
import os

from . import platforms as hw

MODES = ("compiled", "eager")
DEFAULT_TOKENS = 192


class PredictError(ValueError):
    """Input the dry run cannot use; the message says what to give instead."""


# -- the adapter: every use of torch_neuron_sim.dry_run is in this block ---------------------
def _dry_run():
    try:
        from torch_neuron_sim import dry_run
    except ImportError as error:
        raise PredictError(f"predictions need torch-neuron-sim's dry run (torch_neuron_sim.dry_run), "
                           f"which is not importable here ({error})") from None
    return dry_run


def loop_of(mode, serving, loop="forward"):
    """The generation loop the dry run's figures assume."""
    return _dry_run().loop_of(mode, serving, loop)


def cost_model(config_dir=None):
    """(cost model version, calibration error as a fraction or None): what labels a prediction;
    for a mixture-of-experts model (config_dir) its checks count too."""
    dry_run = _dry_run()
    try:
        moe = config_dir is not None and dry_run.is_moe(config_dir)
    except (ValueError, OSError):  # a config the dry run cannot read: each TP row is refused with the reason
        moe = False
    return dry_run.COST_MODEL_VERSION, dry_run.calibration_error(moe=moe)


def dry_run_figures(config_dir, platform, tp, lnc, input_tokens, output_tokens, mode, serving="device",
                    loop="forward"):
    """{ttft_ms, per_token_ms, tokens_per_s, mfu_prefill, mbu_decode} of one request at batch 1
    (None for a figure the request does not have: per token with one output token); ValueError
    when `tp` does not divide the model."""
    prediction = _dry_run().predict(config_dir, platform=platform, tp=tp, logical_nc_config=lnc,
                                    input_tokens=input_tokens, output_tokens=output_tokens, mode=mode,
                                    serving=serving, loop=loop)
    figures = {name: getattr(prediction, name)
               for name in ("ttft_ms", "per_token_ms", "tokens_per_s", "mfu_prefill", "mbu_decode")}
    return {name: None if math.isnan(value) else value for name, value in figures.items()}
def dry_run_serving(config_dir, platform, tp, lnc, input_tokens, output_tokens, concurrency, serving="device",
                    rates=(), lengths=None, chunked_prefill=None):
    """[{concurrency, tokens_per_s, ttft_ms, tpot_ms, latency_ms, decode_step_ms}] of requests served
    at each concurrency level with continuous batching (the dry run's Note [Serving under load]);
    `lengths` [(input, output)]: the requests' own lengths; `chunked_prefill`: a step's token budget."""
    levels = _dry_run().serve(config_dir, platform=platform, tp=tp, logical_nc_config=lnc,
                              input_tokens=input_tokens, output_tokens=output_tokens, concurrency=tuple(concurrency),
                              serving=serving, rates=tuple(rates), lengths=lengths, chunked_prefill=chunked_prefill)
    return [{"concurrency": level.concurrency, "rate_per_s": level.rate_per_s, "requests": level.requests,
             "tokens_per_s": level.tokens_per_s,
             "ttft_ms": level.ttft_ms, "tpot_ms": level.tpot_ms, "latency_ms": level.latency_ms,
             "decode_step_ms": {str(b): ms for b, ms in level.decode_step_ms.items()}} for level in levels]
def dry_run_training(config_dir, platform, lnc, dp, tp, instances, seq_len, local_batch, activation_checkpointing,
                     token_budget, price_per_instance_hour, layout=None):
    """{step_ms, tokens_per_s, mfu, memory_gib, ...} of one training step (the dry run's Note [A
    training step, dry], torch_neuron_sim.train_dry_run); `layout`: {pp, microbatches, sharding,
    sequence_parallel} where given; ValueError for what it cannot run."""
    import dataclasses
    return dataclasses.asdict(_dry_run().train(
        config_dir, platform, lnc, dp=dp, tp=tp, instances=instances, seq_len=seq_len, local_batch=local_batch,
        activation_checkpointing=activation_checkpointing, token_budget=token_budget,
        price_per_instance_hour=price_per_instance_hour, **(layout or {})))
def dry_run_prefill_programs():
    """How many distinct prefill lengths one serving prediction traces at most."""
    return _dry_run().MAX_PREFILL_PROGRAMS


# -- end of the adapter ----------------------------------------------------------------------


def label(version, calibration_error):
    """What every predicted figure is shown with."""
    error = "unknown" if calibration_error is None else f"±{calibration_error:.0%}"
    return f"predicted (cost model {version}, calibration error {error})"


def current_label():
    return label(*cost_model())


def price_for(prices, platform):
    """(price of one instance-hour, the key it came from) or (None, None)."""
    for key in (platform, "neuron"):
        if (prices or {}).get(key) is not None:
            return prices[key], key
    return None, None


def cost_assumption(platform, lnc, price_key,
                    throughput="the predicted output tokens/s of one request at batch 1, prefill included"):
    spec = hw.platforms()[platform]
    cores = hw.cores_per_instance(platform, lnc)
    return (f"cost = price_per_hour.{price_key} as one {spec.get('chips_per_instance_note', platform)} "
            f"instance-hour ({cores} logical cores at LNC {lnc}) x TP/{cores} (its other cores serve other "
            f"replicas), over {throughput}")


def per_million_tokens(price, platform, lnc, tp, tokens_per_s):
    """Note [Predicted cost]: the TP group's share of the instance price per 1M output tokens."""
    if price is None or not tokens_per_s:
        return None
    share = tp / hw.cores_per_instance(platform, lnc)
    return price * share / 3600 / tokens_per_s * 1e6


def config_folder(path):
    """The folder holding config.json, from the folder or the file; PredictError otherwise."""
    folder = os.path.dirname(path) if os.path.basename(path) == "config.json" else path
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise PredictError(f"{path}: no config.json there; give a workload file (TOML), or a folder holding a "
                           "Hugging Face model's config.json (weights are not needed), e.g. demo/configs/llama-3.1-8b")
    return folder


def argument_problems(platform_names, tps, lnc, input_tokens, output_tokens, mode):
    """[(option, what is wrong)], checked before any model is built."""
    known = hw.platforms()
    problems = [("platform", f"unknown platform {p!r} (known: {', '.join(known)})")
                for p in platform_names if p not in known]
    if not platform_names:
        problems.append(("platform", "expected at least one platform"))
    if lnc is not None:
        problems += [("lnc", f"{p} offers LNC {', '.join(map(str, known[p]['lnc']))}, not {lnc}")
                     for p in platform_names if p in known and lnc not in known[p]["lnc"]]
    if not tps or any(tp < 1 for tp in tps):
        problems.append(("tp", f"expected a non-empty list of positive integers, got {list(tps or [])}"))
    for name, value in (("input-tokens", input_tokens), ("output-tokens", output_tokens)):
        if value < 1:
            problems.append((name, f"expected a positive integer, got {value}"))
    if mode not in MODES:
        problems.append(("mode", f"expected one of {', '.join(MODES)}, got {mode!r}"))
    return problems


def predict(config_dir, platform_names=("trn2",), tps=(1,), lnc=None, input_tokens=DEFAULT_TOKENS,
            output_tokens=DEFAULT_TOKENS, mode="compiled", prices=None, currency=None, serving="device",
            concurrency=None, rates=None, loop="forward", lengths=None, chunked_prefill=None):
    """The prediction table: one row per platform and TP degree ("refused" lists the degrees that
    do not divide the model, with the dry run's reason). PredictError for bad arguments.
    `serving` adds a serving stack's fixed cost per step (the dry run's serving stacks); `loop`
    "generate" predicts transformers' generate() as the user calls it (the device alone).
    With `concurrency`: `lengths` [(input, output)] are the served requests' own lengths (a
    workload's prompts; default: input_tokens and output_tokens each), `chunked_prefill` a step's
    token budget (prompts prefilled in chunks inside the decode steps)."""
    problems = argument_problems(platform_names, tps, lnc, input_tokens, output_tokens, mode)
    if concurrency and mode != "compiled":
        problems.append(("concurrency", "serving under load is predicted compiled only (as the stacks run)"))
    if loop not in ("forward", "generate"):
        problems.append(("loop", f"expected forward or generate, got {loop!r}"))
    if loop == "generate" and (serving != "device" or concurrency):
        problems.append(("loop", "generate is transformers' generate() on the device alone, one request: not with "
                                 "--serving or --concurrency (a serving stack's loop)"))
    if rates and not concurrency:
        problems.append(("rate", "give --concurrency too: its largest level is the stack's batch (max_num_seqs)"))
    if rates and any(not (math.isfinite(r) or r == math.inf) or r <= 0 for r in rates):
        problems.append(("rate", f"expected request rates above 0, got {rates}"))
    if concurrency and any(c < 1 for c in concurrency):
        problems.append(("concurrency", f"expected positive integers, got {concurrency}"))
    if chunked_prefill is not None and (not concurrency or chunked_prefill < 1):
        problems.append(("chunked-prefill", f"expected a step's token budget of 1 or more, with --concurrency; got "
                                            f"{chunked_prefill}"))
    if problems:
        raise PredictError("; ".join(f"--{name}: {message}" for name, message in problems))
    version, calibration_error = cost_model(config_dir)
    rows, refused, assumptions = [], [], {}
    for platform in platform_names:
        platform_lnc = lnc if lnc is not None else hw.platforms()[platform]["default_lnc"]
        price, price_key = price_for(prices, platform)
        if price is not None:
            assumptions[platform] = cost_assumption(platform, platform_lnc, price_key)
        for tp in tps:
            try:
                figures = dry_run_figures(config_dir, platform, tp, platform_lnc, input_tokens, output_tokens, mode,
                                          serving, loop)
            except PredictError:
                raise
            except ValueError as error:
                refused.append({"platform": platform, "tp": tp, "lnc": platform_lnc, "error": str(error)})
                continue
            latency = figures["ttft_ms"] + (output_tokens - 1) * (figures["per_token_ms"] or 0)
            request_rate = output_tokens * 1000 / latency if latency > 0 else None
            row = {"platform": platform, "lnc": platform_lnc, "tp": tp, **figures,
                   "request_latency_ms": latency, "request_tokens_per_s": request_rate,
                   "price_per_hour": price, "price_key": price_key,
                   "per_million_output_tokens": per_million_tokens(price, platform, platform_lnc, tp, request_rate)}
            if concurrency:
                try:
                    levels = dry_run_serving(config_dir, platform, tp, platform_lnc, input_tokens, output_tokens,
                                             concurrency, serving, rates or (), lengths, chunked_prefill)
                except ValueError as error:
                    refused.append({"platform": platform, "tp": tp, "lnc": platform_lnc,
                                    "error": f"serving under load: {error}"})
                    continue
                row["serving_levels"] = [
                    {**level, "per_million_output_tokens": per_million_tokens(price, platform, platform_lnc, tp,
                                                                              level["tokens_per_s"])}
                    for level in levels]
            rows.append(row)
    return {"label": label(version, calibration_error), "cost_model_version": version,
            "calibration_error": calibration_error, "config": os.path.abspath(config_dir), "mode": mode,
            "batch": 1, "input_tokens": input_tokens, "output_tokens": output_tokens, "currency": currency,
            "cost_assumptions": assumptions, "rows": rows, "refused": refused,
            "serving": serving, "concurrency": list(concurrency or []), "rates": list(rates or []), "loop": loop_of(mode, serving, loop),
            "serving_lengths": [list(pair) for pair in lengths] if concurrency and lengths else None,
            "chunked_prefill": chunked_prefill if concurrency else None,
            "source": "dry run of torch-neuron-sim (meta device, no weights; bfloat16, batch 1, " +
                      ("greedy; " if loop == "forward" else "generate() with the folder's generation config; ") +
                      ("the device alone, no serving stack's cost per step)" if serving == "device" else
                       f"with the {serving} serving stack's fixed cost per step)")}


def for_workload(workload, platform_names=None, tps=None, lnc=None, input_tokens=None, output_tokens=None,
                 mode=None, serving="device", concurrency=None, rates=None, loop="forward", chunked_prefill=None):
    """predict() for a workload file: its model's config, its [predict] table, its longest request
    and its prices; each argument given overrides the workload's. Served under load, the requests
    are the workload's own prompts (their lengths, in turn) unless input tokens are given."""
    if not workload.model.path:
        raise PredictError("the workload's model is a factory: the dry run needs a config.json "
                           "(give the model folder instead)")
    wanted = workload.predict
    tps = tps or wanted.tp
    if not tps:
        raise PredictError("--tp: give the tensor-parallel degrees to predict, e.g. --tp 4,16,64 "
                           "(or [predict] tp = [...] in the workload)")
    folder = config_folder(workload.resolve(workload.model.path))
    input_tokens = _given(input_tokens, wanted.input_tokens)
    output_tokens = _given(output_tokens, wanted.output_tokens, workload.inputs.max_new_tokens)
    lengths = None
    if input_tokens is None:
        prompts = workload_prompt_lengths(workload)
        input_tokens = max(prompts)
        if concurrency and len(set(prompts)) > 1:
            lengths = [(n, output_tokens) for n in served_lengths(prompts)]
    # the workload's step budget is for serving under load; the plain table (batch 1) has none
    chunked_prefill = _given(chunked_prefill, wanted.chunked_prefill if concurrency else None)
    return predict(folder, platform_names or wanted.platforms, tps, _given(lnc, wanted.lnc), input_tokens,
                   output_tokens, mode or wanted.mode, workload.cost.price_per_hour, workload.cost.currency,
                   serving, concurrency, rates, loop, lengths, chunked_prefill)


def served_lengths(prompts):
    """The prompts' lengths as served under load: the dry run traces at most
    dry_run.MAX_PREFILL_PROGRAMS prefill lengths, so more distinct lengths than that are padded up,
    each to the longest of its group (the sorted lengths split into that many groups), as a
    stack's prefill buckets pad them."""
    most = dry_run_prefill_programs()
    distinct = sorted(set(prompts))
    if len(distinct) <= most:
        return list(prompts)
    edges = [distinct[(len(distinct) * (g + 1) + most - 1) // most - 1] for g in range(most)]
    return [next(edge for edge in edges if edge >= n) for n in prompts]


def _given(*values):
    """The first value that is not None (0 is a value, refused later by argument_problems)."""
    return next((value for value in values if value is not None), None)


def workload_lengths(workload):
    """(input tokens, output tokens) of the workload's longest request at batch 1: its longest
    random-token prompt, or text prompt as its tokenizer counts it."""
    return max(workload_prompt_lengths(workload)), workload.inputs.max_new_tokens


def workload_prompt_lengths(workload):
    """The tokens of each of the workload's prompts: its random-token prompts' lengths, and its
    text prompts as its tokenizer counts them."""
    lengths = list(workload.inputs.prompt_lengths)
    folder = workload.resolve(workload.model.path) if workload.model.path else None
    if workload.inputs.prompts and folder and any(n.startswith("tokenizer") for n in os.listdir(folder)):
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(folder)
        lengths += [len(tokenizer(text)["input_ids"]) for text in workload.inputs.prompts]
    if not lengths:
        raise PredictError("the workload's prompts need a tokenizer in the model folder to be counted: "
                           "give --input-tokens")
    return lengths


def predict_training(config_dir, platform_names=("trn2",), tps=(1,), lnc=None, dp=1, instances=None, seq_len=2048,
                     local_batch=1, activation_checkpointing=False, token_budget=None, prices=None, currency=None,
                     layout=None):
    """The training table: one row per platform and TP degree, each a step of `dp` data-parallel
    ranks of `tp` ranks each ("refused" lists what cannot run, with the dry run's reason);
    `layout` {pp, microbatches, sharding, sequence_parallel}: the dry run's, where given."""
    layout = {name: value for name, value in (layout or {}).items() if value is not None}
    problems = argument_problems(platform_names, tps, lnc, 1, 1, "compiled")
    for name, value in (("dp", dp), ("seq-len", seq_len), ("local-batch", local_batch)):
        if value < 1:
            problems.append((name, f"expected a positive integer, got {value}"))
    if token_budget is not None and not token_budget > 0:
        problems.append(("token-budget", f"expected tokens above 0, got {token_budget}"))
    if problems:
        raise PredictError("; ".join(f"--{name}: {message}" for name, message in problems))
    version, calibration_error = cost_model(config_dir)
    rows, refused = [], []
    for platform in platform_names:
        platform_lnc = lnc if lnc is not None else hw.platforms()[platform]["default_lnc"]
        price, _ = price_for(prices, platform)
        for tp in tps:
            try:
                rows.append(dry_run_training(config_dir, platform, platform_lnc, dp, tp, instances, seq_len,
                                             local_batch, activation_checkpointing, token_budget, price, layout))
            except (ValueError, RuntimeError) as error:
                refused.append({"platform": platform, "tp": tp, "lnc": platform_lnc, "error": str(error)})
    return {"label": f"predicted (cost model {version}, no published training figure checked)",
            "cost_model_version": version, "task": "train",
            "calibration_error": calibration_error, "config": os.path.abspath(config_dir), "dp": dp,
            "seq_len": seq_len, "local_batch": local_batch, "activation_checkpointing": activation_checkpointing,
            "token_budget": token_budget, "currency": currency, "rows": rows, "refused": refused,
            "layout": layout,
            "source": "dry run of torch-neuron-sim's training step (fake tensors, no weights; "
                      f"{layout.get('sharding', 'fsdp2')} over the DP ranks, bf16 compute, fp32 master weights and "
                      "AdamW; eager launches; no calibration row is a training figure)"}
