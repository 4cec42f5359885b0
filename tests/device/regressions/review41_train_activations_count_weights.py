"""train_dry_run's memory_gib["activations"] is the bytes autograd saves in the forward, but the
hook counts every saved tensor, the model's weights included (a Linear saves its weight for the
backward): at one rank the fp32 weights, under FSDP2 the unsharded bf16 weights of every layer.
The weights are then counted twice (also in "parameters"), and under FSDP2 every rank is charged
the whole model in bf16 whatever dp is (llama-3.1-8b, seq_len 1: 28 GiB of "activations" at dp 1,
14 GiB at dp 64). One token's activations of the debug model are ~0.2 MB on the live device."""
import torch  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import train_dry_run  # noqa: E402

DEBUG = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=16,
             num_key_value_heads=16, vocab_size=2000, head_dim=16)
MB = 1e6

# live: bytes the forward leaves held for the backward (second step, optimizer state made)
config = transformers.LlamaConfig(**DEBUG)
config.use_cache = False
with torch.device("neuron"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
ids = torch.zeros(1, 1, dtype=torch.long, device="neuron")
model(input_ids=ids, labels=ids).loss.backward()
optimizer.step()
optimizer.zero_grad()
torch.neuron.synchronize()
before = torch.neuron.memory_allocated()
loss = model(input_ids=ids, labels=ids).loss
live = (torch.neuron.memory_allocated() - before) / MB
weights = sum(p.numel() * 4 for p in model.parameters()) / MB

failures = []
for dp in (1, 4):
    p = train_dry_run.predict_train(transformers.LlamaConfig(**DEBUG), dp=dp, seq_len=1, local_batch=1)
    predicted = p.memory_gib["activations"] * 2 ** 30 / MB
    print(f"dp {dp}: predicted activations {predicted:.2f} MB, live held by the forward {live:.2f} MB, "
          f"fp32 weights {weights:.2f} MB")
    if predicted > max(4 * live, 1.0):
        failures.append(f"dp {dp}: activations {predicted:.2f} MB for one token (live {live:.2f} MB): the saved "
                        "weights are counted as activations")
for f in failures:
    print("FAIL", f)
assert not failures
