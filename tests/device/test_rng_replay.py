"""Training features that replay randomness replay it exactly on neuron (issue 39): activation
checkpointing (reentrant and not, early stop on and off, preserve_rng_state, selective
checkpointing's context_fn), eager and compiled, fork_rng, the CPU and neuron generators together,
and transformers' gradient_checkpointing_enable() on models with dropout. Each compares with the
same run without the feature, exactly (torch.equal). The whole file runs again with every op
queued (asynchronous mode): test_everything_again_with_every_op_queued. The default mode is
launch-blocking (NEURON_LAUNCH_BLOCKING unset).

Why: torch.utils.checkpoint saves and restores a device's RNG state only when
getattr(torch.neuron, "_initialized", False) is true; torch.neuron had no `_initialized`, so the
recomputed dropout drew another mask and the gradients were silently wrong
(tests/device/test_device_module_contract.py has the whole device-module contract)."""
import functools

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp

from conftest import QUEUED_RUN, every_op_queued


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_issue_repro_recomputes_the_same_mask():
    torch.neuron.manual_seed(7)
    x = torch.ones(4, 16, device="neuron", requires_grad=True)
    masks = []

    def f(z):
        m = F.dropout(z, 0.5)
        masks.append((m != 0).cpu())
        return m
    with cp.set_checkpoint_early_stop(False):
        cp.checkpoint(f, x, use_reentrant=False).sum().backward()
    assert len(masks) == 2 and torch.equal(masks[0], masks[1])
    assert torch.equal(x.grad.cpu(), masks[0].float() * 2)


def _policy(ctx, op, *args, **kwargs):
    return cp.CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else cp.CheckpointPolicy.PREFER_RECOMPUTE


SELECTIVE = functools.partial(cp.create_selective_checkpoint_contexts, _policy)


def _linear_dropout_run(mode, compiled, early_stop=True, preserve=True, context_fn=None, seed=7):
    """Linear -> dropout -> Linear -> dropout, checkpointed per `mode` (None: not checkpointed);
    returns the output, the input's gradient, the weights' gradients and the generator's state."""
    torch.manual_seed(0)
    first, second = torch.nn.Linear(16, 32).to("neuron"), torch.nn.Linear(32, 16).to("neuron")

    def block(z):
        return F.dropout(second(F.dropout(first(z).relu(), 0.5)), 0.25)

    def f(z):
        if mode is None:
            return block(z)
        kwargs = {"use_reentrant": mode == "reentrant", "preserve_rng_state": preserve}
        if context_fn is not None:
            kwargs["context_fn"] = context_fn
        return cp.checkpoint(block, z, **kwargs)
    run = torch.compile(f, backend="neuron") if compiled else f
    x = torch.randn(8, 16, device="neuron").requires_grad_()
    torch.neuron.manual_seed(seed)
    with cp.set_checkpoint_early_stop(early_stop):
        out = run(x)
        (out * torch.arange(16.0, device="neuron")).sum().backward()
    return [out.detach().cpu(), x.grad.cpu(), first.weight.grad.cpu(), second.weight.grad.cpu(),
            torch.neuron.get_rng_state()]


CASES = [("reentrant", True, None), ("reentrant", False, None), ("non_reentrant", True, None),
         ("non_reentrant", False, None), ("non_reentrant", True, "selective"), ("non_reentrant", False, "selective")]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mode,early_stop,context", CASES)
def test_checkpointed_dropout_gives_the_gradients_of_the_run_without_it(mode, early_stop, context, compiled,
                                                                          fresh_dynamo):
    reference = _linear_dropout_run(None, compiled=False)
    got = _linear_dropout_run(mode, compiled, early_stop=early_stop,
                              context_fn=SELECTIVE if context == "selective" else None)
    names = ["output", "input grad", "first weight grad", "second weight grad", "generator state after"]
    differ = [name for name, a, b in zip(names, reference, got) if not torch.equal(a, b)]
    assert not differ, differ
    # and dropout did drop (the output's zeros)
    assert (got[0] == 0).any()


def test_compiled_checkpoint_replays_inside_the_programs(fresh_dynamo, monkeypatch):
    """The compiled run recomputes its dropout in the backward program from the saved state (not in
    eager code after a graph break): the forward saves neuron::rng_state, the backward draws from it."""
    from torch_neuron_sim.compile import cache, passes
    seen = []
    original = passes.replay_random_ops

    def counting(gm):
        seen.append(original(gm))
        return seen[-1]
    monkeypatch.setattr(passes, "replay_random_ops", counting)
    monkeypatch.setattr(cache, "load", lambda *args, **kwargs: None)  # compiled here, not read from the cache
    _linear_dropout_run("non_reentrant", compiled=True)
    assert seen == [2, 2], seen  # two dropouts: saved in the forward graph, replayed in the backward


def test_without_preserve_rng_state_the_recompute_draws_anew():
    """preserve_rng_state=False: the recomputed dropout takes the generator's next numbers, as on CUDA
    (PyTorch's documented trade: faster, and only correct without randomness in the region)."""
    reference = _linear_dropout_run(None, compiled=False)
    got = _linear_dropout_run("non_reentrant", compiled=False, preserve=False)
    assert torch.equal(got[0], reference[0])  # the forward is the same
    assert not torch.equal(got[1], reference[1])  # the backward used other masks


def test_checkpoint_restores_the_cpu_and_the_neuron_generators_together():
    def block(z):
        noise = torch.rand(z.shape).to("neuron")  # CPU generator
        return F.dropout(z, 0.5) + noise           # neuron generator

    def run(checkpointed):
        torch.manual_seed(3)  # both generators
        x = torch.ones(6, 10, device="neuron", requires_grad=True)
        out = cp.checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        (out * out).sum().backward()
        return out.detach().cpu(), x.grad.cpu(), torch.get_rng_state(), torch.neuron.get_rng_state()
    for a, b in zip(run(False), run(True)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device_type", ["neuron", None], ids=["neuron", "current accelerator"])
def test_fork_rng_restores_the_neuron_generator(device_type):
    torch.manual_seed(9)
    before = torch.neuron.get_rng_state()
    with torch.random.fork_rng(device_type=device_type):
        inside = torch.rand(5, device="neuron").cpu()
        torch.neuron.manual_seed(1234)
    assert torch.equal(torch.neuron.get_rng_state(), before)
    assert torch.equal(torch.rand(5, device="neuron").cpu(), inside)  # the same numbers again


def test_fork_rng_on_the_devices_given():
    torch.manual_seed(9)
    before = [torch.neuron.get_rng_state(i) for i in range(2)]
    with torch.random.fork_rng(devices=[1], device_type="neuron"):
        torch.rand(5, device="neuron:1")
    assert torch.equal(torch.neuron.get_rng_state(1), before[1])
    with torch.random.fork_rng(devices=[], device_type="neuron"):
        torch.rand(5, device="neuron:1")  # not forked
    assert not torch.equal(torch.neuron.get_rng_state(1), before[1])


# ---- transformers' gradient checkpointing ------------------------------------------------------------

DROPOUT = {"gpt2": dict(resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.2),
           "llama": dict(attention_dropout=0.2),
           "phi3": dict(resid_pdrop=0.2, embd_pdrop=0.2, attention_dropout=0.2)}


def _fine_tune(model_type, checkpointing, attention, steps=3):
    from tiny_models import build
    model = build(model_type, seed=1, attn_implementation=attention, **DROPOUT[model_type]).to("neuron").train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        assert model.is_gradient_checkpointing
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(42)
    losses = []
    for step in range(steps):
        ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(step)).to("neuron")
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, {name: p.detach().cpu() for name, p in model.named_parameters()}


@pytest.mark.parametrize("model_type,attention", [("gpt2", "eager"), ("gpt2", "sdpa"), ("llama", "sdpa"),
                                                  ("phi3", "eager")])
def test_gradient_checkpointing_enable_gives_the_parameters_of_training_without_it(model_type, attention):
    """3 AdamW steps of a model with dropout > 0: the same losses and parameters, exactly."""
    losses, params = _fine_tune(model_type, checkpointing=False, attention=attention)
    losses_ckpt, params_ckpt = _fine_tune(model_type, checkpointing=True, attention=attention)
    assert losses == losses_ckpt
    differ = [name for name in params if not torch.equal(params[name], params_ckpt[name])]
    assert not differ, differ


def test_the_training_regression_guard_can_fail():
    """The guard above compares runs that differ only in checkpointing; with the generator left
    out of checkpoint's stash (the defect of issue 39), the same comparison fails."""
    import torch.utils.checkpoint as checkpoint_module
    original = checkpoint_module.get_device_states
    checkpoint_module.get_device_states = lambda *args: ([], [])  # nothing stashed: the old behaviour
    try:
        _, params_ckpt = _fine_tune("gpt2", checkpointing=True, attention="eager", steps=2)
        _, params = _fine_tune("gpt2", checkpointing=False, attention="eager", steps=2)
    finally:
        checkpoint_module.get_device_states = original
    assert any(not torch.equal(params[name], params_ckpt[name]) for name in params)


@pytest.mark.skipif(QUEUED_RUN, reason="this is the queued run")
def test_everything_again_with_every_op_queued():
    every_op_queued(__file__)
