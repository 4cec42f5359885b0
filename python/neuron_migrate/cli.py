"""The `neuron-migrate` command: run, fit, predict, compare, report.

Exit status: 0 done (every stop condition go, or none set), 3 a stop condition is not a go
(no-go, or it could not be measured), 2 bad input (workload file, arguments, runs that may not
be compared), 130 interrupted."""
import argparse
import json
import os
import sys

from rich.console import Console
from rich.markup import escape


def _int_list(text):
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _float_list(text):
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _str_list(text):
    return [part.strip() for part in text.split(",") if part.strip()]


def parser():
    top = argparse.ArgumentParser(prog="neuron-migrate", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="evaluate a workload on a device against a baseline device")
    run.add_argument("workload", help="the workload file (TOML)")
    run.add_argument("--on", default="neuron", help="device to evaluate (neuron, cuda, cpu); default neuron")
    run.add_argument("--baseline", default="cpu", help="device the outputs are compared with; default cpu")
    run.add_argument("--out", help="report folder (default: neuron-migrate-report/<workload name>)")
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.add_argument("--predict-tp", type=_int_list,
                     help="also predict Trainium latency and cost from the dry run at these TP degrees, "
                          "e.g. 4,16 (the workload's [predict] table sets the rest)")

    predict = commands.add_parser("predict", help="how fast on Trainium, at what cost? from the dry run "
                                                  "(the model's config on the meta device, no weights)")
    predict.add_argument("model", metavar="WORKLOAD_OR_CONFIG",
                         help="a workload file (TOML), or a model folder / its config.json")
    predict.add_argument("--platform", type=_str_list, action="extend",
                         help="trn1, trn2, trn3 (comma list); default the workload's [predict] or trn2")
    predict.add_argument("--tp", type=_int_list, help="tensor-parallel degrees, e.g. 4,16,64")
    predict.add_argument("--lnc", type=int, help="logical-core configuration (default: each platform's)")
    predict.add_argument("--input-tokens", type=int, help="prompt tokens (default: the workload's longest, or 192)")
    predict.add_argument("--output-tokens", type=int,
                         help="generated tokens (default: the workload's max_new_tokens, or 192)")
    predict.add_argument("--mode", choices=["compiled", "eager"],
                         help="compiled programs (default) or one launch per op")
    predict.add_argument("--serving", choices=["device", "nxdi", "vllm-neuron"], default="device",
                         help="add a serving stack's fixed cost per model step (the dry run's data/serving.toml; "
                              "default: the device alone)")
    predict.add_argument("--loop", choices=["forward", "generate"], default="forward",
                         help="forward: the model's forward per token, as a serving stack runs it (default); generate: "
                              "transformers' generate() as a script calls it, its own eager ops per token included")
    predict.add_argument("--concurrency", type=_int_list,
                         help="also serve requests at these concurrency levels with continuous batching, e.g. 1,4,16 "
                              "(compiled; the dry run's Note [Serving under load])")
    predict.add_argument("--chunked-prefill", type=int, metavar="TOKENS",
                         help="with --concurrency: prefill prompts in chunks inside the decode steps, TOKENS per step "
                              "(vLLM's max_num_batched_tokens; default: each prompt prefilled whole, before the steps)")
    predict.add_argument("--rate", type=_float_list,
                         help="also serve requests arriving at these rates (requests/s, open loop), e.g. 2,8; the "
                              "largest --concurrency level is the stack's batch")
    predict.add_argument("--train", action="store_true",
                         help="predict a training step instead (--dp ranks of --pp stages of --tp each): step time, "
                              "tokens/s, MFU, memory per core, time and cost to --token-budget")
    predict.add_argument("--dp", type=int, help="--train: data-parallel ranks (default: the workload's "
                                                "[predict] dp, or 1)")
    predict.add_argument("--instances", type=int, help="--train: instances (default: as few as hold dp x pp x tp ranks)")
    predict.add_argument("--seq-len", type=int, help="--train: tokens per sequence (default: the workload's "
                                                     "[train] seq_len, or 2048)")
    predict.add_argument("--local-batch", type=int, help="--train: sequences per DP rank per step (default: "
                                                         "the workload's [train] batch_size, or 1)")
    predict.add_argument("--activation-checkpointing", action="store_true",
                         help="--train: recompute each decoder layer in the backward")
    predict.add_argument("--token-budget", type=float, help="--train: tokens to train on (time and cost to reach it)")
    predict.add_argument("--pp", type=int, help="--train: pipeline stages (1F1B; default 1)")
    predict.add_argument("--microbatches", type=int, help="--train: microbatches of a pipeline's step (default: "
                                                          "the most, up to 2 x pp, that split --local-batch evenly)")
    predict.add_argument("--sharding", choices=["fsdp2", "zero1", "ddp"],
                         help="--train: how the DP ranks share the model (default fsdp2)")
    predict.add_argument("--sequence-parallel", action="store_true",
                         help="--train: TP with sequence parallelism (norms and residuals split over the TP ranks)")
    predict.add_argument("--json", action="store_true", help="print JSON instead of a table")

    fit = commands.add_parser("fit", help="does the model fit? parameters + KV cache per core, from its config")
    fit.add_argument("model", help="model folder or config.json (weights are never loaded)")
    fit.add_argument("--platform", type=_str_list, action="extend", help="trn1, trn2, trn3 (comma list); default all")
    fit.add_argument("--tp", type=_int_list, default=[1, 2, 4, 8], help="tensor-parallel degrees, e.g. 1,2,4")
    fit.add_argument("--lnc", type=_int_list, default=[1, 2], help="logical-core configurations, e.g. 1,2")
    fit.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    fit.add_argument("--batch", type=int, default=1, help="sequences per core (default 1)")
    fit.add_argument("--max-seq-len", type=int, default=4096, help="tokens per sequence in the KV cache (default 4096)")
    fit.add_argument("--headroom", type=float, default=0.1,
                     help="fraction of each core's HBM kept free for activations (default 0.1)")
    fit.add_argument("--json", action="store_true", help="print JSON instead of a table")

    compare = commands.add_parser("compare", help="what changed between two runs; flags regressions")
    compare.add_argument("a", help="report folder (or report.json) of the earlier run")
    compare.add_argument("b", help="report folder (or report.json) of the later run")
    compare.add_argument("--json", action="store_true")

    report = commands.add_parser("report", help="write report.md and report.html again from report.json")
    report.add_argument("folder")
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    if args.command == "fit":
        return _fit(args, console)
    if args.command == "predict":
        return _predict(args, console)
    if args.command == "compare":
        from .compare import compare_command
        return compare_command(args.a, args.b, console, as_json=args.json)
    if args.command == "report":
        from .report import render_folder
        try:
            paths = render_folder(args.folder)
        except (OSError, ValueError) as error:
            console.print(f"[red]report: {escape(str(error))}")
            return 2
        console.print("wrote " + ", ".join(paths))
        return 0
    from .runner import run_command
    return run_command(args.workload, target=args.on, baseline=args.baseline, out=args.out,
                       progress=not args.no_progress, console=console, predict_tp=args.predict_tp)


_OPTIONS = {"platforms": "--platform", "lnc": "--lnc", "tp": "--tp", "batch_per_core": "--batch",
            "max_seq_len": "--max-seq-len", "headroom": "--headroom"}


def _fit(args, console):
    from transformers.utils import logging as transformers_logging
    transformers_logging.set_verbosity_error()  # kernel-availability notes are noise here
    from .fit import argument_problems, fit
    from .report.terminal import fit_table
    if not os.path.exists(args.model):
        console.print(f"[red]fit: {args.model!r} not found (expected a model folder or its config.json)")
        return 2
    platforms = args.platform or ["trn1", "trn2", "trn3"]
    problems = argument_problems(platforms, args.lnc, args.tp, args.batch, args.max_seq_len, args.headroom)
    for name, message in problems:
        console.print(f"[red]fit: {_OPTIONS[name]}: {escape(message)}")
    if problems:
        return 2
    try:
        result = fit(args.model, dtype=args.dtype, platforms=platforms, lnc=args.lnc, tp=args.tp,
                     batch_per_core=args.batch, max_seq_len=args.max_seq_len, headroom=args.headroom)
    except ValueError as error:
        console.print(f"[red]fit: {escape(str(error))}")
        return 2
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        console.print(fit_table(result))
    return 0


def _predict_training(args, console):
    """`neuron-migrate predict --train`: a training step's prediction per platform and TP degree."""
    from .predict import PredictError, _given, config_folder, predict_training
    from .report.terminal import training_table
    from .workload import WorkloadError, load
    try:
        prices = currency = None
        folder, dp, seq_len, batch, platforms, tps = args.model, 1, 2048, 1, ["trn2"], [1]
        if args.model.endswith(".toml") and os.path.isfile(args.model):
            workload = load(args.model)
            if not workload.model.path:
                raise PredictError("the workload's model is a factory: the dry run needs a config.json")
            folder, prices, currency = (workload.resolve(workload.model.path), workload.cost.price_per_hour,
                                        workload.cost.currency)
            dp, seq_len, batch = workload.predict.dp, workload.train.seq_len, workload.train.batch_size
            platforms, tps = workload.predict.platforms, workload.predict.tp or tps
        result = predict_training(config_folder(folder), args.platform or platforms, args.tp or tps, args.lnc,
                                  _given(args.dp, dp), args.instances, _given(args.seq_len, seq_len),
                                  _given(args.local_batch, batch),
                                  args.activation_checkpointing, args.token_budget, prices, currency,
                                  layout={"pp": args.pp, "microbatches": args.microbatches, "sharding": args.sharding,
                                          "sequence_parallel": args.sequence_parallel or None})
    except (PredictError, WorkloadError) as error:
        console.print(f"[red]predict: {escape(str(error))}")
        return 2
    return _show_prediction(args, console, result, [training_table] if result["rows"] else [])


def _show_prediction(args, console, result, tables):
    """A prediction as JSON, or its tables and its refused rows; exit 2 when a row was refused."""
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        for table in tables:
            console.print(table(result))
        for refused in result["refused"]:
            console.print(f"[red]predict: {refused['platform']} TP {refused['tp']}: {escape(refused['error'])}")
    return 2 if result["refused"] else 0


def _predict(args, console):
    """`neuron-migrate predict`: exit 2 when an input or a TP degree cannot be used (the degrees
    that can are still shown)."""
    from transformers.utils import logging as transformers_logging
    transformers_logging.set_verbosity_error()
    from .predict import DEFAULT_TOKENS, PredictError, config_folder, for_workload, predict
    from .report.terminal import prediction_table
    from .workload import WorkloadError, load
    if args.train:
        return _predict_training(args, console)
    try:
        if args.model.endswith(".toml") and os.path.isfile(args.model):
            result = for_workload(load(args.model), args.platform, args.tp, args.lnc, args.input_tokens,
                                  args.output_tokens, args.mode, args.serving, concurrency=args.concurrency,
                                  rates=args.rate, loop=args.loop, chunked_prefill=args.chunked_prefill)
        elif not args.tp:
            raise PredictError("--tp: give the tensor-parallel degrees to predict, e.g. --tp 4,16,64")
        else:
            result = predict(config_folder(args.model), args.platform or ["trn2"], args.tp, args.lnc,
                             DEFAULT_TOKENS if args.input_tokens is None else args.input_tokens,
                             DEFAULT_TOKENS if args.output_tokens is None else args.output_tokens,
                             args.mode or "compiled", serving=args.serving, concurrency=args.concurrency,
                             rates=args.rate, loop=args.loop, chunked_prefill=args.chunked_prefill)
    except (PredictError, WorkloadError) as error:
        console.print(f"[red]predict: {escape(str(error))}")
        return 2
    from .report.terminal import serving_table
    tables = [prediction_table] + ([serving_table] if result.get("concurrency") else []) if result["rows"] else []
    return _show_prediction(args, console, result, tables)
