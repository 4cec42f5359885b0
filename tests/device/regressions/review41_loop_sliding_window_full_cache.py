"""predict(loop="generate", mode="compiled") of a sliding-window model (tiny Gemma 3, window 64)
whose cache is full at a decode step (here a 64-token prompt; any request longer than the window)
raises a Dynamo AssertionError ("Expected fake mode of e to be tx.fake_mode") from the replay: the
eager prefill replayed on meta leaves the sliding layer full, and its compiled decode step
(cache_utils: torch.tensor([-1], device=self.device), a meta device) does not trace. The live
compiled generate() of the same lengths runs, and loop='forward' predicts these lengths.
Resolved as a refusal, not fixed: Dynamo cannot trace that meta-device constant inside the replayed
decode step; predict now raises a RuntimeError that names the cause and what to use instead
(other lengths, mode='eager', loop='forward'), where it raised Dynamo's AssertionError. The eager
generate loop of the same lengths is predicted (checked below)."""
import os  # noqa: E402
import sys
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

config = transformers.AutoConfig.for_model("gemma3_text", **CONFIGS["gemma3_text"])
forward = dry_run.predict(config, "trn2", tp=1, input_tokens=64, output_tokens=2, mode="compiled")
print("loop='forward':", forward.ttft_ms, forward.per_token_ms)
try:
    dry_run.predict(config, "trn2", tp=1, input_tokens=64, output_tokens=2, mode="compiled", loop="generate")
except RuntimeError as e:
    if "loop='forward'" not in str(e) or "mode='eager'" not in str(e):
        raise SystemExit(f"FAIL: the refusal does not say what to use instead: {e}")
    print("refused:", str(e).splitlines()[0])
else:
    print("loop='generate' compiled answered")
p = dry_run.predict(config, "trn2", tp=1, input_tokens=64, output_tokens=2, mode="eager", loop="generate")
if not (p.ttft_ms > 0 and p.per_token_ms > 0):
    raise SystemExit(f"FAIL: eager generate loop {p}")
print("loop='generate' eager:", p.ttft_ms, p.per_token_ms)
