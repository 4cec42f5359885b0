"""calibration.predict_rows drops a row's context_encoding_buckets / max_context_length for its
throughput figure (dry_run.serve takes no prefill buckets): the simulator's TTFT is the stack's
rule's while the row's TTFT uses the documented buckets. Two rows that differ only in their
buckets must not give the same tokens/s when the buckets change the prefill 16x."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import torch_neuronx  # noqa
from torch_neuron_sim import calibration
base = dict(model="tiny", config=os.path.join(CONFIGS, "review41_tiny_llama"), setup="s", platform="trn2", tp=1, lnc=2,
            input_tokens=100, output_tokens=8, max_model_len=4096, serving="nxdi", ttft_ms=1.0,
            concurrency=2, throughput_tok_s=100.0, source="x")
calibration.rows = lambda: [base, dict(base, context_encoding_buckets=[2048, 4096])]
out = calibration.predict_rows()["rows"]
ttft = [r["predicted_ms"] for r in out if r["metric"] == "ttft_ms"]
tput = [r["predicted_ms"] for r in out if r["metric"].startswith("throughput")]
print("TTFT ms (rule, buckets):", ttft, " tokens/s (rule, buckets):", tput)
assert ttft[1] > ttft[0] * 2, "control: the buckets change the TTFT"
assert tput[1] < tput[0], "the throughput ignores the row's prefill buckets"
