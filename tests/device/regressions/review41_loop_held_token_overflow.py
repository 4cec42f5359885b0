"""The stand-in holds its token by setting its logit to finfo(bfloat16).max / 2 (1.7e38).
generate() divides the float32 logits by the temperature: below 0.5 that is inf, softmax gives
NaN, and the draw returns token 0 (argmax of NaN). A folder whose generation_config.json samples
at temperature 0.3 and whose eos token is 0 (SmolLM-style) then stops after one token and
predict(loop="generate") raises "generate() made 1 tokens, not 3", where the live generate() of
that folder runs (and with any other eos the loop samples from NaN probabilities)."""
import os  # noqa: E402
import sys
import tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

folder = tempfile.mkdtemp(prefix="cold_sampling_")
config = transformers.AutoConfig.for_model("llama", **dict(CONFIGS["llama"], bos_token_id=0, eos_token_id=0,
                                                            pad_token_id=None))
config.save_pretrained(folder)
transformers.GenerationConfig(do_sample=True, temperature=0.3, top_p=0.9, bos_token_id=0,
                              eos_token_id=0).save_pretrained(folder)
try:
    p = dry_run.predict(folder, "trn2", tp=1, input_tokens=4, output_tokens=3, mode="eager", loop="generate")
except Exception as e:  # noqa: BLE001
    raise SystemExit(f"FAIL: temperature 0.3: {type(e).__name__}: {e}")
print("ok", p.ttft_ms, p.per_token_ms)
