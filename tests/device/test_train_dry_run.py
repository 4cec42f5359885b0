"""The dry run of a training step (issue 41 §4; python/torch_neuron_sim/train_dry_run.py, Note [A
training step, dry]): one rank's forward, backward and AdamW step run over fake tensors, each op
costed as the live device launches it, agrees with the live clock of the same step on the device
within 2% (torchtitan's llama3 debug model sizes in transformers' Llama; FSDP2 on 2 ranks is
tests/distributed/test_train_dry_run_fsdp2.py); memory per core, TP's collectives, time and cost to a
token budget, and bad input."""
import json
import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx
from torch_neuron_sim import dry_run, train_dry_run

transformers = pytest.importorskip("transformers")
from conftest import ROOT  # noqa: E402

# torchtitan's llama3_debugmodel: dim 256, 6 layers, 16 heads, vocabulary 2000 (its test tokenizer)
DEBUG_MODEL = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=16,
                   num_key_value_heads=16, vocab_size=2000, head_dim=16)


def debug_config(**overrides):
    return transformers.LlamaConfig(**{**DEBUG_MODEL, **overrides})


def live_step_ms(config, seq_len, local_batch, checkpointing):
    """The device clock's time of the second training step (the optimizer's state made in the first)."""
    config.use_cache = False
    torch.manual_seed(0)
    with torch.device("neuron"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.train()
    if checkpointing:
        model.activation_checkpointing_enable({"use_reentrant": False})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ids = torch.randint(0, config.vocab_size, (local_batch, seq_len), device="neuron")
    for _ in range(2):
        torch.neuron.synchronize()
        start = torch_neuronx.device_time()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.neuron.synchronize()
        elapsed = torch_neuronx.device_time() - start
    return elapsed


@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-ac", "ac"])
def test_the_dry_run_of_a_training_step_equals_the_live_clock(checkpointing):
    properties = torch.neuron.get_device_properties(0)
    live = live_step_ms(debug_config(), 128, 4, checkpointing)
    predicted = train_dry_run.predict_train(debug_config(), properties.platform, properties.logical_nc_config,
                                            seq_len=128, local_batch=4, activation_checkpointing=checkpointing)
    assert predicted.step_ms == pytest.approx(live, rel=0.02), (predicted.step_ms, live)
    assert predicted.collectives_ms == 0 and predicted.tokens_per_step == 512


def test_checkpointing_recomputes_the_forward_and_saves_less():
    plain = train_dry_run.predict_train(debug_config(), seq_len=128, local_batch=4)
    checkpointed = train_dry_run.predict_train(debug_config(), seq_len=128, local_batch=4,
                                               activation_checkpointing=True)
    assert checkpointed.step_ms > plain.step_ms and checkpointed.launches > plain.launches
    assert checkpointed.memory_gib["activations"] < plain.memory_gib["activations"]


def test_fsdp_shards_parameters_gradients_and_optimizer_state_and_adds_its_collectives():
    one = train_dry_run.predict_train(debug_config(), seq_len=128, local_batch=4)
    two = train_dry_run.predict_train(debug_config(), dp=2, seq_len=128, local_batch=4)
    for part in ("parameters", "gradients", "optimizer"):
        assert two.memory_gib[part] == pytest.approx(one.memory_gib[part] / 2, rel=0.01), part
    parameters = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(debug_config()).parameters())
    assert one.memory_gib["parameters"] == pytest.approx(parameters * 4 / 2 ** 30)
    assert one.memory_gib["optimizer"] == pytest.approx(2 * one.memory_gib["parameters"])
    assert one.collectives_ms == 0 < two.collectives_ms and two.memory_gib["gathered"] > 0
    assert two.tokens_per_step == 2 * one.tokens_per_step


def test_tensor_parallelism_adds_four_all_reduces_of_the_activations_per_layer():
    """Hand-computed: two all-reduces of [batch, sequence, hidden] bf16 in the forward, two in the backward."""
    one_rank = train_dry_run.predict_train(debug_config(), tp=2, seq_len=128, local_batch=4)
    per_reduce = dry_run.collective_ns("allreduce", 4 * 128 * 256 * 2, 2, "trn2", 2)
    assert one_rank.collectives_ms == pytest.approx(4 * 6 * per_reduce / 1e6)


def test_zero1_and_ddp_shard_what_they_shard_and_pay_their_bucketed_collectives():
    """Hand-computed: ZeRO-1 keeps bf16 parameters and gradients whole and 1/DP of the fp32 master
    weights and moments; its bf16 gradients are reduce-scattered and its parameters all-gathered
    (DDP: all-reduced), in 25 MiB buckets; a step across instances pays them over EFA."""
    parameters = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(debug_config()).parameters())
    gib = 2 ** 30
    zero1 = train_dry_run.predict_train(debug_config(), dp=4, seq_len=128, local_batch=4, sharding="zero1")
    ddp = train_dry_run.predict_train(debug_config(), dp=4, seq_len=128, local_batch=4, sharding="ddp")
    shard = -(-parameters // 4)
    assert zero1.memory_gib["parameters"] == pytest.approx((parameters * 2 + shard * 4) / gib, rel=1e-3)
    assert zero1.memory_gib["gradients"] == pytest.approx(parameters * 2 / gib, rel=1e-3)
    assert zero1.memory_gib["optimizer"] == pytest.approx(shard * 8 / gib, rel=1e-3)
    assert ddp.memory_gib["optimizer"] == pytest.approx(parameters * 8 / gib, rel=1e-3)
    assert zero1.memory_gib["gathered"] == ddp.memory_gib["gathered"] == 0
    nbytes = parameters * 2  # under one bucket
    assert nbytes < train_dry_run.BUCKET_BYTES
    assert zero1.collectives_ms == pytest.approx((dry_run.collective_ns("reduce_scatter", nbytes, 4, "trn2", 2, False)
                                                  + dry_run.collective_ns("allgather", nbytes, 4, "trn2", 2, False))
                                                 / 1e6)
    assert ddp.collectives_ms == pytest.approx(dry_run.collective_ns("allreduce", nbytes, 4, "trn2", 2, False) / 1e6)
    assert zero1.sharding == "zero1" and zero1.step_ms > zero1.compute_ms
    across = train_dry_run.predict_train(debug_config(), dp=4, seq_len=128, local_batch=4, sharding="zero1",
                                         instances=2)
    assert across.collectives_ms > zero1.collectives_ms  # EFA
    # the buckets: 60 MiB of gradients are two full buckets and one of 10 MiB
    assert train_dry_run._bucketed_ns("allreduce", 60 * 2 ** 20, 4, "trn2", 2, False) == pytest.approx(
        2 * dry_run.collective_ns("allreduce", 25 * 2 ** 20, 4, "trn2", 2, False)
        + dry_run.collective_ns("allreduce", 10 * 2 ** 20, 4, "trn2", 2, False))


def test_sequence_parallelism_splits_the_residual_stream_and_swaps_each_all_reduce_for_two():
    plain = train_dry_run.predict_train(debug_config(), tp=2, seq_len=128, local_batch=4)
    split = train_dry_run.predict_train(debug_config(), tp=2, seq_len=128, local_batch=4, sequence_parallel=True)
    activation = 4 * 128 * 256 * 2
    pair = (dry_run.collective_ns("reduce_scatter", activation, 2, "trn2", 2)
            + dry_run.collective_ns("allgather", activation, 2, "trn2", 2))
    assert split.collectives_ms == pytest.approx(4 * 6 * pair / 1e6)
    assert split.compute_ms < plain.compute_ms  # norms and residual adds on half the sequence
    assert split.memory_gib["activations"] < plain.memory_gib["activations"]
    assert split.launches == plain.launches and split.sequence_parallel


def test_a_pipeline_runs_its_stage_in_microbatch_slots_and_sends_between_stages():
    """Hand-computed 1F1B: a stage of 3 of the 6 layers (with the embedding and the head), traced
    for one microbatch of 1 sequence; 4 microbatches on 2 stages fill 5 slots, each with a send of
    the activation forward and of its gradient backward; the optimizer once."""
    pipeline = train_dry_run.predict_train(debug_config(), pp=2, microbatches=4, seq_len=128, local_batch=4)
    stage = train_dry_run.predict_train(debug_config(num_hidden_layers=3), seq_len=128, local_batch=1)
    send = dry_run.collective_ns("send", 128 * 256 * 2, 2, "trn2", 2, False)
    slot_ms = stage.step_ms - stage.optimizer_ms
    assert pipeline.optimizer_ms == pytest.approx(stage.optimizer_ms)
    assert pipeline.step_ms == pytest.approx(5 * (slot_ms + 2 * send / 1e6) + stage.optimizer_ms)
    assert pipeline.memory_gib["activations"] == pytest.approx(2 * stage.memory_gib["activations"])  # 2 in flight
    assert pipeline.memory_gib["parameters"] == pytest.approx(stage.memory_gib["parameters"])
    assert pipeline.tokens_per_step == 4 * 128 and pipeline.pp == 2
    default = train_dry_run.predict_train(debug_config(), pp=2, seq_len=128, local_batch=8)
    assert default.microbatches == 4  # 2 x pp


def test_time_and_cost_to_a_token_budget():
    p = train_dry_run.predict_train(debug_config(), dp=2, seq_len=128, local_batch=4, token_budget=1e9,
                                    price_per_instance_hour=10.0)
    assert p.tokens_per_s == pytest.approx(p.tokens_per_step / (p.step_ms / 1000))
    assert p.hours_to_budget == pytest.approx(1e9 / p.tokens_per_s / 3600)
    assert p.cost_to_budget == pytest.approx(p.hours_to_budget * p.instances * 10.0)
    assert 0 < p.mfu < 1


def test_a_large_model_on_many_instances_answers():
    p = train_dry_run.predict_train(os.path.join(ROOT, "demo", "configs", "llama-3.1-8b"), dp=256, seq_len=512,
                                    local_batch=1, activation_checkpointing=True)
    assert p.instances == 4 and p.collectives_ms > 0 and 0 < p.mfu < 1
    assert p.memory_gib["parameters"] == pytest.approx(8.03e9 * 4 / 256 / 2 ** 30, rel=0.02)


@pytest.mark.parametrize("kwargs,message", [
    (dict(dp=0), "dp 0"), (dict(local_batch=1.5), "local_batch"), (dict(platform="tpu"), "platform"),
    (dict(dp=128, instances=1), "need 2 trn2 instance"), (dict(logical_nc_config=3), r"\(LNC\) 3"),
    (dict(tp=5), "tp 5 must divide"), (dict(sharding="zero3"), "sharding 'zero3'"),
    (dict(sequence_parallel=True), "give tp 2 or more"), (dict(microbatches=2), "microbatches are a pipeline's"),
    (dict(pp=7), "6 decoder layers, fewer than the stages"), (dict(pp=2, local_batch=3, microbatches=2), "equal size"),
    (dict(pp=0), "pp 0")])
def test_bad_input_is_refused_with_what_to_give(kwargs, message):
    with pytest.raises(ValueError, match=message):
        train_dry_run.predict_train(debug_config(), **{"seq_len": 16, **kwargs})


def test_a_process_with_a_process_group_is_told_to_use_its_own(tmp_path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="without a default process group"):
            train_dry_run.predict_train(debug_config(), dp=2, seq_len=16)
    finally:
        dist.destroy_process_group()


def test_neuron_migrate_predicts_training(tmp_path):
    config = tmp_path / "model"
    debug_config().save_pretrained(config)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "neuron_migrate", "predict", str(config), "--train", "--dp", "2",
                             "--tp", "1,2", "--seq-len", "64", "--local-batch", "2", "--token-budget", "1e9", "--json"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert [row["tp"] for row in table["rows"]] == [1, 2] and table["task"] == "train"
    assert all(row["hours_to_budget"] > 0 and row["step_ms"] > 0 for row in table["rows"])
    assert "no published training figure" in table["label"]
    layout = subprocess.run([sys.executable, "-m", "neuron_migrate", "predict", str(config), "--train", "--dp", "2",
                             "--tp", "2", "--pp", "2", "--microbatches", "2", "--sharding", "zero1",
                             "--sequence-parallel", "--seq-len", "64", "--local-batch", "2"],
                            capture_output=True, text=True, env=dict(env, COLUMNS="250"), timeout=600)
    assert layout.returncode == 0, layout.stderr
    assert "DP 2 (zero1) x PP 2 (2 microbatches, 1F1B) x TP with sequence parallelism" in " ".join(layout.stdout.split())
    refused = subprocess.run([sys.executable, "-m", "neuron_migrate", "predict", str(config), "--train", "--tp", "1",
                              "--sequence-parallel", "--seq-len", "64"], capture_output=True, text=True, env=env,
                             timeout=600)
    assert refused.returncode == 2 and "give tp 2 or more" in " ".join(refused.stdout.split())
