"""PP: Note [A training step, dry] says a stage is "ceil(layers / PP) decoder layers ... (the
costliest stage, every stage costed as it)", but predict_train builds the stage by truncating the
config to its FIRST ceil(layers / PP) layers (num_hidden_layers = ceil, layer_types[:ceil]).
Where layers differ by index (Qwen-MoE's mlp_only_layers / decoder_sparse_step, DeepSeek's
first_k_dense_replace, hybrid layer_types), the first stage is not the costliest: the same
4-layer model with 2 dense and 2 MoE layers, pipelined over 2 stages, is predicted with a much
smaller step and memory when the dense layers come first (the MoE stage is never costed) than when
they come last. Both pipelines have the same two stages: their figures must agree."""
import sys

import transformers
import torch_neuronx  # noqa: F401
from torch_neuron_sim import train_dry_run

D = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, vocab_size=100, head_dim=16)
figures = {}
for dense in ((0, 1), (2, 3)):
    config = transformers.Qwen3MoeConfig(**D, mlp_only_layers=list(dense))
    p = train_dry_run.predict_train(config, pp=2, microbatches=2, local_batch=2, seq_len=16, sharding="zero1")
    figures[dense] = (p.step_ms, p.memory_gib["parameters"] * 2 ** 30)
    print(f"dense layers {dense}: step {p.step_ms:.3f} ms, parameters {figures[dense][1]:.0f} B per core")
front, back = figures[(0, 1)], figures[(2, 3)]
if abs(front[1] - back[1]) > 1e-6 * back[1] or abs(front[0] - back[0]) > 1e-3 * back[0]:
    print("FAIL the pipeline's stage is the model's first layers, not its costliest stage")
    sys.exit(1)
