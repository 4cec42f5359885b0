"""The workload file (TOML): the model, inputs, precision and conditions every measurement
of a run shares, and the team's stop conditions. `load(path)` returns a Workload or raises
WorkloadError naming the field and the expected form. The schema is in docs/neuron-migrate.md."""
import dataclasses
import hashlib
import json
import os
import tomllib

SCHEMA_VERSION = 1
DTYPES = ("float32", "bfloat16", "float16")
TASKS = ("generate", "train")
SERVING_ENGINES = ("generate", "vllm")


class WorkloadError(ValueError):
    """A workload file that cannot be used; the message names the field and what it expects."""


@dataclasses.dataclass
class Model:
    path: str = None  # folder with config.json (weights loaded unless random_init)
    factory: str = None  # "file.py:function" returning a torch.nn.Module (custom models)
    random_init: bool = False  # build from config.json with random weights (seeded)
    dtype: str = "float32"
    revision: str = None


@dataclasses.dataclass
class Inputs:
    prompts: list = dataclasses.field(default_factory=list)  # texts (need a tokenizer)
    prompt_lengths: list = dataclasses.field(default_factory=list)  # random-token prompts
    batch_sizes: list = dataclasses.field(default_factory=lambda: [1])
    max_new_tokens: int = 16
    max_seq_len: int = 512
    vocab_limit: int = None  # random tokens are drawn below this id (default: vocab size)


@dataclasses.dataclass
class Serve:
    requests: int = 8
    concurrency: list = dataclasses.field(default_factory=lambda: [1])
    timeout_s: float = 120.0
    engine: str = "generate"  # or "vllm": the service as vLLM serves it (Note [Serving engines], vllm_serve.py)


@dataclasses.dataclass
class Train:
    steps: int = 10
    batch_size: int = 2
    seq_len: int = 32
    lr: float = 1e-3
    checkpoint_at: int = 5
    loss_target: float = None


# The torch.compile backend a device kind uses when the workload names none for it.
DEFAULT_BACKENDS = {"neuron": "neuron", "cuda": "inductor", "xpu": "inductor", "cpu": "inductor", "mps": "inductor"}


@dataclasses.dataclass
class Compile:
    """`backend` is one name for every device, or a table by device kind
    (backend = { cuda = "inductor", neuron = "neuron" }): one workload file serves the GPU run and
    the Neuron run. `mode` likewise (torch.compile's mode, e.g. "reduce-overhead" on cuda)."""
    enabled: bool = True
    backend: object = None  # str or {device kind: str}; default DEFAULT_BACKENDS
    mode: object = None  # str or {device kind: str}; default none

    def backend_for(self, kind):
        return _per_device(self.backend, kind, DEFAULT_BACKENDS.get(kind, "inductor"))

    def mode_for(self, kind):
        return _per_device(self.mode, kind, None)


def _per_device(value, kind, default):
    if isinstance(value, dict):
        return value.get(kind, default)
    return default if value is None else value


@dataclasses.dataclass
class Fit:
    platforms: list = dataclasses.field(default_factory=lambda: ["trn1", "trn2", "trn3"])
    lnc: list = dataclasses.field(default_factory=lambda: [1, 2])
    tp: list = dataclasses.field(default_factory=lambda: [1, 2, 4, 8])
    batch_per_core: int = 1
    max_seq_len: int = None  # default: inputs.max_seq_len
    headroom: float = 0.1  # fraction of per-core HBM kept free for activations and workspace


@dataclasses.dataclass
class Predict:
    """The dry run `run` adds to its report (none while `tp` is empty); also the defaults of
    `neuron-migrate predict WORKLOAD`."""
    platforms: list = dataclasses.field(default_factory=lambda: ["trn2"])
    tp: list = dataclasses.field(default_factory=list)
    lnc: int = None  # default: each platform's default
    mode: str = "compiled"  # or "eager"
    input_tokens: int = None  # default: the longest prompt
    output_tokens: int = None  # default: inputs.max_new_tokens
    dp: int = 1  # a training workload: data-parallel (FSDP2) ranks of each TP degree
    chunked_prefill: int = None  # served under load: a step's token budget (prompts prefilled in chunks)


@dataclasses.dataclass
class Cost:
    """price_per_hour: by device kind (cuda, cpu, xpu, mps) or Trainium platform (trn1, trn2, trn3;
    `neuron` for any), the price of one instance-hour: a number, or a table
    { per_hour = 63.3, instance = "p5en.48xlarge", devices = 8 } whose run on one device is charged
    per_hour / devices (one device's share; on Trainium the share is TP / logical cores per
    instance, Note [Predicted cost]). `instances` keeps the tables; price_per_hour the numbers."""
    currency: str = "USD"
    price_per_hour: dict = dataclasses.field(default_factory=dict)  # device kind -> price of an instance-hour
    instances: dict = dataclasses.field(default_factory=dict)  # device kind -> {per_hour, instance, devices}
    tokens_per_month: float = None  # the service's output tokens a month (for the months to break even)
    engineering_hours: float = 0.0
    engineering_rate_per_hour: float = 0.0
    training_run_steps: int = None


@dataclasses.dataclass
class Licence:
    dataset: str = None  # licence id of the dataset, or a path to its card/README
    allowed: list = dataclasses.field(default_factory=list)  # extra licence ids the team accepts


@dataclasses.dataclass
class Gates:
    logits_max_abs_error: float = None
    greedy_agreement_min: float = None
    loss_max_abs_diff: float = None
    resume_loss_max_abs_diff: float = None
    p95_latency_ms: float = None
    ttft_p95_ms: float = None
    error_rate_max: float = None
    memory_headroom_min: float = None
    compiles_max: int = None
    fallback_ops_max: int = None
    cost_per_million_tokens_max: float = None
    cost_per_training_run_max: float = None


@dataclasses.dataclass
class Workload:
    name: str
    task: str
    seed: int
    scripts: list
    model: Model
    inputs: Inputs
    serve: Serve
    train: Train
    compile: Compile
    fit: Fit
    predict: Predict
    cost: Cost
    licence: Licence
    gates: Gates
    path: str  # the workload file
    text: str  # its exact text (kept in the lock record)

    def conditions(self):
        """What every compared measurement must share: model, precision, inputs, shapes,
        training and compile settings. Gates, prices and licences are not conditions."""
        return {"task": self.task, "seed": self.seed, "model": dataclasses.asdict(self.model),
                "inputs": dataclasses.asdict(self.inputs), "serve": dataclasses.asdict(self.serve),
                "train": dataclasses.asdict(self.train) if self.task == "train" else None,
                "compile": {key: value for key, value in dataclasses.asdict(self.compile).items()
                            if not (key == "mode" and value is None)}}  # compare normalises it per device

    def resolve(self, relative):
        """A path from the workload file, relative to the file's folder."""
        if relative is None or os.path.isabs(relative):
            return relative
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(self.path)), relative))


def digest(value):
    """A short stable hash of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a table"}


def _check_type(where, value, expected):
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is int and isinstance(value, bool) or not isinstance(value, expected):
        names = " or ".join(_TYPE_NAMES[t] for t in expected) if isinstance(expected, tuple) else _TYPE_NAMES[expected]
        raise WorkloadError(f"{where}: expected {names}, got {value!r}")
    return value


def _check_range(where, value, ok, expected):
    if value is not None and not ok(value):
        raise WorkloadError(f"{where}: expected {expected}, got {value!r}")


def _positive(where, value):
    expected = "a positive number" if isinstance(value, float) else "a positive integer"
    _check_range(where, value, lambda v: v > 0, expected)


def _section(data, name, cls, element_types=None):
    """Fills dataclass `cls` from table `name`; unknown keys and wrong types are errors."""
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise WorkloadError(f"[{name}]: expected a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in fields:
            raise WorkloadError(f"{name}.{key}: unknown field (expected one of: {', '.join(fields)})")
        default = getattr(cls(), key)
        expected = type(default) if default is not None else _FIELD_TYPES.get((name, key), str)
        value = _check_type(f"{name}.{key}", value, expected)
        if expected is list and element_types and key in element_types:
            for item in value:
                _check_type(f"{name}.{key}[]", item, element_types[key])
        values[key] = value
    return cls(**values)


# Types of fields whose default is None.
_FIELD_TYPES = {("model", "revision"): str, ("inputs", "vocab_limit"): int,
                ("train", "loss_target"): float, ("fit", "max_seq_len"): int,
                ("cost", "training_run_steps"): int, ("licence", "dataset"): str,
                ("cost", "tokens_per_month"): float, ("compile", "backend"): (str, dict),
                ("compile", "mode"): (str, dict),
                ("predict", "lnc"): int, ("predict", "input_tokens"): int, ("predict", "output_tokens"): int,
                ("predict", "chunked_prefill"): int,
                **{("gates", f.name): (int if f.name in ("compiles_max", "fallback_ops_max") else float)
                   for f in dataclasses.fields(Gates)}}


def load(path):
    """Reads and validates a workload file; raises WorkloadError."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise WorkloadError(f"{path}: cannot read the workload file ({error.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise WorkloadError(f"{path}: not valid TOML ({error})") from None
    known = {"workload", "model", "inputs", "serve", "train", "compile", "fit", "predict", "cost", "licence", "gates"}
    for key in data:
        if key not in known:
            raise WorkloadError(f"[{key}]: unknown table (expected one of: {', '.join(sorted(known))})")

    head = data.get("workload")
    if not isinstance(head, dict):
        raise WorkloadError("[workload]: missing table (expected name = \"...\", task = \"generate\" or \"train\")")
    for key in head:
        if key not in ("name", "task", "seed", "script", "schema_version"):
            raise WorkloadError(f"workload.{key}: unknown field (expected name, task, seed, script, schema_version)")
    if "name" not in head:
        raise WorkloadError("workload.name: missing (expected a string naming the workload)")
    name = _check_type("workload.name", head["name"], str)
    task = _check_type("workload.task", head.get("task", "generate"), str)
    if task not in TASKS:
        raise WorkloadError(f"workload.task: expected one of {', '.join(TASKS)}, got {task!r}")
    seed = _check_type("workload.seed", head.get("seed", 0), int)
    version = _check_type("workload.schema_version", head.get("schema_version", SCHEMA_VERSION), int)
    if version != SCHEMA_VERSION:
        raise WorkloadError(f"workload.schema_version: this tool reads version {SCHEMA_VERSION}, got {version}")
    scripts = head.get("script", [])
    scripts = [scripts] if isinstance(scripts, str) else _check_type("workload.script", scripts, list)
    for script in scripts:
        _check_type("workload.script[]", script, str)

    model = _section(data, "model", Model)
    if "model" not in data or not (model.path or model.factory):
        raise WorkloadError("model.path: missing (expected a folder with config.json, "
                            "or model.factory = \"file.py:function\")")
    if model.dtype not in DTYPES:
        raise WorkloadError(f"model.dtype: expected one of {', '.join(DTYPES)}, got {model.dtype!r}")
    if model.path and model.factory:
        raise WorkloadError("model.factory: expected model.path or model.factory, not both")
    if model.factory and ":" not in model.factory:
        raise WorkloadError(f"model.factory: expected \"file.py:function\", got {model.factory!r}")

    int_lists = {"prompt_lengths": int, "batch_sizes": int, "prompts": str}
    inputs = _section(data, "inputs", Inputs, int_lists)
    if not inputs.prompts and not inputs.prompt_lengths:
        raise WorkloadError("inputs.prompts: missing (expected a list of texts, or "
                            "inputs.prompt_lengths = [8, 16, ...] for random-token prompts)")
    if any(v <= 0 for v in inputs.prompt_lengths):
        raise WorkloadError(f"inputs.prompt_lengths: expected positive integers, got {inputs.prompt_lengths}")
    if not inputs.batch_sizes or any(v <= 0 for v in inputs.batch_sizes):
        raise WorkloadError(f"inputs.batch_sizes: expected a non-empty list of positive integers, "
                            f"got {inputs.batch_sizes}")
    for field in ("max_new_tokens", "max_seq_len", "vocab_limit"):
        _positive(f"inputs.{field}", getattr(inputs, field))
    serve = _section(data, "serve", Serve, {"concurrency": int})
    if not serve.concurrency or any(c <= 0 for c in serve.concurrency):
        raise WorkloadError("serve.concurrency: expected a non-empty list of positive integers")
    _positive("serve.requests", serve.requests)
    _positive("serve.timeout_s", serve.timeout_s)
    if serve.engine not in SERVING_ENGINES:
        raise WorkloadError(f"serve.engine: expected one of {', '.join(map(repr, SERVING_ENGINES))}, "
                            f"got {serve.engine!r}")
    train = _section(data, "train", Train)
    if train.checkpoint_at >= train.steps or train.checkpoint_at <= 0:
        raise WorkloadError(f"train.checkpoint_at: expected 0 < checkpoint_at < steps ({train.steps}), "
                            f"got {train.checkpoint_at}")
    _positive("train.batch_size", train.batch_size)
    _check_range("train.seq_len", train.seq_len, lambda v: v >= 2, "at least 2 tokens (a next-token loss)")
    _positive("train.lr", train.lr)
    compile_ = _section(data, "compile", Compile)
    fit = _section(data, "fit", Fit, {"platforms": str, "lnc": int, "tp": int})
    from .fit import argument_problems
    for field, message in argument_problems(fit.platforms, fit.lnc, fit.tp, fit.batch_per_core,
                                            fit.max_seq_len or inputs.max_seq_len, fit.headroom):
        raise WorkloadError(f"fit.{field}: {message}")
    predict = _section(data, "predict", Predict, {"platforms": str, "tp": int})
    from .predict import argument_problems as predict_problems
    tokens = [1 if value is None else value for value in (predict.input_tokens, predict.output_tokens)]
    for option, message in predict_problems(predict.platforms, predict.tp or [1], predict.lnc, *tokens, predict.mode):
        field = {"platform": "platforms"}.get(option, option.replace("-", "_"))
        raise WorkloadError(f"predict.{field}: {message}")
    cost = _section(data, "cost", Cost)
    if cost.instances:
        raise WorkloadError("cost.instances: unknown field (give tables under cost.price_per_hour)")
    for device, price in list(cost.price_per_hour.items()):
        where = f"cost.price_per_hour.{device}"
        if isinstance(price, dict):
            from .platforms import platforms as trainium_platforms
            if device == "neuron" or device in trainium_platforms():
                raise WorkloadError(f"{where}: a Trainium price is a number, the price of one instance-hour of the "
                                    "platform's largest instance (its share is TP / logical cores per instance, "
                                    f"docs/neuron-migrate.md), got {price!r}")
            unknown = set(price) - {"per_hour", "instance", "devices"}
            if unknown or "per_hour" not in price:
                raise WorkloadError(f"{where}: expected a number or {{ per_hour = ..., instance = \"...\", "
                                    f"devices = N }}, got {price!r}")
            table = {"per_hour": _check_type(f"{where}.per_hour", price["per_hour"], float),
                     "instance": _check_type(f"{where}.instance", price.get("instance", device), str),
                     "devices": _check_type(f"{where}.devices", price.get("devices", 1), int)}
            _positive(f"{where}.devices", table["devices"])
            cost.instances[device] = table
            price = table["per_hour"]
        price = _check_type(where, price, float)
        _check_range(where, price, lambda v: v >= 0, "a price of zero or more")
        cost.price_per_hour[device] = price
    _positive("cost.tokens_per_month", cost.tokens_per_month)
    for field in ("backend", "mode"):
        value = getattr(compile_, field)
        for kind, chosen in (value.items() if isinstance(value, dict) else []):
            _check_type(f"compile.{field}.{kind}", chosen, str)
    for field in ("engineering_hours", "engineering_rate_per_hour"):
        _check_range(f"cost.{field}", getattr(cost, field), lambda v: v >= 0, "zero or more")
    _positive("cost.training_run_steps", cost.training_run_steps)
    _positive("predict.dp", predict.dp)
    _positive("predict.chunked_prefill", predict.chunked_prefill)
    licence = _section(data, "licence", Licence, {"allowed": str})
    gates = _section(data, "gates", Gates)
    return Workload(name=name, task=task, seed=seed, scripts=scripts, model=model, inputs=inputs,
                    serve=serve, train=train, compile=compile_, fit=fit, predict=predict, cost=cost,
                    licence=licence, gates=gates, path=os.path.abspath(path), text=raw.decode("utf-8"))
