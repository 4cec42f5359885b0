"""FSDP2 does not reshard the root module after the forward (torch: the root's parameters would be
all-gathered again at once for the backward), so the root's unsharded bf16 parameters (embedding,
final norm, LM head: 1.05B of llama-3.1-8b's 8B) stay gathered from the forward to the end of the
backward, beside the layer being gathered and the one prefetched. train_dry_run's
memory_gib["gathered"] is 2 x the largest decoder layer only: for a 32k vocabulary the root alone is
several times larger than the figure (llama-3.1-8b at dp 64: gathered 0.81 GiB, the root alone 1.96 GiB)."""
import torch  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import train_dry_run  # noqa: E402

config = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=16,
              num_key_value_heads=16, vocab_size=32000, head_dim=16)
p = train_dry_run.predict_train(transformers.LlamaConfig(**config), dp=2, seq_len=16)
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**config))
layer = sum(x.numel() for x in model.model.layers[0].parameters())
root = sum(x.numel() for x in model.parameters()) - sum(x.numel() for x in model.model.layers.parameters())
needed = (root + layer) * 2 / 2 ** 30  # bf16: the root for the whole step, at least one layer gathered with it
print(f"gathered {p.memory_gib['gathered']:.4f} GiB; root {root} + a layer {layer} parameters in bf16 = {needed:.4f} GiB")
if p.memory_gib["gathered"] < needed:
    print("FAIL the root module's unsharded parameters (kept gathered by FSDP2 through the step) are not counted")
    raise SystemExit(1)
