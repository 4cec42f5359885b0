"""The dry run (python/torch_neuron_sim/dry_run.py; issue 25 §2): a model on the meta device,
each op costed from its sizes and dtypes by the device clock's own cost path, agrees with the
live clock's device_time() of the same forward on the device, and a 70B config runs."""
import math
import os
import unittest.mock

import pytest
import torch

import torch_neuronx
from torch_neuron_sim import _C, dry_run

transformers = pytest.importorskip("transformers")
CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "demo", "configs")


def tiny_llama():
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=256, head_dim=16)


def live_ns(model, tokens):
    ids = torch.zeros(1, tokens, dtype=torch.long, device="neuron")
    start = torch_neuronx.device_time()
    model(input_ids=ids, use_cache=False, logits_to_keep=1)
    return (torch_neuronx.device_time() - start) * 1e6


@pytest.mark.parametrize("tokens", [1, 8])
def test_dry_run_of_a_tiny_llama_equals_the_live_clock(tokens):
    properties = torch.neuron.get_device_properties(0)
    torch.manual_seed(0)
    live_model = transformers.AutoModelForCausalLM.from_config(tiny_llama(), dtype=torch.bfloat16).eval().to("neuron")
    with torch.no_grad():
        live_ns(live_model, tokens)  # first call: one-time work out of the measure
        live = live_ns(live_model, tokens)
        meta_model = dry_run.build(tiny_llama())
        ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
        mode = dry_run.CostingMode(properties.platform, properties.logical_nc_config)
        with mode:
            meta_model(input_ids=ids, use_cache=False, logits_to_keep=1)
    assert mode.ns == pytest.approx(live, rel=0.01), mode.by_op


def test_the_binding_costs_a_matmul_as_the_live_clock():
    properties = torch.neuron.get_device_properties(0)
    a = torch.randn(64, 256, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(256, 512, dtype=torch.bfloat16, device="neuron")
    start = torch_neuronx.device_time()
    torch.mm(a, b)
    live = (torch_neuronx.device_time() - start) * 1e6
    ns = _C._cost_op("aten::mm", [([64, 256], torch.bfloat16, True), ([256, 512], torch.bfloat16, True)],
                     [([64, 512], torch.bfloat16, True)], properties.platform, properties.logical_nc_config)[0]
    assert ns == pytest.approx(live, abs=2)


def test_the_70b_config_runs_at_tp_64_with_positive_latencies():
    prediction = dry_run.predict(os.path.join(CONFIGS, "llama-3.3-70b"), "trn2", tp=64, input_tokens=128,
                                 output_tokens=2, mode="eager")
    assert prediction.ttft_ms > 0 and prediction.per_token_ms > 0
    assert prediction.decode_launches > 80 * 10  # every decoder layer's ops were costed
    compiled = dry_run.predict(os.path.join(CONFIGS, "llama-3.3-70b"), "trn2", tp=64, input_tokens=128,
                               output_tokens=2)
    assert compiled.decode_launches == 1 and 0 < compiled.per_token_ms < prediction.per_token_ms
    assert 0 < compiled.mfu_prefill < 1 and 0 < compiled.mbu_decode < 1


def compiled_live_ns(model, ids):
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    compiled(input_ids=ids, use_cache=False, logits_to_keep=1)  # compiles
    start = torch_neuronx.device_time()
    compiled(input_ids=ids, use_cache=False, logits_to_keep=1)
    return (torch_neuronx.device_time() - start) * 1e6


@pytest.mark.parametrize("tokens", [1, 8])
def test_compiled_dry_run_of_a_tiny_llama_equals_the_live_compiled_program(tokens):
    """The dry run's compiled mode lowers with the neuron backend's passes and costs the program
    as the executor does: equal to the live clock's time for the program torch.compile built."""
    properties = torch.neuron.get_device_properties(0)
    torch.manual_seed(0)
    torch._dynamo.reset()
    live_model = transformers.AutoModelForCausalLM.from_config(tiny_llama(), dtype=torch.bfloat16,
                                                               attn_implementation="sdpa").eval().to("neuron")
    with torch.no_grad():
        live = compiled_live_ns(live_model, torch.zeros(1, tokens, dtype=torch.long, device="neuron"))
        torch._dynamo.reset()
        costs = dry_run.ProgramCosts(properties.platform, properties.logical_nc_config)
        meta_model = dry_run.build(tiny_llama())
        forward = torch.compile(meta_model, backend=costs.backend, fullgraph=True)
        with dry_run.routed_attention():
            forward(input_ids=torch.zeros(1, tokens, dtype=torch.long, device="meta"), use_cache=False,
                    logits_to_keep=1)
    torch._dynamo.reset()
    assert costs.calls == 1
    assert costs.ns == pytest.approx(live, rel=0.01)


def test_compiled_decode_is_predicted_faster_than_eager_and_layers_extrapolate():
    config = tiny_llama()
    config.num_hidden_layers = 6
    eager = dry_run.predict(config, "trn2", tp=2, input_tokens=16, output_tokens=3, mode="eager")
    compiled = dry_run.predict(config, "trn2", tp=2, input_tokens=16, output_tokens=3)
    assert compiled.per_token_ms < eager.per_token_ms / 10  # one program launch against one per op
    # six layers of one kind are costed from two- and three-layer traces: the same as tracing six
    prefill, step, _ = dry_run.compiled_forward_ns(config, 2, "trn2", 2, 16, 19)
    whole = dry_run._compiled_forward_ns(config, 2, "trn2", 2, 16, 19)
    assert prefill == pytest.approx(whole[0], rel=1e-6) and step == pytest.approx(whole[1], rel=1e-6)


def test_serving_stacks_add_their_data_file_cost_per_step():
    import tomllib
    with open(os.path.join(os.path.dirname(dry_run.__file__), "data", "serving.toml"), "rb") as f:
        overhead_ms = tomllib.load(f)["vllm-neuron"]["step_overhead_ns"]["value"] / 1e6
    # 128 input tokens: a bucket of its own; the stack's programs as compiled_forward_ns costs them.
    config = tiny_llama()
    served = dry_run.predict(config, "trn2", input_tokens=128, output_tokens=2, serving="vllm-neuron")
    prefill_ns, step_ns, _ = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 128, 130, gqa_attention=True,
                                                         prefill_tokens=128, decode_cache_len=130)
    assert served.prefill_tokens == 128
    assert served.ttft_ms == pytest.approx(prefill_ns / 1e6 + overhead_ms)
    assert served.per_token_ms == pytest.approx(step_ns / 1e6 + overhead_ms)


@pytest.mark.parametrize("serving, tokens, max_len, bucket", [
    ("device", 192, 8192, 192),  # torch.compile(dynamic=False): the prompt's own length
    ("vllm-neuron", 192, 8192, 256), ("vllm-neuron", 100, 8192, 128), ("vllm-neuron", 5000, 6000, 6000),
    ("vllm-neuron", 8192, 8192, 8192),
    ("nxdi", 10000, 12800, 12800), ("nxdi", 256, 12800, 256),
    ("nxdi", 5000, 10000, 10000),  # generate_buckets(128, 10000): 128 ... 4096 (2**round(log2 10000) = 8192 excluded), 10000
])
def test_the_prefill_is_padded_to_the_serving_stacks_bucket(serving, tokens, max_len, bucket):
    assert dry_run.prefill_bucket(serving, tokens, max_len) == bucket


def test_a_padded_prefill_costs_its_bucket_and_mfu_counts_the_prompt():
    config = tiny_llama()
    config.num_key_value_heads = config.num_attention_heads
    served = dry_run.predict(config, "trn2", input_tokens=100, output_tokens=2, serving="vllm-neuron", max_model_len=256)
    bucket = dry_run.predict(config, "trn2", input_tokens=128, output_tokens=2, serving="vllm-neuron", max_model_len=256)
    assert served.prefill_tokens == 128
    assert served.ttft_ms == pytest.approx(bucket.ttft_ms)
    assert served.mfu_prefill == pytest.approx(bucket.mfu_prefill * (
        dry_run._model_figures(config, 1, 100, 100)[0] / dry_run._model_figures(config, 1, 128, 128)[0]))


def test_a_stack_with_gqa_attention_reads_the_cache_once_per_key_value_head():
    """transformers' compiled SDPA path copies a grouped cache per query head (repeat_kv); a
    serving stack's kernels with gqa_attention do not: their decode step is cheaper by the
    copies, on a 4,096-position cache."""
    config = tiny_llama()  # 4 query heads, 2 key-value heads
    repeated = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 8, 4096, gqa_attention=False)
    grouped = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 8, 4096, gqa_attention=True)
    assert grouped[1] < repeated[1]
    assert grouped[0] == repeated[0]  # the prefill attends to the prompt alone either way


def test_a_stacks_prefill_does_not_grow_with_its_cache_and_its_decode_reads_the_bucket():
    """Review of v2, findings 2 and 8: a stack allocates its cache at load (its prefill writes
    the prompt's rows only); the decode step starts at the prompt's end, also when the prompt's
    bucket fills the cache."""
    config = tiny_llama()
    short = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 100, 256, gqa_attention=True, prefill_tokens=128)
    long = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 100, 65536, gqa_attention=True, prefill_tokens=128)
    assert short[0] == long[0]
    assert short[1] < long[1]  # the decode step reads its whole cache
    # a prompt of 100 in a bucket of 128 that is the whole cache: the step at position 100 fits
    dry_run.compiled_forward_ns(config, 1, "trn2", 2, 100, 128, gqa_attention=True, prefill_tokens=128)
    with pytest.raises(ValueError, match="does not fit"):
        dry_run.compiled_forward_ns(config, 1, "trn2", 2, 128, 128, gqa_attention=True)


def test_nxdi_decode_reads_its_token_generation_bucket_not_max_model_len():
    """Review of v2, finding 4: NxD Inference's decode programs are bucketed as its prefill."""
    assert dry_run.decode_bucket("nxdi", 192 + 96, 131072) == 512
    assert dry_run.decode_bucket("nxdi", 11000, 12800) == 12800
    assert dry_run.decode_bucket("vllm-neuron", 288, 8192) == 8192
    config = tiny_llama()
    short = dry_run.predict(config, "trn2", input_tokens=192, output_tokens=192, serving="nxdi", max_model_len=512)
    long = dry_run.predict(config, "trn2", input_tokens=192, output_tokens=192, serving="nxdi", max_model_len=131072)
    assert long.per_token_ms == pytest.approx(short.per_token_ms)


def test_the_dry_run_patches_nothing_process_wide_for_a_stacks_attention():
    """Review of v2, finding 6: a stack's attention is a registered attention function, not a
    patch of transformers' module globals another thread would see."""
    import threading
    from transformers.integrations import sdpa_attention
    original, seen, stop = sdpa_attention.use_gqa_in_sdpa, set(), threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(sdpa_attention.use_gqa_in_sdpa)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        dry_run.predict(tiny_llama(), "trn2", input_tokens=8, output_tokens=2, serving="vllm-neuron")
    finally:
        stop.set()
        watcher.join()
    assert seen == {original} and sdpa_attention.use_gqa_in_sdpa is original


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "fast"}, "mode 'fast'"),
    ({"serving": "tgi"}, "serving 'tgi' is not in"),
    ({"platform": "trn9"}, "platform 'trn9' is not in"),
    ({"tp": 3}, "tp 3 must divide"),
    ({"mode": "eager", "step_tokens": 4}, "compiled mode only"),
])
def test_bad_arguments_are_refused_with_what_to_choose(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dry_run.predict(tiny_llama(), **{"input_tokens": 4, "output_tokens": 2, **kwargs})


def test_tp_collectives_are_the_cost_models_hierarchical_all_reduce():
    """64 ranks at LNC 2 on trn2: 4 per chip, 16 chips: 2*3 + 2*15 latency steps (hand count)."""
    import tomllib
    with open(os.path.join(os.path.dirname(dry_run.__file__), "data", "platforms.toml"), "rb") as f:
        trn2 = {k: v["value"] for k, v in tomllib.load(f)["trn2"].items()}
    nbytes = 8192 * 2
    expected = 2 * 63 / 64 * nbytes / trn2["neuronlink_chip_gbps"] + 36 * trn2["neuronlink_latency_ns"]
    assert dry_run.collective_ns("allreduce", nbytes, 64, "trn2", 2) == round(expected)
    # beyond one instance (64 ranks at LNC 2), EFA
    efa = 2 * 127 / 128 * nbytes / trn2["efa_chip_gbps"] + (2 * 3 + 2 * 31) * trn2["efa_latency_ns"]
    assert dry_run.collective_ns("allreduce", nbytes, 128, "trn2", 2) == round(efa)


def test_a_folder_without_a_config_is_refused_with_what_to_give(tmp_path, capsys):
    import pytest
    from torch_neuron_sim import dry_run
    with pytest.raises(SystemExit) as exit_info:
        dry_run.main([str(tmp_path), "--tp", "4"])
    assert exit_info.value.code == 2
    assert "no config.json there" in capsys.readouterr().err


def test_layers_that_differ_are_traced_whole_not_extrapolated():
    """Review 25 finding 5: an MoE config whose first layers are dense (DeepSeek-V3's
    first_k_dense_replace, Qwen3-MoE's mlp_only_layers) is not built of one kind of layer."""
    config = transformers.Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                         num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=16, vocab_size=256, num_experts=4, num_experts_per_tok=2,
                                         mlp_only_layers=[3])
    assert not dry_run._uniform_layers(config, 1)
    prefill, step, _ = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 8, 12)
    whole = dry_run._compiled_forward_ns(config, 1, "trn2", 2, 8, 12)
    assert (prefill, step) == whole[:2]
    llama = tiny_llama()
    llama.num_hidden_layers = 5
    assert dry_run._uniform_layers(llama, 1)


def test_tied_embeddings_count_the_lm_head_in_mbu():
    """Review 25 finding 11: a tied LM head reads the embedding matrix every step."""
    untied, tied = tiny_llama(), tiny_llama()
    tied.tie_word_embeddings = True
    untied.tie_word_embeddings = False
    assert dry_run._model_figures(tied, 1, 8, 8) == dry_run._model_figures(untied, 1, 8, 8)


@pytest.mark.parametrize("kwargs, message", [
    ({"tp": 0}, "1 or more"),
    ({"tp": 3}, "must divide"),
    ({"platform": "trn1", "logical_nc_config": 2}, "not offered on trn1"),
])
def test_sharding_and_core_settings_that_cannot_run_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dry_run.predict(tiny_llama(), **{"input_tokens": 4, "output_tokens": 2, **kwargs})


def test_a_config_that_is_not_llama_style_gets_a_clear_error():
    gpt2 = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256)
    with pytest.raises(ValueError, match="Llama-style decoder configs; this gpt2 config has no"):
        dry_run.predict(gpt2, input_tokens=4, output_tokens=2)


def test_trn1_defaults_to_its_own_logical_core_configuration():
    assert dry_run.predict(tiny_llama(), "trn1", input_tokens=4, output_tokens=2).logical_nc_config == 1
    assert dry_run.predict(tiny_llama(), "trn2", input_tokens=4, output_tokens=2).logical_nc_config == 2


# ---- serving under load (issue 41 §1, Note [Serving under load]) ----------------------------

def test_the_request_simulator_serves_closed_loop_with_continuous_batching():
    # one client: prefill 20 ms (first token), four steps of 10 ms; its second request after it
    one = dry_run.simulate(20.0, {1: 10.0}, output_tokens=5, concurrency=1, requests_per_client=2)
    assert (one.requests, one.ttft_ms["p50"], one.tpot_ms["p50"], one.latency_ms["p95"]) == (2, 20.0, 10.0, 60.0)
    assert one.tokens_per_s == pytest.approx(10 / 120 * 1000)
    # two clients: both prefills first (0-20, 20-40), then steps batch both sequences
    two = dry_run.simulate(20.0, {1: 10.0, 2: 10.0}, output_tokens=5, concurrency=2, requests_per_client=1)
    assert two.ttft_ms == {"p50": 30.0, "p95": pytest.approx(39.0)}  # 20 and 40 ms
    assert two.latency_ms["p95"] == 80.0 and two.tokens_per_s == pytest.approx(10 / 80 * 1000)
    # three running sequences run the batch-4 bucket's step
    three = dry_run.simulate(0.0, {1: 1.0, 2: 2.0, 4: 5.0}, output_tokens=2, concurrency=3, requests_per_client=1)
    assert three.latency_ms["p50"] == 5.0
    assert dry_run.batch_buckets(6) == [1, 2, 4, 6] and dry_run.batch_buckets(1) == [1]


def test_serving_at_concurrency_1_equals_predicts_request_and_batching_beats_serial_requests():
    config = tiny_llama()
    single = dry_run.predict(config, "trn2", tp=1, input_tokens=16, output_tokens=4)
    one, two, four = dry_run.serve(config, "trn2", tp=1, input_tokens=16, output_tokens=4, concurrency=(1, 2, 4),
                                   requests_per_client=2)
    request_ms = single.ttft_ms + 3 * single.per_token_ms
    assert one.tokens_per_s == pytest.approx(4 / request_ms * 1000) and one.decode_step_ms == {1: single.per_token_ms}
    assert set(four.decode_step_ms) == {1, 2, 4}
    assert single.per_token_ms <= four.decode_step_ms[4] < 4 * single.per_token_ms  # a step shared by the batch
    assert one.tokens_per_s < two.tokens_per_s < four.tokens_per_s  # concurrency 2 is not two serial requests
    with pytest.raises(ValueError, match="concurrency"):
        dry_run.serve(config, concurrency=(0,))


def test_the_simulator_serves_requests_of_their_own_lengths():
    # one client, two requests: 4 in / 3 out (prefill 10 ms), then 8 in / 2 out (prefill 20 ms)
    level = dry_run.simulate({4: 10.0, 8: 20.0}.__getitem__, {1: 5.0}, output_tokens=None, concurrency=1,
                             requests_per_client=2, lengths=[(4, 3), (8, 2)])
    # A: 0-10 prefill, steps to 20; B: 20-40 prefill, one step to 45
    assert level.requests == 2 and level.ttft_ms["p50"] == 15.0 and level.latency_ms["p50"] == 22.5
    assert level.tpot_ms == {"p50": 5.0, "p95": 5.0}
    assert level.tokens_per_s == pytest.approx(5 / 45 * 1000)


def test_the_simulator_prefills_in_chunks_inside_the_decode_steps():
    # budget 4 tokens a step; a chunk costs 1 ms per token, the stack 0.5 ms a step, a decode step
    # 3 ms; a step with both reads the weights once (2 ms shared). Two clients, 6 in / 2 out each.
    level = dry_run.simulate(None, {1: 3.0, 2: 3.0}, output_tokens=None, concurrency=2, requests_per_client=1,
                             lengths=[(6, 2)], chunk_tokens=4, chunk_ms=lambda tokens: float(tokens), overhead_ms=0.5,
                             shared_ms=2.0)
    # A: chunks of 4 (0-4.5) and 2 (-7.0): first token at 7. Then A's decode with B's first chunk
    # of 3 (the budget less A's token): max(3, 3.5, 3 + 3 - 2) = 4 -> 11, A ends; B's last 3 ->
    # 14.5 (first token); B's decode -> 17.5.
    assert level.ttft_ms["p50"] == pytest.approx((7.0 + 14.5) / 2)
    assert level.latency_ms["p50"] == pytest.approx((11.0 + 17.5) / 2)
    assert level.tokens_per_s == pytest.approx(4 / 17.5 * 1000)
    with pytest.raises(ValueError, match="chunked prefill"):
        dry_run.simulate(None, {1: 3.0}, 2, 1, lengths=[(6, 2)], chunk_tokens=0, chunk_ms=float)
    with pytest.raises(ValueError, match="lengths"):
        dry_run.simulate(1.0, {1: 3.0}, 2, 1, lengths=[(6, 0)])


def test_serving_a_length_distribution_and_chunked_prefill():
    config = tiny_llama()
    same = dry_run.serve(config, "trn2", input_tokens=16, output_tokens=4, concurrency=(2,), requests_per_client=2)
    given = dry_run.serve(config, "trn2", concurrency=(2,), requests_per_client=2, lengths=[(16, 4)])
    assert given == same  # one length given is the default's request
    mixed, = dry_run.serve(config, "trn2", concurrency=(2,), requests_per_client=2, lengths=[(16, 4), (4, 8)])
    assert mixed.requests == 4 and mixed.ttft_ms["p50"] < same[0].ttft_ms["p50"]  # shorter prompts prefill faster
    chunked, = dry_run.serve(config, "trn2", input_tokens=16, output_tokens=4, concurrency=(2,), requests_per_client=2,
                             chunked_prefill=8)
    assert chunked.requests == 4 and chunked.tokens_per_s > 0 and chunked.ttft_ms["p50"] > 0
    with pytest.raises(ValueError, match="max_model_len"):
        dry_run.serve(config, lengths=[(16, 4)], max_model_len=8)


def test_a_vocabulary_shard_keeps_the_padding_index_inside_it():
    """gpt-oss-20b's pad_token_id 199999 at TP 4 (vocabulary 201088 / 4 per shard): the shard's
    embedding was built with a padding index beyond its rows (issue 41 §2)."""
    config = tiny_llama()
    config.pad_token_id = 250
    shard = dry_run.shard_config(config, 4)
    assert shard.vocab_size == 64 and shard.pad_token_id == 250 % 64
    dry_run.build(config, tp=4)  # was: AssertionError: Padding_idx must be within num_embeddings


# ---- mixture of experts (issue 41 §2, Note [Experts as a MoE kernel runs them]) -------------

def _moe_configs():
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256)
    return {
        "mixtral": transformers.MixtralConfig(**common, head_dim=16, num_local_experts=8, num_experts_per_tok=2),
        "qwen3_moe": transformers.Qwen3MoeConfig(**common, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                                 moe_intermediate_size=32, decoder_sparse_step=1),
        "olmoe": transformers.OlmoeConfig(**common, num_experts=8, num_experts_per_tok=2),
        "gpt_oss": transformers.GptOssConfig(**common, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
                                             layer_types=["sliding_attention", "full_attention"], pad_token_id=250),
        "deepseek_v3": transformers.DeepseekV3Config(**common, n_routed_experts=8, num_experts_per_tok=2,
                                                     moe_intermediate_size=32, first_k_dense_replace=1, n_group=1,
                                                     topk_group=1, q_lora_rank=32, kv_lora_rank=16,
                                                     qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
        "dbrx": transformers.DbrxConfig(d_model=64, n_heads=4, n_layers=2, vocab_size=256,
                                        ffn_config={"ffn_hidden_size": 128, "moe_num_experts": 8, "moe_top_k": 2},
                                        attn_config={"kv_n_heads": 2}),
    }


# what each tiny MoE config does at TP 1 and 2: answers, or the reason it is refused
MOE_SWEEP = {("olmoe", 2): "could not trace this olmoe model compiled",  # q/k norms span every head
             ("dbrx", 1): "shards Llama-style decoder configs", ("dbrx", 2): "shards Llama-style decoder configs"}


@pytest.mark.parametrize("architecture", ["mixtral", "qwen3_moe", "olmoe", "gpt_oss", "deepseek_v3", "dbrx"])
def test_moe_architectures_predict_or_refuse_with_the_reason(architecture):
    config = _moe_configs()[architecture]
    for tp in (1, 2):
        refused = MOE_SWEEP.get((architecture, tp))
        if refused:
            with pytest.raises((ValueError, RuntimeError), match=refused):
                dry_run.predict(config, "trn2", tp=tp, input_tokens=16, output_tokens=3)
        else:
            p = dry_run.predict(config, "trn2", tp=tp, input_tokens=16, output_tokens=3)
            assert p.ttft_ms > 0 and p.per_token_ms > 0 and 0 < p.mbu_decode < 1, (architecture, tp, p)


def test_a_decode_step_reads_the_experts_one_token_touches():
    def mixtral(experts):
        return transformers.MixtralConfig(hidden_size=64, intermediate_size=512, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=256, head_dim=16,
                                          num_local_experts=experts, num_experts_per_tok=2)
    few, many = (dry_run.predict(mixtral(e), "trn2", tp=1, input_tokens=64, output_tokens=3) for e in (2, 32))
    assert many.per_token_ms == pytest.approx(few.per_token_ms, rel=1e-6)  # two experts read either way
    assert many.ttft_ms > few.ttft_ms  # a 64-token prefill touches nearly all 32
    assert dry_run.expected_experts(32, 4, 1) == 4 and dry_run.expected_experts(32, 4, 128) == 32
    assert dry_run.expected_experts(32, 4, 8) == 22  # 32 * (1 - (28/32)^8) = 21.3, rounded up
    model = dry_run.build(mixtral(8))
    assert dry_run._routed_experts_as_a_kernel(model) == 2  # one experts module per layer


def test_an_open_loop_at_a_request_rate_queues_beyond_the_batch():
    # requests every 100 ms, each 20 ms of prefill and 4 steps of 10 ms: never two at once
    slow = dry_run.simulate_rate(20.0, {1: 10.0}, output_tokens=5, rate_per_s=10, requests=3, max_num_seqs=1)
    assert (slow.requests, slow.ttft_ms["p95"], slow.latency_ms["p95"], slow.rate_per_s) == (3, 20.0, 60.0, 10)
    assert slow.tokens_per_s == pytest.approx(15 / 260 * 1000)  # the last answer at 200 + 60 ms
    # all at once with one sequence at a time: the third waits for both before it
    burst = dry_run.simulate_rate(20.0, {1: 10.0}, output_tokens=5, rate_per_s=1e9, requests=3, max_num_seqs=1)
    assert burst.latency_ms == {"p50": pytest.approx(120.0), "p95": pytest.approx(174.0)}  # 60, 120, 180 ms
    assert burst.ttft_ms["p50"] == pytest.approx(80.0)  # 20, 80, 140 ms


# review of issue 41's serving and MoE work: each finding stays fixed
@pytest.mark.parametrize("call", [
    lambda: dry_run.simulate_rate(20.0, {1: 10.0}, 5, float("nan"), 3, 1),  # was: never returned
    lambda: dry_run.simulate_rate(20.0, {1: 10.0}, 5, 10, 2, 0),
    lambda: dry_run.simulate(20.0, {1: 10.0}, 5, 1, requests_per_client=0),
    lambda: dry_run.serve(tiny_llama(), concurrency=(1,), rates=(float("nan"),)),
    lambda: dry_run.serve(tiny_llama(), concurrency=(1,), requests_per_client=0),
])
def test_a_load_the_scheduler_cannot_serve_is_refused(call):
    with pytest.raises(ValueError):
        call()


def test_shared_experts_are_sharded_with_the_rest():
    """Qwen2-MoE's shared expert (shared_expert_intermediate_size) stayed whole on every rank."""
    config = transformers.Qwen2MoeConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=256, num_experts=8,
                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=96)
    shard = dry_run.shard_config(config, 2)
    assert (shard.moe_intermediate_size, shard.shared_expert_intermediate_size) == (16, 48)
    config.shared_expert_intermediate_size = 90  # not divisible by 4
    with pytest.raises(ValueError, match="shared_expert_intermediate_size 90"):
        dry_run.shard_config(config, 4)


# ---- prefill as a serving stack's kernel runs it (issue 41 §3) ------------------------------------

@pytest.mark.parametrize("length, visited", [(1, 1), (128, 128), (256, 192), (384, 256), (12800, 6464)])
def test_a_causal_kernel_visits_the_key_tiles_on_and_below_the_diagonal(length, visited):
    """n tiles of 128 per side: n (n + 1) / 2 of n^2 tiles visited (hand-computed: 256 positions,
    2 tiles: 3 of 4; 12,800: 100 tiles, 5,050 of 10,000)."""
    assert dry_run.causal_keys_visited(length) == visited


def test_a_stacks_causal_prefill_costs_the_visited_tiles_only():
    """The stack's prefill attention of 512 positions (4 tiles: 10 of 16 visited) costs as an
    attention over 320 keys: less than the whole score matrix, the same as 320 keys by hand."""
    config = tiny_llama()
    stack = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 512, 600, gqa_attention=True)[0]
    with unittest.mock.patch.object(dry_run, "causal_keys_visited", lambda length: length):
        whole = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 512, 600, gqa_attention=True)[0]
    with unittest.mock.patch.object(dry_run, "causal_keys_visited", lambda length: 320):
        by_hand = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 512, 600, gqa_attention=True)[0]
    assert stack == by_hand < whole


def test_sequence_parallelism_divides_the_residual_streams_steps_only():
    """Hand-made program over a [1, 8, 64] residual stream (tokens 8, hidden 64): the steps that
    write it (a norm pass with a value list, a residual add) or reduce it (the norm's mean) are
    split across the ranks; the matmul, the MLP's [1, 8, 96] activation, a flattened [8, 64]
    value (a MoE kernel's) and a step that only reads the stream are not."""
    from torch_neuron_sim.compile.lowering import A_VALUE, A_VALUES
    values = [{"sizes": [1, 8, 64]}, {"sizes": [64, 96]}, {"sizes": [1, 8, 96]}, {"sizes": [1, 8, 64]}]
    nodes = [{"op": "neuron::pointwise", "args": [(A_VALUES, 0, 0.0, [0], [], "")], "outputs": [3]},
             {"op": "aten::mm", "args": [(A_VALUE, 3, 0.0, [], [], ""), (A_VALUE, 1, 0.0, [], [], "")], "outputs": [2]},
             {"op": "aten::silu", "args": [(A_VALUE, 2, 0.0, [], [], "")], "outputs": [2]},
             {"op": "aten::add.Tensor", "args": [(A_VALUE, 0, 0.0, [], [], ""), (A_VALUE, 3, 0.0, [], [], "")],
              "outputs": [0]}]
    values += [{"sizes": [1, 8, 1]}, {"sizes": [8, 64]}]
    nodes += [{"op": "aten::mean.dim", "args": [(A_VALUE, 3, 0.0, [], [], "")], "outputs": [4]},  # a norm's statistics
              {"op": "aten::add.Tensor", "args": [(A_VALUE, 5, 0.0, [], [], "")], "outputs": [5]},  # flattened: a MoE kernel's
              {"op": "aten::mul.Tensor", "args": [(A_VALUE, 0, 0.0, [], [], "")], "outputs": [2]}]  # reads it, writes no stream
    steps = [(n["op"], ns) for n, ns in zip(nodes, (400.0, 1000.0, 300.0, 200.0, 50.0, 70.0, 90.0))]
    saved = dry_run._sequence_parallel_ns({"values": values, "nodes": nodes}, steps, hidden=64, tokens=8, tp=4)
    assert saved == pytest.approx((400 + 200 + 50) * (1 - 1 / 4))


def test_nxdi_prefill_is_sequence_parallel_across_its_ranks_and_vllm_neurons_is_not():
    """serving.toml: NxD Inference's tutorials enable sequence parallelism; a TP 2 prefill costs
    less with it, a decode step and a TP 1 prefill the same; vLLM Neuron is costed without it. A
    rank whose MLP is as wide as the hidden size (tiny_llama's 128 / 2) is not split (its MLP's
    activations would look like the stream)."""
    config = tiny_llama()
    config.num_key_value_heads = config.num_attention_heads
    ambiguous = [dry_run.compiled_forward_ns(config, 2, "trn2", 2, 256, 300, gqa_attention=True, sequence_parallel=s)
                 for s in (False, True)]
    assert ambiguous[0] == ambiguous[1]
    config.intermediate_size = 256
    plain = dry_run.compiled_forward_ns(config, 2, "trn2", 2, 256, 300, gqa_attention=True)
    split = dry_run.compiled_forward_ns(config, 2, "trn2", 2, 256, 300, gqa_attention=True, sequence_parallel=True)
    assert split[0] < plain[0] and split[1] == plain[1]
    one_rank = [dry_run.compiled_forward_ns(config, 1, "trn2", 2, 256, 300, gqa_attention=True, sequence_parallel=s)
                for s in (False, True)]
    assert one_rank[0] == one_rank[1]
    assert dry_run.serving_sequence_parallel("nxdi") and not dry_run.serving_sequence_parallel("vllm-neuron")
    assert not dry_run.serving_sequence_parallel("device")


def test_explicit_prefill_buckets_choose_the_prefill_length():
    """NxD Inference's context_encoding_buckets, as a calibration row gives them."""
    config = tiny_llama()
    p = dry_run.predict(config, "trn2", input_tokens=100, output_tokens=2, serving="nxdi", max_model_len=512,
                        prefill_buckets=[64, 160, 512])
    assert p.prefill_tokens == 160
    with pytest.raises(ValueError, match="the largest must hold the prompt"):
        dry_run.predict(config, "trn2", input_tokens=100, output_tokens=2, serving="nxdi", max_model_len=512,
                        prefill_buckets=[64])


def test_a_stated_routing_skew_touches_fewer_experts_and_zero_is_uniform():
    """expected_experts with skew s: sum over experts of 1 - (1 - min(1, k p_i))^T, p_i Zipf;
    computed here independently for E 32, k 4, T 8 and s 1; skew 0 gives the uniform formula."""
    weights = [1 / (i + 1) for i in range(32)]
    by_hand = sum(1 - (1 - min(1.0, 4 * w / sum(weights))) ** 8 for w in weights)
    assert dry_run.expected_experts(32, 4, 8, skew=1.0) == math.ceil(by_hand) < dry_run.expected_experts(32, 4, 8)
    assert dry_run.expected_experts(32, 4, 8, skew=0) == 22
    assert dry_run.expected_experts(32, 4, 1, skew=3.0) == 4  # never fewer than k
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="routing_skew"):
            dry_run.expected_experts(32, 4, 8, skew=bad)


def test_a_skewed_router_makes_a_moe_verify_step_cheaper_and_the_setting_does_not_leak():
    """predict(routing_skew=...) holds for that prediction only (a context variable)."""
    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                        num_local_experts=8, num_experts_per_tok=2)
    uniform = dry_run.predict(config, "trn2", input_tokens=16, output_tokens=4, step_tokens=4)
    skewed = dry_run.predict(config, "trn2", input_tokens=16, output_tokens=4, step_tokens=4, routing_skew=2.0)
    assert skewed.per_token_ms < uniform.per_token_ms
    assert dry_run._ROUTING_SKEW.get() == 0.0
    again = dry_run.predict(config, "trn2", input_tokens=16, output_tokens=4, step_tokens=4)
    assert again.per_token_ms == uniform.per_token_ms
    with pytest.raises(ValueError, match="routing_skew"):
        dry_run.predict(config, "trn2", routing_skew=-0.5)
