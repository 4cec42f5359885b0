"""predict(loop="generate") against the live clock of the same generate() where the forward gets
a boolean attention mask: a one-token prompt with a static cache (its eager prefill gets a
[1, 1, 1, L] bool mask). The live SDPA converts the bool mask to an additive one on the device
(scalar_tensor x2 and where per layer) before the fused kernel; the dry run's routed attention
(_attention_as_on_the_device) passes the bool mask to the fused op and costs none of that: 3.1%
under on tiny Llama, 1 in / 2 out (3.7% at 1 out) (the issue's bar, and the test's, is 2%). The same gap shows eager on a
sliding-window model past its window (tiny Gemma 3, 70 in / 3 out: 189.0 vs 193.1 ms)."""
import os  # noqa: E402
import sys
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import torch  # noqa: E402
import torch_neuronx  # noqa: E402
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import build  # noqa: E402

props = torch.neuron.get_device_properties(0)
model = build("llama", dtype=torch.bfloat16).to("neuron")
ids = torch.full((1, 1), 5, dtype=torch.long, device="neuron")
kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, cache_implementation="static")
with torch.no_grad():
    model.generate(**kwargs)  # compiles
    torch.neuron.synchronize()
    start = torch_neuronx.device_time()
    out = model.generate(**kwargs)
    torch.neuron.synchronize()
    live_ms = torch_neuronx.device_time() - start
assert out.shape[1] == 3
p = dry_run.predict(model.config, props.platform, tp=1, logical_nc_config=props.logical_nc_config, input_tokens=1,
                    output_tokens=2, mode="compiled", loop="generate")
predicted_ms = p.ttft_ms + p.per_token_ms
print(f"1 in / 2 out, compiled: live {live_ms:.3f} ms, predicted {predicted_ms:.3f} ms ({predicted_ms / live_ms - 1:+.1%})")
assert abs(predicted_ms / live_ms - 1) <= 0.02, "the dry run of generate() is off the live clock by more than 2%"
