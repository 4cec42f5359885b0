"""The dry run of a training step (issue 41 §4): how long and how much to train a model of any
size on N Trainium instances, from its config alone.

Note [A training step, dry]
The step a team runs is run for real, with fake tensors: the model of one rank is built under
FakeTensorMode on the `neuron` device (sizes and dtypes, no memory), sharded with FSDP2 as
torchtitan shards it (`fully_shard` per decoder layer and on the root; parameters bf16 for the
compute, gradients reduced in fp32, fp32 master weights and AdamW state), over a fake process
group of the data-parallel degree (rank 0's view: every rank does the same work); then one
forward (causal-LM loss), backward and AdamW step run under dry_run.CostingMode, which costs each
op as the live device launches it (FSDP2's copy-in, chunk-cat and split copies run their device
implementation, costed op by op), and each collective FSDP2 issues (all-gather of a layer's
parameters in the forward and again in the backward, reduce-scatter of its gradients) as the
live clock costs it (dry_run.collective_ns: NeuronLink within an instance, EFA across).
Tensor parallelism of degree T (dry_run.shard_config: one rank's shard) adds its all-reduces of
the [batch, sequence, hidden] activations: two per decoder layer forward and two backward.
Activation checkpointing (`activation_checkpointing=True`) recomputes each decoder layer's forward
in the backward (transformers' gradient_checkpointing_enable, non-reentrant).
The step time is the sum of the launches and the collectives in issue order: the overlap FSDP2's
separate streams give on the live clock (within the device's issue frontier, docs/device-clock.md)
is not modelled.

Data parallelism (`sharding`): "fsdp2" as above; "zero1" (NxD Training's ZeRO-1, Megatron's
distributed optimizer): the model computes in bf16 on every rank, its bf16 gradients are
reduce-scattered, each rank updates its 1/DP shard of fp32 master weights with AdamW (the
gradient shard made fp32, the updated shard made bf16 again: launches costed) and the bf16
parameters are all-gathered; "ddp": the gradients all-reduced, every rank the whole optimizer.
Their collectives are bucketed as DDP buckets (25 MiB, BUCKET_BYTES), each costed by the
collective model.
Sequence parallelism (`sequence_parallel`, with TP): outside attention and the MLP each TP rank
works on 1/TP of the sequence: the traced ops that write the residual stream (a [batch, sequence,
hidden] value) or reduce it, and are not matmuls or attention, cost 1/TP of what they cost whole,
and what autograd saves of that shape is 1/TP; TP's all-reduces become a reduce-scatter and an
all-gather each (the same bytes). Where a rank's MLP, experts or attention are as wide as the
hidden size, shape cannot tell their values from the stream's: no op is split then (as in the
inference dry run), only the collectives change.
Pipeline parallelism (`pp` stages, `microbatches`, 1F1B as torchtitan's PipelineScheduleSingle
default): the decoder layers split as evenly as they go (pipeline_stages); each stage is costed
with the embedding and the LM head (as the costliest would be), its own layers cut from the whole
model (per-layer config entries, e.g. layer_types, cut with them), stages of the same layers
costed once; the step is the slowest stage's, the memory the fullest stage's. A stage is traced for
one microbatch; the step is (microbatches + PP - 1) microbatch slots of its forward and backward,
each with its TP collectives and the point-to-point sends of its activation forward and its
gradient backward, then the optimizer step and the data-parallel collectives once. With FSDP2 the
stage stays gathered across the microbatches (torchtitan: no reshard after forward under PP; the
pipeline syncs gradients in the last microbatch's backward): each parameter all-gathered and each
gradient reduce-scattered once a step, FSDP2's copies around them once, and the gathered memory
the stage's bf16 parameters with, over more than one microbatch, its fp32 unsharded gradients.
The first stage holds min(PP, microbatches) microbatches' activations.

Memory per core: parameters, gradients and optimizer state as the sharding leaves them (fsdp2:
1/DP each, fp32, AdamW's two moments; zero1: bf16 parameters and gradients whole, fp32 master
weights and moments 1/DP; ddp: all whole), the largest all-gathered layer (fsdp2: bf16, twice:
prefetch; under PP the stage, above), and activations: the bytes autograd saves for the backward in one step (unique storages;
with checkpointing, a layer's input instead of its insides, plus one layer's recomputed set).
"""
import contextlib
import copy
import dataclasses
import math
import sys
import unittest.mock

import torch

from . import dry_run

COLLECTIVES = {"c10d::_allgather_base_": ("allgather", "output"), "c10d::allgather_": ("allgather", "output"),
               "c10d::allgather_into_tensor_coalesced_": ("allgather", "output"),
               "c10d::_reduce_scatter_base_": ("reduce_scatter", "input"),
               "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", "input"),
               "c10d::allreduce_": ("allreduce", "input")}


@dataclasses.dataclass
class TrainPrediction:
    """Predicted figures of one training step of one rank (every rank does the same work)."""
    platform: str
    logical_nc_config: int
    instances: int
    dp: int
    tp: int
    activation_checkpointing: bool
    seq_len: int
    local_batch: int  # sequences per data-parallel rank per step
    step_ms: float
    compute_ms: float  # launches
    collectives_ms: float  # data parallelism's, TP's and PP's sends, in series with the launches
    launches: int
    tokens_per_step: int  # the global batch: dp x local batch x sequence
    tokens_per_s: float
    mfu: float  # 6 x parameters x tokens (+ attention) over the step, against the dp x tp x pp ranks' BF16 peak
    memory_gib: dict  # per core: parameters, gradients, optimizer, gathered, activations, total
    token_budget: float = None
    hours_to_budget: float = None
    cost_to_budget: float = None  # instances x hours x price per instance-hour (None: no price)
    modelled: str = ""
    pp: int = 1
    microbatches: int = 1
    sharding: str = "fsdp2"  # the data-parallel kind: fsdp2, zero1 or ddp
    sequence_parallel: bool = False
    optimizer_ms: float = 0.0  # the optimizer step's launches (part of compute_ms), once a step


class _StepCosting(dry_run.CostingMode):
    """CostingMode of a training step over fake tensors: FSDP2's ops as their device
    implementations run, collectives by the collective model, other namespaces' bookkeeping
    (prim::, profiler::) not costed."""

    def __init__(self, platform, logical_nc_config, group_size, spans_instances=False, stream=None):
        super().__init__(platform, logical_nc_config, routed=False)  # the model's own attention, as live
        self.group_size, self.spans_instances = group_size, spans_instances
        self.collective_ns = 0
        self.collectives = 0
        self.fsdp_ns = self.fsdp_launches = 0  # FSDP2's copies (part of ns and launches)
        # sequence parallelism: (TP degree, the residual stream's [batch, sequence, hidden] shape)
        self.stream = stream

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if name in COLLECTIVES:
            algorithm, side = COLLECTIVES[name]
            tensors = [t for t in torch.utils._pytree.tree_leaves(args[0] if side == "output" or algorithm ==
                                                                   "allreduce" else args[1]) if isinstance(t, torch.Tensor)]
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
            self.collective_ns += dry_run.collective_ns(algorithm, nbytes, self.group_size, self.platform, self.lnc,
                                                        self.spans_instances)
            self.collectives += 1
            return func(*args, **kwargs)
        if name.startswith("fsdp::"):  # FSDP2's copies: Python composites registered for the device
            before, launched = self.ns, self.launches
            result = self.in_parts(func._op_dk, torch._C.DispatchKey.PrivateUse1, *args, **kwargs)[0]
            self.fsdp_ns += self.ns - before
            self.fsdp_launches += self.launches - launched
            return result
        if not name.startswith("aten::"):
            return func(*args, **kwargs)
        before = self.ns
        result = super().__torch_dispatch__(func, types, args, kwargs)
        if self.stream is not None and _on_the_stream(name, args, result, self.stream[1]):
            self.ns -= (self.ns - before) * (1 - 1 / self.stream[0])
        return result


def _on_the_stream(name, args, result, shape):
    """Whether op `name` works on the residual stream outside attention and the MLP (Note [A
    training step, dry], sequence parallelism): it writes a value of the stream's shape, or reduces
    one, and is not a matmul or an attention."""
    base = name.split("::")[-1].split(".")[0]
    if base in dry_run._NOT_SEQUENCE_PARALLEL or "attention" in base:
        return False

    def of_shape(tree):
        return any(isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in torch.utils._pytree.tree_leaves(tree))
    return of_shape(result) or (base in dry_run._REDUCTIONS and of_shape(args))


@contextlib.contextmanager
def _masks_as_on_the_device():
    """transformers' mask code takes a fake tensor for a trace (is_tracing) and builds the masks a
    trace needs (an explicit packed-sequence mask); the live device reads the values instead and
    skips them. Within this, the mask code asks the host as it does on the device (the answers:
    dry_run.CostingMode's, for tensors without values)."""
    from transformers import masking_utils
    traced = masking_utils.is_tracing
    with unittest.mock.patch.object(masking_utils, "is_tracing", lambda tensor=None: traced(None)):
        yield


@contextlib.contextmanager
def _fake_group(world_size):
    """A fake process group of `world_size` as the default group (rank 0), removed after."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        raise RuntimeError("the training dry run needs a process without a default process group (it runs rank 0 "
                           "of a fake one); run it in its own process, e.g. `neuron-migrate predict --train`")
    hook = sys.excepthook  # init_process_group installs a "[rank0]:" prefixing hook and never removes it
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


def _is_weight(tensor):
    """A parameter (or FSDP2's gathered copy of one, itself a Parameter), or a view of one (a
    Linear saves weight.t()): memory the parameters' own figures count, not an activation."""
    base = getattr(tensor, "_base", None)
    return isinstance(tensor, torch.nn.Parameter) or isinstance(base, torch.nn.Parameter)


def _saved_bytes(current=None, stream=None):
    """A context recording the bytes autograd saves (unique storages, weights left out) while it
    is on: {storage: bytes}; with `current` ([layer index or None]), also {layer: bytes} of what
    each decoder layer saves. `stream` (TP degree, shape): sequence parallelism keeps 1/TP of a
    saved value of the residual stream's shape."""
    seen, per_layer = {}, {}

    def pack(tensor):
        if _is_weight(tensor):
            return tensor
        try:
            key = tensor.untyped_storage()._cdata
            nbytes = tensor.untyped_storage().nbytes()
        except (NotImplementedError, RuntimeError):  # a tensor without storage of its own
            key, nbytes = id(tensor), tensor.numel() * tensor.element_size()
        if stream is not None and tuple(tensor.shape) == stream[1]:
            nbytes //= stream[0]
        if key not in seen and current is not None and current[0] is not None:
            per_layer[current[0]] = per_layer.get(current[0], 0) + nbytes
        seen[key] = max(seen.get(key, 0), nbytes)
        return tensor
    return seen, per_layer, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


@contextlib.contextmanager
def _attributed_to_layers(layers, current):
    """Within it, current[0] is the index of the decoder layer whose forward runs (else None)."""
    handles = []
    for index, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda *_, i=index: current.__setitem__(0, i)))
        handles.append(layer.register_forward_hook(lambda *_: current.__setitem__(0, None)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


SHARDINGS = ("fsdp2", "zero1", "ddp")
BUCKET_BYTES = 25 * 2 ** 20  # DDP's bucket_cap_mb default: the gradients' collectives, in buckets


def predict_train(config_or_dir, platform="trn2", logical_nc_config=None, dp=1, tp=1, instances=None, seq_len=2048,
                  local_batch=1, activation_checkpointing=False, token_budget=None, price_per_instance_hour=None,
                  pp=1, microbatches=None, sharding="fsdp2", sequence_parallel=False):
    """TrainPrediction of one step (Note [A training step, dry]). `dp` data-parallel ranks
    (`sharding`: fsdp2, zero1 or ddp) of `pp` pipeline stages of `tp` tensor-parallel ranks each
    (`sequence_parallel` with TP): dp x pp x tp logical cores, on `instances` instances (default:
    as few as hold them). `local_batch` sequences per data-parallel rank per step, in
    `microbatches` (PP; default: the most, up to 2 x PP, that split local_batch evenly). `token_budget`: tokens to train on
    (hours and cost to reach it)."""
    from torch.distributed.device_mesh import init_device_mesh
    if platform not in dry_run.PLATFORMS:
        raise ValueError(f"platform {platform!r}: choose one of {', '.join(dry_run.PLATFORMS)}")
    most = int(dry_run.platform_constant(platform, "max_logical_nc_config"))
    lnc = most if logical_nc_config is None else logical_nc_config
    if lnc not in range(1, most + 1):
        raise ValueError(f"logical core configuration (LNC) {lnc} is not offered on {platform} (1 to {most})")
    for name, value in (("dp", dp), ("tp", tp), ("pp", pp), ("seq_len", seq_len), ("local_batch", local_batch),
                        ("microbatches", 1 if microbatches is None else microbatches)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} {value!r}: give a whole number, 1 or more")
    if microbatches is None:  # the most microbatches up to 2 x PP that split the local batch evenly
        microbatches = max(m for m in range(1, 2 * pp + 1) if local_batch % m == 0) if pp > 1 else 1
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r}: choose one of {', '.join(SHARDINGS)}")
    if sequence_parallel and tp == 1:
        raise ValueError("sequence_parallel splits the sequence across the TP ranks: give tp 2 or more")
    if microbatches > 1 and pp == 1:
        raise ValueError(f"microbatches {microbatches}: microbatches are a pipeline's (give pp 2 or more); without "
                         "one, local_batch sequences run as one batch")
    if local_batch % microbatches:
        raise ValueError(f"local_batch {local_batch} does not split into {microbatches} microbatches of equal size")
    ranks = dp * tp * pp
    per_instance = dry_run.ranks_per_instance(platform, lnc)
    needed = math.ceil(ranks / per_instance)
    instances = needed if instances is None else instances
    if not isinstance(instances, int) or isinstance(instances, bool):
        raise ValueError(f"instances {instances!r}: give a whole number of instances")
    if instances > ranks:
        raise ValueError(f"{instances} instances for {dp} x {pp} x {tp} ranks: each instance needs a rank; give at "
                         f"most {ranks}")
    if token_budget is not None and (isinstance(token_budget, bool) or not isinstance(token_budget, (int, float))
                                     or not token_budget > 0 or math.isinf(token_budget)):
        raise ValueError(f"token_budget {token_budget!r}: give the tokens to train on, a number above 0")
    if instances < needed:
        raise ValueError(f"{dp} x {pp} x {tp} ranks need {needed} {platform} instance(s) at LNC {lnc} ({per_instance} "
                         f"logical cores each), not {instances}")
    config = dry_run.shard_config(dry_run._load_config(config_or_dir), tp)
    config.use_cache = False
    layers = config.num_hidden_layers
    if pp > layers:
        raise ValueError(f"pp {pp}: this model has {layers} decoder layers, fewer than the stages")
    shape = Shape(dp=dp, tp=tp, pp=pp, microbatches=microbatches, sharding=sharding,
                  sequence_parallel=sequence_parallel, instances=instances, seq_len=seq_len, local_batch=local_batch,
                  layers=layers)
    with _fake_group(dp):
        mesh = init_device_mesh("neuron", (dp,)) if dp > 1 and sharding == "fsdp2" else None  # outside the fake mode
        try:
            # each distinct stage is costed; the step is the slowest one's, the memory the fullest one's
            stages = [_step(config_or_dir, config, platform, lnc, shape, activation_checkpointing, token_budget,
                            price_per_instance_hour, mesh, stage) for stage in _distinct_stages(config, pp)]
            slowest = max(stages, key=lambda p: p.step_ms)
            fullest = max(stages, key=lambda p: p.memory_gib["total"])
            return dataclasses.replace(slowest, memory_gib=fullest.memory_gib)
        except (ValueError, RuntimeError) as error:
            if isinstance(error, ValueError) or "training dry run" in str(error):
                raise
            failure = error
        except Exception as error:  # noqa: BLE001  (the model's, FSDP2's or the fake kernels' own errors)
            failure = error
    detail = str(failure).splitlines()[0] if str(failure) else ""
    hint = (" At DP 1 the step computes in the parameters' fp32 (FSDP2's bf16 compute needs DP 2 or more), which "
            "some kernels refuse." if dp == 1 and sharding == "fsdp2" else "")
    raise RuntimeError(f"the training dry run could not run a step of this {config.model_type} model "
                       f"({type(failure).__name__}: {detail}).{hint}") from failure


def pipeline_stages(layers, pp):
    """The decoder layers of each of `pp` stages: [range], as even as they split (the first stages
    one more where they do not), as torchtitan splits a model by layers."""
    size, more = divmod(layers, pp)
    starts = [s * size + min(s, more) for s in range(pp + 1)]
    return [range(starts[s], starts[s + 1]) for s in range(pp)]


def _distinct_stages(config, pp):
    """The stages whose costs may differ ([range of layer indices]; None: the whole model, no
    pipeline): stages of the same layers (by their modules' kinds and parameters' shapes, and the
    config's per-layer entries, e.g. layer_types) in any order are costed once."""
    if pp == 1:
        return [None]
    model = _meta_model(config)
    per_layer = _per_layer_entries(config, config.num_hidden_layers)

    def signature(index):
        layer = model.model.layers[index]
        return (tuple((name, type(module).__name__) for name, module in layer.named_modules()),
                tuple((name, tuple(p.shape)) for name, p in layer.named_parameters()),
                tuple((name, repr(value[index])) for name, value in sorted(per_layer.items())))
    distinct = {}
    for stage in pipeline_stages(config.num_hidden_layers, pp):
        distinct.setdefault(tuple(sorted(signature(i) for i in stage)), stage)
    return list(distinct.values())


def _per_layer_entries(config, layers):
    """{name: list} of the config's entries with one value per decoder layer (layer_types, ...)."""
    return {name: value for name, value in vars(config).items() if isinstance(value, list) and len(value) == layers}


def _keep_layers(model, config, stage):
    """`model` (built with all its decoder layers) cut to the decoder layers of `stage`, with the
    embedding and the LM head (a pipeline stage costed as the costliest: Note [A training step,
    dry]); the config's per-layer entries (layer_types) cut with them."""
    full = config.num_hidden_layers
    model.model.layers = torch.nn.ModuleList([model.model.layers[i] for i in stage])
    for target in {id(model.config): model.config, id(model.model.config): model.model.config}.values():
        for name, value in _per_layer_entries(target, full).items():
            setattr(target, name, [value[i] for i in stage])
        target.num_hidden_layers = len(stage)


@dataclasses.dataclass
class Shape:
    """The parallel layout of a training step (predict_train's arguments)."""
    dp: int
    tp: int
    pp: int
    microbatches: int
    sharding: str
    sequence_parallel: bool
    instances: int
    seq_len: int
    local_batch: int
    layers: int  # the model's decoder layers (a stage has ceil(layers / pp))


def _bucketed_ns(algorithm, nbytes, group, platform, lnc, spans_instances):
    """Collectives of `nbytes` in all, in BUCKET_BYTES buckets, over `group` ranks."""
    full, rest = divmod(int(nbytes), BUCKET_BYTES)
    ns = full * dry_run.collective_ns(algorithm, BUCKET_BYTES, group, platform, lnc, spans_instances)
    return ns + (dry_run.collective_ns(algorithm, rest, group, platform, lnc, spans_instances) if rest else 0)


def _step(config_or_dir, config, platform, lnc, shape, activation_checkpointing, token_budget,
          price_per_instance_hour, mesh, stage=None):
    from transformers import AutoModelForCausalLM
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dp, tp, pp, sharding = shape.dp, shape.tp, shape.pp, shape.sharding
    config = copy.deepcopy(config)  # the model holds it, and a stage cuts it
    micro = shape.local_batch // shape.microbatches  # sequences of one traced forward and backward
    # sequence parallelism splits the residual stream, told apart by its shape; where a rank's MLP,
    # experts or attention are as wide as the hidden size, their values have that shape too: no op
    # is split then (as the inference dry run), only the collectives change
    widths = {getattr(config, name, None) for name in ("intermediate_size",) + dry_run.EXPERT_WIDTHS}
    widths |= {config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim}
    stream = (tp, (micro, shape.seq_len, config.hidden_size)) \
        if shape.sequence_parallel and config.hidden_size not in widths else None
    fsdp = sharding == "fsdp2" and dp > 1
    with FakeTensorMode(allow_non_fake_inputs=True):
        with torch.device("neuron"):  # ZeRO-1 and DDP compute in bf16, their fp32 master weights the optimizer's
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if sharding == "fsdp2"
                                                     else torch.bfloat16)
        if stage is not None:
            _keep_layers(model, config, stage)
        model.train()
        if activation_checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": False})
        layers = getattr(getattr(model, "model", None), "layers", None)
        if layers is None:
            raise ValueError(f"the training dry run shards decoder layers (model.model.layers); this "
                             f"{config.model_type} model has none")
        if fsdp:  # with PP (torchtitan): the stage stays gathered across the microbatches, each parameter
            # all-gathered once a step and its gradient reduce-scattered once (the last microbatch's backward)
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in layers:
                fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=pp == 1)
            fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=pp == 1)
        parameters = list(model.parameters())
        if sharding == "fsdp2":
            masters = None
            optimizer = torch.optim.AdamW(parameters, lr=3e-4)
        else:  # each rank's fp32 master shard of every parameter (ZeRO-1: 1/dp of it; DDP: all)
            share = dp if sharding == "zero1" else 1
            masters = [torch.nn.Parameter(torch.empty(-(-p.numel() // share), dtype=torch.float32, device="neuron"))
                       for p in parameters]
            optimizer = torch.optim.AdamW(masters, lr=3e-4)

        def optimizer_step():
            if masters is not None:  # the gradient shard made fp32, the updated shard made bf16 again
                for p, master in zip(parameters, masters):
                    master.grad = p.grad.detach().reshape(-1)[:master.numel()].float()
            optimizer.step()
            if masters is not None:
                with torch.no_grad():
                    for p, master in zip(parameters, masters):
                        p.detach().reshape(-1)[:master.numel()].copy_(master)
                        p.grad = None
            optimizer.zero_grad()

        ids = torch.zeros(micro, shape.seq_len, dtype=torch.long, device="neuron")
        # a first step, not costed: the optimizer's state is made (a step in a run's steady state);
        # it runs without checkpointing, so that what each layer saves is known (a checkpointed
        # step holds one layer's set at a time again, in its recompute)
        if activation_checkpointing:
            model.activation_checkpointing_disable()
        current = [None]
        _, per_layer, layer_hooks = _saved_bytes(current, stream)
        with _StepCosting(platform, lnc, dp, stream=stream), _masks_as_on_the_device(), \
                _attributed_to_layers(layers, current):
            with layer_hooks:
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        optimizer_step()
        if activation_checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": False})
        # the DP group holds one rank of each TP group: it spans instances when all the ranks do
        mode = _StepCosting(platform, lnc, dp, spans_instances=shape.instances > 1, stream=stream)
        saved, _, hooks = _saved_bytes(stream=stream)
        with mode, _masks_as_on_the_device():
            with hooks:
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            microbatch_ns, microbatch_launches = mode.ns, mode.launches
            # FSDP2's copies around its collectives: once a step under PP (the stage kept gathered)
            once_ns, once_launches = (mode.fsdp_ns, mode.fsdp_launches) if pp > 1 else (0, 0)
            optimizer_step()
        local = sum(_local(p).numel() for p in parameters)  # this rank's (FSDP2: 1/dp)
        whole = sum(p.numel() for p in parameters)  # DTensors: whole
        largest_layer = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
        in_layers = sum(p.numel() for layer in layers for p in layer.parameters())
        # FSDP2 keeps the root's parameters (embedding, final norm, LM head) gathered the whole step
        root = whole - in_layers
    itemsize = 2
    spans = shape.instances > 1
    activation = micro * shape.seq_len * config.hidden_size * itemsize
    # one microbatch's TP collectives: two in the forward, two in the backward, two again in a
    # checkpointed layer's recompute; sequence parallelism: a reduce-scatter and an all-gather each
    tp_ns = 0
    if tp > 1:
        per_layer_reduces = 6 if activation_checkpointing else 4
        one = (dry_run.collective_ns("reduce_scatter", activation, tp, platform, lnc) +
               dry_run.collective_ns("allgather", activation, tp, platform, lnc)) if shape.sequence_parallel \
            else dry_run.collective_ns("allreduce", activation, tp, platform, lnc)
        tp_ns = per_layer_reduces * len(layers) * one
    # PP: a microbatch's activation sent to the next stage in the forward, its gradient back
    p2p_ns = 0
    if pp > 1:
        crosses = spans and tp * pp > dry_run.ranks_per_instance(platform, lnc)
        p2p_ns = 2 * dry_run.collective_ns("send", activation // (tp if shape.sequence_parallel else 1), 2,
                                           platform, lnc, crosses)
    # ZeRO-1 and DDP: the bf16 gradients' collectives in buckets (FSDP2's are traced)
    dp_ns = mode.collective_ns
    if not fsdp and dp > 1:
        if sharding == "zero1":
            dp_ns += _bucketed_ns("reduce_scatter", whole * itemsize, dp, platform, lnc, spans)
            dp_ns += _bucketed_ns("allgather", whole * itemsize, dp, platform, lnc, spans)
        else:
            dp_ns += _bucketed_ns("allreduce", whole * itemsize, dp, platform, lnc, spans)
    slots = shape.microbatches + pp - 1 if pp > 1 else 1  # 1F1B: the pipeline fills and drains
    optimizer_ns = mode.ns - microbatch_ns
    compute_ns = slots * (microbatch_ns - once_ns) + once_ns + optimizer_ns
    collectives_ns = slots * (tp_ns + p2p_ns) + dp_ns
    step_ns = compute_ns + collectives_ns
    tokens = dp * shape.local_batch * shape.seq_len
    full = dry_run.shard_config(dry_run._load_config(config_or_dir), 1)
    weights = _active_parameters(_meta_model(full), full)  # a MoE token runs its top-k experts only
    heads_dim = full.num_attention_heads * (getattr(full, "head_dim", None) or full.hidden_size // full.num_attention_heads)
    flops = 6 * weights * tokens + 6 * full.num_hidden_layers * heads_dim * shape.seq_len * tokens  # causal: half of 12
    peak_flops, _ = dry_run._C._peak_rates(platform, lnc)
    gib = 1 / 2 ** 30
    if sharding == "fsdp2":
        # gathered: two layers (one prefetched) and the root in bf16; under PP the whole stage, and
        # its gradients unsharded in fp32 while they accumulate over the microbatches
        gathered = 2 * largest_layer + root if pp == 1 else whole + (whole * 2 if shape.microbatches > 1 else 0)
        memory = {"parameters": local * 4 * gib, "gradients": local * 4 * gib, "optimizer": local * 8 * gib,
                  "gathered": gathered * itemsize * gib if dp > 1 else 0.0}
    else:
        shard = -(-whole // dp) if sharding == "zero1" else whole
        memory = {"parameters": (whole * itemsize + shard * 4) * gib, "gradients": whole * itemsize * gib,
                  "optimizer": shard * 8 * gib, "gathered": 0.0}
    in_flight = min(pp, shape.microbatches) if pp > 1 else 1  # 1F1B: the first stage's microbatches in flight
    memory["activations"] = (in_flight * sum(saved.values()) + (max(per_layer.values(), default=0)
                                                                if activation_checkpointing else 0)) * gib
    memory["total"] = sum(memory.values())
    tokens_per_s = tokens / (step_ns * 1e-9)
    hours = token_budget / tokens_per_s / 3600 if token_budget else None
    return TrainPrediction(
        platform=platform, logical_nc_config=lnc, instances=shape.instances, dp=dp, tp=tp,
        activation_checkpointing=activation_checkpointing, seq_len=shape.seq_len, local_batch=shape.local_batch,
        step_ms=step_ns / 1e6, compute_ms=compute_ns / 1e6, collectives_ms=collectives_ns / 1e6,
        launches=slots * (microbatch_launches - once_launches) + once_launches + mode.launches - microbatch_launches,
        tokens_per_step=tokens, tokens_per_s=tokens_per_s,
        mfu=flops / (step_ns * 1e-9) / (peak_flops * dp * tp * pp),
        memory_gib=memory, token_budget=token_budget, hours_to_budget=hours,
        cost_to_budget=hours * shape.instances * price_per_instance_hour if hours and price_per_instance_hour else None,
        modelled=("eager launches of one rank's forward, backward and AdamW step, the data-parallel collectives "
                  f"({sharding}), TP's all-reduces (or sequence parallelism's reduce-scatters and all-gathers), a "
                  "1F1B pipeline's slots and sends, in series (Note [A training step, dry]); not modelled: the "
                  "overlap of collectives with compute, compiled training, interleaved pipeline schedules"),
        pp=pp, microbatches=shape.microbatches, sharding=sharding, sequence_parallel=shape.sequence_parallel,
        optimizer_ms=optimizer_ns / 1e6)


def _active_parameters(model, config):
    """The parameters one token's forward uses: a routed MoE layer's experts count top-k / E."""
    total = sum(p.numel() for p in model.parameters())
    top_k = dry_run._top_k(config)
    if not top_k:
        return total
    for module in model.modules():
        experts = dry_run._expert_weights(module) if type(module).__name__.endswith("Experts") else []
        if experts:
            count = experts[0].shape[0]
            total -= sum(w.numel() for w in experts) * (1 - min(top_k, count) / count)
    return total


def _local(parameter):
    return parameter.to_local() if hasattr(parameter, "to_local") else parameter


def _meta_model(config):
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)
