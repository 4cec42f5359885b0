"""vLLM's worker on a `neuron` core: the model, its paged KV cache and its inputs on neuron:N."""
import contextlib
import os

import torch
from vllm.logger import init_logger
from vllm.utils.mem_utils import format_gib
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment

logger = init_logger(__name__)


class NeuronWorker(CPUWorker):
    """CPUWorker's life cycle (no CUDA graphs, no sleep mode), on a device with its own memory:
    the KV cache is sized from the core's HBM as a GPU worker sizes it from the GPU's."""

    def __init__(self, vllm_config, local_rank, rank, distributed_init_method, is_driver_worker=False):
        # CPUWorker.__init__ binds host memory nodes for a CPU model; the model lives on a core here
        Worker.__init__(self, vllm_config, local_rank, rank, distributed_init_method,
                        is_driver_worker=is_driver_worker)
        self.parallel_config.disable_custom_all_reduce = True

    def _maybe_get_memory_pool_context(self, tag: str):
        if self.vllm_config.model_config.enable_sleep_mode:
            raise ValueError("sleep mode (--enable-sleep-mode) is not supported on the neuron platform")
        return contextlib.nullcontext()  # no CuMem pool: the device's own allocator

    def init_device(self):
        count = torch.neuron.device_count()
        if self.local_rank >= count:
            raise RuntimeError(f"vLLM worker rank {self.local_rank} needs neuron:{self.local_rank}, but this process "
                               f"sees {count} neuron core(s) (NEURON_RT_VISIBLE_CORES); give a smaller "
                               "--tensor-parallel-size or more cores")
        self.device = torch.device("neuron", self.local_rank)
        torch.neuron.set_device(self.device)
        from vllm.platforms import current_platform
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        # the neuron c10d backend takes a process's core from LOCAL_RANK (as torchrun sets it)
        os.environ["LOCAL_RANK"] = str(self.local_rank)
        init_worker_distributed_environment(self.vllm_config, self.rank, self.distributed_init_method,
                                            self.local_rank, current_platform.dist_backend)
        torch.neuron.set_device(self.device)
        set_random_seed(self.model_config.seed)
        from . import moe  # noqa: F401  (registers the MoE layers' device implementation, before the model is built)
        from .model_runner import NeuronModelRunner
        self.model_runner = NeuronModelRunner(self.vllm_config, self.device)

    def determine_available_memory(self) -> int:
        """Bytes for the KV cache: the core's HBM x gpu_memory_utilization, less what the weights
        and a profiling step's peak hold (or kv_cache_memory_bytes when given)."""
        torch.neuron.reset_peak_memory_stats(self.device)
        # a step at the largest batch (max_num_batched_tokens) first, as vLLM's GPU worker profiles:
        # its activations' peak is memory the KV cache must leave free
        self.model_runner.profile_run()
        torch.neuron.synchronize(self.device)
        total = torch.neuron.get_device_properties(self.device).total_memory
        budget = int(total * self.cache_config.gpu_memory_utilization)
        peak = torch.neuron.max_memory_allocated(self.device)
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit is not None:
            if explicit > total - torch.neuron.memory_allocated(self.device):
                raise ValueError(f"kv_cache_memory_bytes {format_gib(explicit)} GiB does not fit on "
                                 f"{self.device}: {format_gib(total)} GiB of HBM, "
                                 f"{format_gib(torch.neuron.memory_allocated(self.device))} GiB in use; give less")
            return explicit
        available = budget - peak
        if available <= 0:
            raise ValueError(f"no room for a KV cache on {self.device}: the model and a profiling step take "
                             f"{format_gib(peak)} GiB of the {format_gib(budget)} GiB that gpu_memory_utilization "
                             f"{self.cache_config.gpu_memory_utilization} allows ({format_gib(total)} GiB of HBM); "
                             "raise --gpu-memory-utilization, shorten --max-model-len or use more cores (TP)")
        logger.info("KV cache on %s: %s GiB (%s GiB HBM x %s, %s GiB at the profiling peak)", self.device,
                    format_gib(available), format_gib(total), self.cache_config.gpu_memory_utilization,
                    format_gib(peak))
        return available
