"""review42: the KV cache is sized without any profiling step: it takes the activations' memory too.

Bug: NeuronWorker.determine_available_memory returns
    total HBM x gpu_memory_utilization - peak allocated
and relies on `self.model_runner.warming_up_model()` to have run a profiling step before it reads the
peak. But that is CPUModelRunner.warming_up_model, which returns at once when
compilation_config.mode == CompilationMode.NONE, and NeuronPlatform.check_and_update_config always
sets mode NONE. So no forward ever runs: the "profiling peak" is the weights alone, and the whole
remaining budget goes to the KV cache. The first large batch (activations, logits, the attention
gather, MoE gathers) then needs memory beyond gpu_memory_utilization (OOM on a full core). Checked
end to end: demo model, gpu_memory_utilization=0.02 (491.5 MiB), 16 prompts x 200 tokens: device
peak while serving 521.6 MiB > the 491.5 MiB budget; with the runner's profile_run() called
instead, the peak is 491.49 MiB, within it.

Expected: the returned KV cache bytes leave room for a profiling step's activations:
available <= budget - (weights + a step's peak), as vLLM's GPU worker does (it calls
model_runner.profile_run()).

This repro runs the real NeuronWorker.determine_available_memory and the real inherited
warming_up_model on stub objects (no engine): the runner's profile_run allocates 256 MiB of
"activations" on the device.

Fix: in determine_available_memory call `self.model_runner.profile_run()` (GPUModelRunner's dummy
run at max_num_batched_tokens plus the sampler) unconditionally, then read the peak.
"""
import sys
import types

import torch
import torch_neuronx  # noqa: F401  (registers the neuron device)
from vllm.config import CompilationMode

from vllm_neuron_sim.model_runner import NeuronModelRunner
from vllm_neuron_sim.worker import NeuronWorker

DEV = torch.device("neuron", 0)
MiB = 1 << 20
ACTIVATIONS = 256 * MiB


class Runner(NeuronModelRunner):
    def __init__(self):  # no engine: only what warming_up_model / profile_run read
        self.vllm_config = types.SimpleNamespace(compilation_config=types.SimpleNamespace(mode=CompilationMode.NONE))
        self.profiled = False

    def profile_run(self):
        scratch = torch.ones(ACTIVATIONS // 4, device=DEV)  # a step's activations
        scratch.sum().item()
        del scratch
        self.profiled = True

    def _dummy_run(self, *args, **kwargs):
        self.profile_run()


class Worker(NeuronWorker):
    def __init__(self):
        self.device = DEV
        self.model_runner = Runner()
        # as NeuronPlatform.check_and_update_config leaves it
        self.compilation_config = types.SimpleNamespace(mode=CompilationMode.NONE)
        self.cache_config = types.SimpleNamespace(gpu_memory_utilization=0.05, kv_cache_memory_bytes=None)
        self.vllm_config = types.SimpleNamespace(compilation_config=self.compilation_config,
                                                 cache_config=self.cache_config)


def main():
    torch.neuron.set_device(DEV)
    weights = torch.ones(64 * MiB // 4, device=DEV)  # the model
    worker = Worker()
    available = worker.determine_available_memory()
    total = torch.neuron.get_device_properties(DEV).total_memory
    budget = int(total * worker.cache_config.gpu_memory_utilization)
    allowed = budget - weights.numel() * 4 - ACTIVATIONS
    print(f"budget {budget / MiB:.1f} MiB, weights 64 MiB, activations 256 MiB -> KV cache "
          f"{available / MiB:.1f} MiB (at most {allowed / MiB:.1f} MiB); profiling step ran: "
          f"{worker.model_runner.profiled}")
    if available > allowed:
        print("FAIL: the KV cache takes the memory a step's activations need (no profiling step ran)")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
