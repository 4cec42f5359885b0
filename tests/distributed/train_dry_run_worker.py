"""One rank of tests/distributed/test_train_dry_run_fsdp2.py (under torchrun, c10d backend "neuron"):
the training step the dry run predicts (torch_neuron_sim/train_dry_run.py, Note [A training step,
dry]), run on the device for real: a Llama model of the config given, FSDP2 per decoder layer and
on the root (bf16 parameters, fp32 reduction), AdamW, a causal-LM loss; after a first step (the
optimizer's state made) the device clock's time of one more step is written to <out>/rank<r>.json.

    torchrun --nproc-per-node 2 train_dry_run_worker.py CONFIG_JSON OUT_DIR SEQ_LEN LOCAL_BATCH [ac]
"""
import json
import os
import sys

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401  (registers the device and the c10d backend)


def main():
    config_json, out_dir, seq_len, local_batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    checkpointing = len(sys.argv) > 5 and sys.argv[5] == "ac"
    import transformers
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.neuron.set_device(rank)
    config = transformers.LlamaConfig.from_json_file(config_json)
    config.use_cache = False
    torch.manual_seed(0)
    with torch.device("neuron"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.train()
    if checkpointing:
        model.activation_checkpointing_enable({"use_reentrant": False})
    if world > 1:
        mesh = init_device_mesh("neuron", (world,))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ids = torch.randint(0, config.vocab_size, (local_batch, seq_len), device="neuron",
                        generator=None)
    times = []
    for _ in range(2):
        dist.barrier()
        torch.neuron.synchronize()
        start = torch_neuronx.device_time()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.neuron.synchronize()
        times.append(torch_neuronx.device_time() - start)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump({"step_ms": times[-1], "first_step_ms": times[0], "loss": float(loss.detach())}, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
