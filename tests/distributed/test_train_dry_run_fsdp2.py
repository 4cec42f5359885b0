"""The training dry run against the live clock with FSDP2 on 2 ranks (issue 41 §4: "the dry run of a
small model agrees with the live clock of the same training step, FSDP2 on 2 ranks, within 2%"):
tests/distributed/train_dry_run_worker.py runs the step on the device under torchrun (c10d backend
"neuron"), torch_neuron_sim.train_dry_run predicts it over fake tensors and a fake process group."""
import json
import os
import subprocess
import sys

import pytest
import torch

from test_distributed import clean_env, free_port

transformers = pytest.importorskip("transformers")
from torch_neuron_sim import train_dry_run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "train_dry_run_worker.py")
# torchtitan's llama3_debugmodel sizes (dim 256, 6 layers, 16 heads, vocabulary 2000) in transformers' Llama
DEBUG_MODEL = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=16,
                   num_key_value_heads=16, vocab_size=2000, head_dim=16)


@pytest.mark.distributed_extra
@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-ac", "ac"])
def test_fsdp2_on_two_ranks_agrees_with_the_live_clock(tmp_path, checkpointing):
    config = transformers.LlamaConfig(**DEBUG_MODEL)
    config.to_json_file(tmp_path / "config.json")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}",
               WORKER, str(tmp_path / "config.json"), str(tmp_path), "128", "4"] + (["ac"] if checkpointing else [])
    run = subprocess.run(command, capture_output=True, text=True, env=clean_env(), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    live = [json.load(open(tmp_path / f"rank{r}.json"))["step_ms"] for r in (0, 1)]
    properties = torch.neuron.get_device_properties(0)
    predicted = train_dry_run.predict_train(config, properties.platform, properties.logical_nc_config, dp=2,
                                            seq_len=128, local_batch=4, activation_checkpointing=checkpointing)
    assert predicted.collectives_ms > 0
    assert predicted.step_ms == pytest.approx(live[0], rel=0.02), (predicted.step_ms, live)
