"""calibration.predict_rows labels a mixture-of-experts row's decode and verify figures "MoE decode"
/ "MoE verify" (kept out of a dense model's band, calibration_error(DENSE_KINDS)), but its TTFT as
"prefill" and its throughput as "batch": a MoE row's TTFT or tokens/s error would set the band
neuron-migrate prints for every dense model. Every figure of a MoE row must be of a MoE kind."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import torch_neuronx  # noqa
from torch_neuron_sim import calibration
row = dict(model="tiny-moe", config=os.path.join(CONFIGS, "review41_tiny_moe"), setup="s", platform="trn2", tp=1, lnc=2,
           input_tokens=64, output_tokens=16, max_model_len=256, serving="vllm-neuron", ttft_ms=30.0,
           per_token_ms=20.0, source="x")
calibration.rows = lambda: [row]
kinds = {r["metric"]: r["kind"] for r in calibration.predict_rows()["rows"]}
print(kinds)
dense = [m for m, k in kinds.items() if k in calibration.DENSE_KINDS]
assert not dense, f"a MoE row's {dense} count among the dense checks"
