"""The dry run of transformers' generate() (issue 41 §5; python/torch_neuron_sim/generate_loop.py,
Note [The generate loop, dry]): the whole loop a user runs, its forwards and its own eager device
ops per token, predicted without the model's weights, equals the live clock of the same generate()
on the device within 2% (eager, and compiled with a static cache); each prediction names its loop."""
import json
import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx
from torch_neuron_sim import dry_run, generate_loop

transformers = pytest.importorskip("transformers")
from tiny_models import build  # noqa: E402

from conftest import ROOT  # noqa: E402

def device():
    properties = torch.neuron.get_device_properties(0)
    return properties.platform, properties.logical_nc_config


def live_generate(model, input_tokens, output_tokens, mode, **generate_kwargs):
    """(ms of device time of the whole generate(), ms to the start of its second forward or None
    when compiled): the second generate() of the same shapes, as a served request after warm-up."""
    ids = torch.full((1, input_tokens), 5, dtype=torch.long, device="neuron")
    kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=output_tokens, **generate_kwargs)
    if mode == "compiled":
        kwargs["cache_implementation"] = "static"
    model.generate(**kwargs)  # compiles; one-time work out of the measure
    marks = []
    hook = None
    if mode == "eager":  # a compiled forward would trace the hook: TTFT is checked eager only
        hook = model.register_forward_pre_hook(lambda *_: marks.append(torch_neuronx.device_time()))
    torch.neuron.synchronize()
    start = torch_neuronx.device_time()
    out = model.generate(**kwargs)
    torch.neuron.synchronize()
    total = torch_neuronx.device_time() - start
    if hook:
        hook.remove()
    assert out.shape[1] == input_tokens + output_tokens, "the live model stopped early: choose another prompt"
    return total, (marks[1] - start if len(marks) > 1 else None)


def on_neuron(model_type, **overrides):
    torch._dynamo.reset()
    return build(model_type, dtype=torch.bfloat16, **overrides).to("neuron"), \
        transformers.AutoConfig.for_model(model_type, **{**__import__("tiny_models").CONFIGS[model_type], **overrides})


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("model_type,overrides", [("llama", {}), ("llama", {"num_hidden_layers": 5}), ("qwen3", {}),
                                                  ("phi3", {}), ("gemma3_text", {})],
                         ids=["llama", "llama-5-layers", "qwen3", "phi3", "gemma3-sliding"])
def test_the_dry_run_of_generate_equals_the_live_clock_of_generate(model_type, overrides, mode):
    """The issue's check: the whole loop within 2% (the loop's ops are costed for the platform as
    live launches, op for op; the forwards replayed on meta), TTFT too where it can be read."""
    model, config = on_neuron(model_type, **overrides)
    with torch.no_grad():
        live_ms, live_ttft_ms = live_generate(model, 12, 8, mode)
    prediction = dry_run.predict(config, *device()[:1], tp=1, logical_nc_config=device()[1], input_tokens=12,
                                 output_tokens=8, mode=mode, loop="generate")
    predicted_ms = prediction.ttft_ms + 7 * prediction.per_token_ms
    assert predicted_ms == pytest.approx(live_ms, rel=0.02), (predicted_ms, live_ms)
    if live_ttft_ms is not None:
        assert prediction.ttft_ms == pytest.approx(live_ttft_ms, rel=0.02)
    assert prediction.loop.startswith("transformers' generate()")


def test_sampling_settings_of_the_folder_are_the_loops(tmp_path):
    """A folder's generation_config.json that samples (temperature, top-k, top-p) adds its logits
    processors to every token: the dry run of the folder costs them, as the live generate() pays."""
    model, _ = on_neuron("llama", eos_token_id=None, bos_token_id=None)
    model.generation_config = transformers.GenerationConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.9)
    model.save_pretrained(tmp_path)
    assert os.path.isfile(tmp_path / "generation_config.json")
    with torch.no_grad():
        torch.manual_seed(0)
        live_ms, _ = live_generate(model, 12, 8, "compiled")
    sampled = dry_run.predict(str(tmp_path), device()[0], tp=1, logical_nc_config=device()[1], input_tokens=12,
                              output_tokens=8, loop="generate")
    assert sampled.ttft_ms + 7 * sampled.per_token_ms == pytest.approx(live_ms, rel=0.02)
    os.remove(tmp_path / "generation_config.json")
    greedy = dry_run.predict(str(tmp_path), device()[0], tp=1, logical_nc_config=device()[1], input_tokens=12,
                             output_tokens=8, loop="generate")
    assert greedy.per_token_ms < sampled.per_token_ms, "the sampling processors' ops were not costed"


def test_generate_costs_its_eager_ops_where_the_forward_alone_does_not():
    """The issue's 175x: the same config, prompt and length, the forward's loop against generate's;
    each names its loop, and the generate loop costs more per token by generate's own launches."""
    config = transformers.AutoConfig.from_pretrained(os.path.join(ROOT, "demo", "model"))
    forward = dry_run.predict(config, "trn2", input_tokens=32, output_tokens=8)
    generate = dry_run.predict(config, "trn2", input_tokens=32, output_tokens=8, loop="generate")
    assert "forward alone" in forward.loop and "generate()" in generate.loop
    eager_launch_ms = 0.27  # the fitted eager launch of data/platforms.toml: at least 10 a token
    assert generate.per_token_ms > forward.per_token_ms + 10 * eager_launch_ms


def test_a_composite_op_is_costed_as_the_launches_the_device_makes():
    """Note [Composites on the device]: masked_fill with a scalar runs ATen's composite on a
    neuron tensor (a clone and a masked_fill_): two launches on the live clock and in the dry run."""
    platform, lnc = device()
    x = torch.randn(4, 256, device="neuron")
    mask = x > 0
    torch.neuron.synchronize()
    start = torch_neuronx.device_time()
    x.masked_fill(mask, 0.0)
    torch.neuron.synchronize()
    live_ns = (torch_neuronx.device_time() - start) * 1e6
    mode = dry_run.CostingMode(platform, lnc)
    x, mask = x.to("meta"), mask.to("meta")
    with mode:
        x.masked_fill(mask, 0.0)
    assert mode.launches == 2 and mode.ns == pytest.approx(live_ns, abs=2)


def test_a_tensor_made_from_host_data_on_the_device_costs_its_copy():
    """torch.tensor(data, device="neuron") copies below the dispatcher's Python modes: the loop's
    costing (a mode over live tensors) costs that copy at the lift_fresh it sees, as the live
    clock charges it."""
    platform, lnc = device()
    mode = dry_run.CostingMode(platform, lnc)
    torch.neuron.synchronize()
    start = torch_neuronx.device_time()
    with mode:
        torch.tensor([1, 2, 3], device="neuron")
    torch.neuron.synchronize()
    live_ns = (torch_neuronx.device_time() - start) * 1e6
    assert live_ns > 0 and mode.launches == 1 and mode.ns == pytest.approx(live_ns, abs=2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(serving="nxdi"), "serving"), (dict(step_tokens=2), "step_tokens"), (dict(max_model_len=64), "max_model_len"),
    (dict(loop="beam"), "loop 'beam'"), (dict(mode="fused"), "mode")])
def test_a_generate_loop_with_a_serving_stacks_settings_is_refused(kwargs, message):
    args = dict(dict(input_tokens=8, output_tokens=4, loop="generate"), **kwargs)
    config = transformers.AutoConfig.for_model("llama", **__import__("tiny_models").CONFIGS["llama"])
    with pytest.raises(ValueError, match=message):
        dry_run.predict(config, "trn2", **args)


def test_the_stand_in_keeps_vocabulary_and_special_tokens_and_shrinks_the_rest():
    config = transformers.AutoConfig.from_pretrained(os.path.join(ROOT, "demo", "configs", "gpt-oss-20b"))
    small = generate_loop.stand_in_config(config)
    assert (small.vocab_size, small.pad_token_id, small.eos_token_id) == (config.vocab_size, config.pad_token_id,
                                                                          config.eos_token_id)
    assert small.hidden_size < config.hidden_size and small.num_local_experts < config.num_local_experts
    # one layer of each attention kind: generate makes one mask per kind
    assert small.layer_types == ["sliding_attention", "full_attention"] and small.num_hidden_layers == 2


def test_neuron_migrate_predicts_the_generate_loop(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "neuron_migrate", "predict", os.path.join(ROOT, "demo", "model"),
                             "--tp", "1", "--input-tokens", "16", "--output-tokens", "4", "--loop", "generate", "--json"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert "generate()" in table["loop"] and table["rows"][0]["per_token_ms"] > 1
    refused = subprocess.run([sys.executable, "-m", "neuron_migrate", "predict", os.path.join(ROOT, "demo", "model"),
                              "--tp", "1", "--loop", "generate", "--concurrency", "4"],
                             capture_output=True, text=True, env=env, timeout=600)
    assert refused.returncode == 2 and "--loop" in refused.stdout


@pytest.mark.parametrize("shape,samples", [((256,), 1), ((2, 256), 1), ((2, 256), 3)])
def test_multinomial_is_costed_as_the_devices_composite(shape, samples):
    """The device draws a sample by checks and the Gumbel-max trick (csrc/kernels/Random.cpp):
    eleven launches, as generate()'s sampling pays each token."""
    platform, lnc = device()
    probabilities = torch.rand(shape, device="neuron")
    torch.neuron.synchronize()
    start = torch_neuronx.device_time()
    torch.multinomial(probabilities, samples)
    torch.neuron.synchronize()
    live_ns = (torch_neuronx.device_time() - start) * 1e6
    mode = dry_run.CostingMode(platform, lnc)
    on_meta = probabilities.to("meta")
    with mode:
        drawn = torch.multinomial(on_meta, samples)
    assert drawn.shape == (*shape[:-1], samples) and drawn.dtype == torch.long
    assert mode.ns == pytest.approx(live_ns, abs=20), mode.by_op


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_the_stand_ins_loop_is_the_models_own(mode):
    """Note [The generate loop, dry]: the loop's ops do not depend on the model's insides: the
    stand-in's (one small layer) cost what the model's own loop costs, op for op."""
    platform, lnc = device()
    model, config = on_neuron("qwen3", num_hidden_layers=3)
    stand_in = generate_loop.run_loop(config, 10, 6, mode == "compiled", platform, lnc)
    own = generate_loop.run_loop(config, 10, 6, mode == "compiled", platform, lnc, model=model)
    assert stand_in.loop_ns == own.loop_ns > 0
    assert [c.compiled for c in stand_in.calls] == [c.compiled for c in own.calls]
    assert [c.loop_ns_before for c in stand_in.calls] == [c.loop_ns_before for c in own.calls]
