"""vLLM on the neuron device (python/vllm_neuron_sim) against vLLM's own CPU run of the same model
and prompts: greedy tokens equal, token for token (float32), for several architectures, with
requests joining and leaving the batch mid-flight, prefix caching on and off, tensor parallelism 2,
and the OpenAI-compatible server under concurrent and streaming requests. Each engine runs in a
child process (tests/vllm_serving/offline.py, `vllm serve`). Run by `make test-vllm` in build/vllm-venv."""
import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-vllm` runs these in build/vllm-venv")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEMO = os.path.join(ROOT, "demo", "model")
sys.path.insert(0, HERE)
from offline import MAX_TOKENS, PROMPTS  # noqa: E402

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
ENV.pop("VLLM_TARGET_DEVICE", None)


def run_offline(model, out, device, **options):
    env = dict(ENV, **({"VLLM_TARGET_DEVICE": "cpu"} if device == "cpu" else {}))
    done = subprocess.run([sys.executable, os.path.join(HERE, "offline.py"), model, str(out), json.dumps(options)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    with open(out) as handle:
        outputs = json.load(handle)
    assert {o["platform"] for o in outputs} == {"CpuPlatform" if device == "cpu" else "NeuronPlatform"}
    return outputs


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny random models of several architectures (the demo model's tokenizer)."""
    import transformers
    folder = tmp_path_factory.mktemp("models")
    common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=4096, max_position_embeddings=512, head_dim=32)
    configs = {"qwen3": transformers.Qwen3Config(**common),
               "mistral-window": transformers.MistralConfig(**common, sliding_window=8),  # prompts cross it
               "qwen3-moe": transformers.Qwen3MoeConfig(**common, moe_intermediate_size=64, num_experts=4,
                                                        num_experts_per_tok=2)}
    paths = {"llama-demo": DEMO}
    for name, config in configs.items():
        torch.manual_seed(0)
        path = str(folder / name)
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(DEMO, file), path)
        paths[name] = path
    return paths


@pytest.fixture(scope="module")
def cpu_tokens(models, tmp_path_factory):
    cache, folder = {}, tmp_path_factory.mktemp("cpu")

    def of(name):
        if name not in cache:
            cache[name] = run_offline(models[name], folder / f"{name}.json", "cpu")
        return cache[name]
    return of


@pytest.mark.parametrize("name", ["llama-demo", "qwen3", "mistral-window", "qwen3-moe"])
def test_offline_tokens_equal_vllm_cpu(name, models, cpu_tokens, tmp_path):
    neuron = run_offline(models[name], tmp_path / "neuron.json", "neuron")
    assert [len(o["tokens"]) for o in neuron] == MAX_TOKENS
    assert [o["tokens"] for o in neuron] == [o["tokens"] for o in cpu_tokens(name)]


def test_prefix_caching_off_tokens_equal(models, cpu_tokens, tmp_path):
    neuron = run_offline(models["qwen3"], tmp_path / "neuron.json", "neuron", enable_prefix_caching=False)
    assert [o["tokens"] for o in neuron] == [o["tokens"] for o in cpu_tokens("qwen3")]


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "compiled"])
def test_tensor_parallel_2_tokens_equal(models, cpu_tokens, tmp_path, eager):
    neuron = run_offline(models["qwen3"], tmp_path / "neuron.json", "neuron", tensor_parallel_size=2,
                         enforce_eager=eager)
    assert [o["tokens"] for o in neuron] == [o["tokens"] for o in cpu_tokens("qwen3")]


# ---- compiled steps (Note [Compiled steps in token buckets] in vllm_neuron_sim/model_runner.py) ----

def test_token_buckets():
    from vllm_neuron_sim.model_runner import token_buckets
    assert token_buckets(None, 256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert token_buckets([], 100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert token_buckets([64, 8, 8], 256) == [8, 64, 256]  # a step up to max_num_batched_tokens has a bucket
    # review 42 #1: a size above max_num_batched_tokens padded steps past the runner's input buffers
    assert token_buckets([512], 256) == [256]
    assert token_buckets([4, 512], 256) == [4, 256]
    with pytest.raises(ValueError, match="at least one token"):
        token_buckets([0, 4], 256)
    with pytest.raises(ValueError, match="whole number of tokens"):
        token_buckets(["cudagraph_capture_sizes"], 256)


@pytest.mark.parametrize("name", ["llama-demo", "qwen3", "mistral-window", "qwen3-moe"])
def test_compiled_steps_tokens_equal_vllm_cpu(name, models, cpu_tokens, tmp_path):
    """Without --enforce-eager the forward runs as programs, one per token bucket hit: requests
    joining and leaving the batch change no program, only the bucket a step is padded to."""
    neuron = run_offline(models[name], tmp_path / "neuron.json", "neuron", enforce_eager=False,
                         max_num_batched_tokens=256)
    assert [o["tokens"] for o in neuron] == [o["tokens"] for o in cpu_tokens(name)]
    assert 0 < neuron[0]["compiled_graphs"] <= 9  # buckets 1, 2, 4, ..., 256


def test_compile_sizes_are_the_token_buckets(models, cpu_tokens, tmp_path):
    neuron = run_offline(models["llama-demo"], tmp_path / "neuron.json", "neuron", enforce_eager=False,
                         max_num_batched_tokens=256, compilation_config={"compile_sizes": [8, 64]})
    assert [o["tokens"] for o in neuron] == [o["tokens"] for o in cpu_tokens("llama-demo")]
    assert 0 < neuron[0]["compiled_graphs"] <= 3  # 8, 64 and 256
    eager = run_offline(models["llama-demo"], tmp_path / "eager.json", "neuron")
    assert eager[0]["compiled_graphs"] == 0  # --enforce-eager compiles nothing


TIE = """
import os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], max_model_len=512, dtype="bfloat16", seed=0, kv_cache_memory_bytes=64 << 20,
          max_num_seqs=4, enable_prefix_caching=False)
llm.generate([{"prompt_token_ids": [5 + i % 50 for i in range(64)]}],
             [SamplingParams(temperature=0, max_tokens=9, ignore_eos=True)])
"""


def test_live_compiled_steps_agree_with_the_dry_run(tmp_path):
    """The live service's device clock against the dry run's compiled forward of the same model and
    batch: one request, a 64-token prompt (one prefill step in bucket 64), then 8 decode steps (bucket 1)
    over a paged cache of three 32-token blocks. The model's forward on the live clock (its programs,
    attention between them costed as their steps) agrees with the dry run's; what vLLM does around
    the model each step (inputs, logits, sampling: eager launches here) the report gives apart."""
    from torch_neuron_sim import dry_run
    import transformers
    report = tmp_path / "clock.json"
    done = subprocess.run([sys.executable, "-c", TIE, DEMO], env=dict(ENV, VLLM_NEURON_CLOCK_REPORT=str(report)),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(report.read_text())["summary"]
    assert summary["steps"] == 9
    config = transformers.AutoConfig.from_pretrained(DEMO)
    prefill_ns, decode_ns, programs = dry_run.compiled_forward_ns(config, 1, "trn2", 2, 68, 96)
    assert programs == 1
    live = summary["model_step_ms"]
    assert live["p50"] == pytest.approx(decode_ns / 1e6, rel=0.25)  # the decode steps
    assert live["p95"] == pytest.approx(prefill_ns / 1e6, rel=0.25)  # the longest step: the prefill
    # the rest of each step is vLLM's work around the model, apart in the report
    assert summary["timeline_ms"] > summary["model_ms"] > 0


def test_predicted_figures_of_the_load(models, tmp_path):
    """The device clock of each engine step: the load's predicted tokens/s, TTFT and TPOT."""
    report = tmp_path / "clock.json"
    done = subprocess.run([sys.executable, os.path.join(HERE, "offline.py"), models["qwen3"], str(tmp_path / "o.json")],
                          env=dict(ENV, VLLM_NEURON_CLOCK_REPORT=str(report)), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(report.read_text())
    summary = result["summary"]
    assert summary["predicted"] and summary["device"].startswith("trn2")
    assert summary["output_tokens"] == sum(MAX_TOKENS) and summary["requests"] == len(PROMPTS)
    assert sorted(r["output_tokens"] for r in result["requests"]) == sorted(MAX_TOKENS)
    # the timeline is the steps' device time; at most 4 requests run at once (max_num_seqs), so
    # the load takes at least as many steps as its longest request has tokens
    assert summary["steps"] >= max(MAX_TOKENS) and summary["timeline_ms"] > 0
    assert summary["tokens_per_s"] == pytest.approx(sum(MAX_TOKENS) / summary["timeline_ms"] * 1000)
    for r in result["requests"]:
        assert 0 < r["ttft_ms"] <= r["latency_ms"] <= summary["timeline_ms"]
        if r["output_tokens"] > 1:
            assert r["tpot_ms"] == pytest.approx((r["latency_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1))
    assert summary["ttft_ms"]["p50"] <= summary["ttft_ms"]["p95"]


def test_bad_input_is_refused_clearly(tmp_path):
    env = dict(ENV, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    code = ("from vllm import LLM\n"
            f"LLM(model={DEMO!r}, max_model_len=256, dtype='float32', kv_cache_memory_bytes=1 << 50)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "kv_cache_memory_bytes" in done.stderr and "does not fit on neuron:0" in done.stderr
    code = f"from vllm import LLM\nLLM(model={DEMO!r}, max_model_len=256, pipeline_parallel_size=2)\n"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "does not run pipeline parallelism" in done.stderr


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`vllm serve` of the demo model on the neuron device, as a user starts it."""
    folder = tmp_path_factory.mktemp("serve")
    template = folder / "chat.jinja"
    template.write_text(CHAT_TEMPLATE)
    port = _free_port()
    report = folder / "clock.json"
    log = open(folder / "serve.log", "w")
    vllm = os.path.join(os.path.dirname(sys.executable), "vllm")
    process = subprocess.Popen([vllm, "serve", DEMO, "--served-model-name", "demo", "--port", str(port),
                                "--max-model-len", "256", "--dtype", "float32", "--kv-cache-memory-bytes",
                                str(64 << 20), "--max-num-seqs", "8", "--chat-template", str(template)],
                               env=dict(ENV, VLLM_NEURON_CLOCK_REPORT=str(report)), stdout=log,
                               stderr=subprocess.STDOUT)
    import openai
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120)
    deadline = time.time() + 300
    while True:
        assert process.poll() is None, (folder / "serve.log").read_text()[-6000:]
        try:
            client.models.list()
            break
        except openai.APIConnectionError:
            assert time.time() < deadline, "the server did not start in 300 s:\n" + (folder / "serve.log").read_text()[-6000:]
            time.sleep(1)
    yield client, report, folder / "serve.log"
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


def test_server_concurrent_requests_equal_vllm_cpu(server, cpu_tokens):
    """Eight clients at once (requests of different lengths joining a running batch), each
    completion the text vLLM CPU gives offline for the same prompt and length."""
    client, report, log = server
    expected = [o["text"] for o in cpu_tokens("llama-demo")]

    def ask(i):
        answer = client.completions.create(model="demo", prompt=PROMPTS[i], max_tokens=MAX_TOKENS[i], temperature=0,
                                           extra_body={"ignore_eos": True})
        return answer.choices[0].text
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(ask, range(len(PROMPTS))))
    assert texts == expected
    summary = json.loads(report.read_text())["summary"]
    assert summary["predicted"] and summary["output_tokens"] >= sum(MAX_TOKENS) and summary["tokens_per_s"] > 0


def test_server_streaming(server, cpu_tokens):
    client, _, _ = server
    expected = cpu_tokens("llama-demo")[3]["text"]
    stream = client.completions.create(model="demo", prompt=PROMPTS[3], max_tokens=MAX_TOKENS[3], temperature=0,
                                       stream=True, extra_body={"ignore_eos": True})
    pieces = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert len(pieces) > 1 and "".join(pieces) == expected
    chat = dict(model="demo", messages=[{"role": "user", "content": "How do I read a file?"}], max_tokens=12,
                temperature=0)
    whole = client.chat.completions.create(**chat).choices[0].message.content
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in
                       client.chat.completions.create(**chat, stream=True) if chunk.choices)
    assert whole and streamed == whole


def test_server_keeps_serving_after_bad_requests(server):
    import openai
    client, _, _ = server
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="maximum context length|max_model_len|too long"):
        client.completions.create(model="demo", prompt="word " * 400, max_tokens=4)
    answer = client.completions.create(model="demo", prompt=PROMPTS[0], max_tokens=3, temperature=0)
    assert answer.choices[0].text


REGRESSIONS = sorted(f for f in os.listdir(os.path.join(HERE, "regressions")) if f.endswith(".py"))


@pytest.mark.parametrize("script", REGRESSIONS)
def test_review_regression(script):
    """The review's repros (tests/vllm_serving/regressions/): each exits 0 once its bug is fixed."""
    done = subprocess.run([sys.executable, os.path.join(HERE, "regressions", script)], env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


MIGRATE_WORKLOAD = """
[workload]
name = "demo-vllm"
task = "generate"
[model]
path = "{model}"
dtype = "float32"
[inputs]
prompt_lengths = [8, 24]
max_new_tokens = 8
max_seq_len = 128
[serve]
engine = "vllm"
requests = 6
concurrency = [1, 3]
[compile]
enabled = false
"""


def test_neuron_migrate_serves_the_workload_with_vllm(tmp_path):
    """[serve] engine = "vllm" (neuron_migrate/vllm_serve.py): the speed section is vLLM's service on
    neuron (host time, and predicted on the device clock) against vLLM CPU (the baseline)."""
    workload = tmp_path / "w.toml"
    workload.write_text(MIGRATE_WORKLOAD.format(model=DEMO))
    done = subprocess.run([sys.executable, "-m", "neuron_migrate", "run", str(workload), "--no-progress",
                           "--out", str(tmp_path / "report")], env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    speed = report["sections"]["speed"]
    for role in ("target", "baseline"):
        assert speed[role]["engine"] == "vllm"
        levels = speed[role]["levels"]
        assert [level["concurrency"] for level in levels] == [1, 3]
        for level in levels:
            assert level["requests"] == 6 and level["error_rate"] == 0
            assert level["tokens"] == 6 * 8 and level["tokens_per_s"] > 0
            assert 0 < level["ttft_ms"]["p50"] <= level["latency_ms"]["p50"]
    assert "predicted" not in speed["baseline"]["levels"][0]  # vLLM CPU: measured only
    one, three = (level["predicted"] for level in speed["target"]["levels"])
    assert speed["target"]["platform"] == "trn2"
    for predicted in (one, three):
        assert len(predicted["requests"]) == 6  # the timed requests only, not the warm-up's
        assert predicted["tokens_per_s"] == pytest.approx(6 * 8 / predicted["device_span_ms"] * 1000)
        assert 0 < predicted["ttft_ms"]["p50"] <= predicted["latency_ms"]["p50"]
    # three requests share each decode step: more tokens per second of device time than one at a time
    assert three["tokens_per_s"] > 2 * one["tokens_per_s"]
    assert not [f for f in report.get("findings", []) if f.get("section") == "speed"]
