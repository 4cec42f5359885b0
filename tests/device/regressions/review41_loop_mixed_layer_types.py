"""predict(loop="generate", mode="compiled") of a model with more than one attention layer type
(gpt-oss: sliding and full; Gemma 3 past its sixth layer): the stand-in keeps layer_types[:1]
only, so the static-cache generate() builds one 4D mask per token (the stand-in's type) where the
model builds one per type. (1) The noted calls then carry an attention_mask dict without
"full_attention", and the replay on the whole model raises KeyError: 'full_attention' (gpt-oss-20b
at TP 8: no prediction, a traceback from neuron-migrate predict --loop generate). (2) The
stand-in's loop costs less than the model's own loop (Note [The generate loop, dry] says the
loop's ops do not depend on the model's insides)."""
import os  # noqa: E402
import sys
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import torch  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run, generate_loop  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

failures = []
try:
    p = dry_run.predict(os.path.join(ROOT, "demo/configs/gpt-oss-20b"), "trn2", tp=8, input_tokens=4,
                        output_tokens=3, mode="compiled", loop="generate")
    print("gpt-oss-20b TP 8 compiled generate:", p.ttft_ms, p.per_token_ms)
except Exception as e:  # noqa: BLE001
    failures.append(f"gpt-oss-20b TP 8, loop='generate', compiled raised {type(e).__name__}: {e}")

config = transformers.AutoConfig.for_model("gemma3_text", **dict(CONFIGS["gemma3_text"], num_hidden_layers=6))
print("layer types:", config.layer_types)
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval().to("neuron")
stand_in = generate_loop.run_loop(config, 6, 3, True, "trn2", 2)
own = generate_loop.run_loop(config, 6, 3, True, "trn2", 2, model=model)
print(f"compiled loop ns: stand-in {stand_in.loop_ns}, the model's own {own.loop_ns}")
if stand_in.loop_ns != own.loop_ns:
    failures.append(f"Gemma 3 (6 layers, sliding and full): the stand-in's compiled loop costs {stand_in.loop_ns} ns, "
                    f"the model's own {own.loop_ns} ns")
for f in failures:
    print("FAIL", f)
assert not failures
