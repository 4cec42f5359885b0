"""PP with FSDP2 at dp > 1: the traced microbatch (forward, backward) contains FSDP2's per-layer
all-gathers in the forward AND again in the backward (reshard after forward) and its
reduce-scatters, plus their copy launches (fsdp::all_gather_copy_in, split_with_sizes_copy,
chunk_cat). _step multiplies the microbatch's launches, FSDP2's copies included, by the
(microbatches + PP - 1) slots, but adds the traced collectives (mode.collective_ns) once per step;
memory 'gathered' stays 2 layers + root (resharded after each layer). The three disagree:
- if FSDP2 reshards per microbatch (what was traced and what the memory says), its all-gathers
  and reduce-scatters happen every microbatch: the collectives must scale with the microbatches;
- if it keeps the stage gathered across microbatches (torchtitan sets reshard_after_forward=False
  with PP; one all-gather, one reduce-scatter a step), the 'gathered' memory is the whole stage
  in bf16 (plus unsharded gradients accumulated across microbatches), and the copies run once.
Here (6 layers, pp 2: a stage of 3 layers + root, dp 2) the DP collectives are the same at 2 and
4 microbatches while 'gathered' (239232 B) is less than the stage's bf16 parameters (345984 B)."""
import sys

import torch
import transformers
import torch_neuronx  # noqa: F401
from torch_neuron_sim import dry_run, train_dry_run

D = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4,
         vocab_size=100, head_dim=16)
send_ms = dry_run.collective_ns("send", 32 * 64 * 2, 2, "trn2", 2, False) / 1e6
dp_ms, gathered = {}, None
for m in (2, 4):
    p = train_dry_run.predict_train(transformers.LlamaConfig(**D), dp=2, pp=2, microbatches=m, local_batch=m, seq_len=32)
    dp_ms[m] = p.collectives_ms - (m + 2 - 1) * 2 * send_ms  # less the PP sends: FSDP2's collectives
    gathered = p.memory_gib["gathered"] * 2 ** 30
with torch.device("meta"):
    stage = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**{**D, "num_hidden_layers": 3}))
stage_bf16 = sum(q.numel() for q in stage.parameters()) * 2
print(f"FSDP2 collectives ms at 2 / 4 microbatches: {dp_ms[2]:.6f} / {dp_ms[4]:.6f}; gathered {gathered:.0f} B; "
      f"the stage in bf16 {stage_bf16} B")
per_microbatch = dp_ms[4] > dp_ms[2] * 1.5
kept_gathered = gathered >= stage_bf16
if not (per_microbatch or kept_gathered):
    print("FAIL FSDP2 x PP: collectives counted once a step, but memory (and the per-slot copies) as if "
          "resharded every microbatch")
    sys.exit(1)
