"""The `neuron` platform for vLLM (vllm.platforms.interface.Platform)."""
import os

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(__name__)

ATTENTION_BACKEND = "vllm_neuron_sim.attention.NeuronAttentionBackend"
WORKER = "vllm_neuron_sim.worker.NeuronWorker"
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "float32")


class NeuronPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "neuron"
    device_type: str = "neuron"
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "neuron"  # the device's own c10d backend (torch_neuronx registers it)
    device_control_env_var: str = "NEURON_RT_VISIBLE_CORES"
    # vLLM compiles small helpers (masked embedding lookups, samplers) with dynamic=True; the neuron
    # backend compiles static shapes only, so they run as Dynamo traces of eager ops
    simple_compile_backend: str = "eager"
    ray_device_key: str = ""

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def import_kernels(cls) -> None:
        from . import kernels
        kernels.define_ops()

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        # the device runs no Triton (whatever Triton the host has): vLLM's kernels around the model
        # as device ops, always
        from . import kernels
        kernels.register()

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"dtype {dtype}: the neuron platform serves bfloat16, float16 or float32")

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.neuron.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.neuron.get_device_properties(device_id).total_memory

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.neuron.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.neuron.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        # pageable host memory: the device stages a host-to-device copy at the call, so a buffer
        # vLLM fills again for the next step never races the copy still queued
        return False

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.neuron.memory_allocated(device))

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if getattr(attn_selector_config, "use_mla", False) or getattr(attn_selector_config, "use_sparse", False):
            raise NotImplementedError("the neuron platform runs multi-head (and grouped-query) attention; MLA and "
                                      "sparse attention models are not supported on it yet")
        kv_cache_dtype = getattr(attn_selector_config, "kv_cache_dtype", None) or "auto"
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r}: the neuron platform keeps the KV cache in "
                             f"{', '.join(KV_CACHE_DTYPES)}; quantized caches are not supported yet")
        if getattr(attn_selector_config, "use_mm_prefix", False) or getattr(attn_selector_config, "use_non_causal",
                                                                             False):
            raise NotImplementedError("the neuron platform's attention is causal only (no bidirectional "
                                      "multimodal prefixes, no non-causal attention) yet")
        if selected_backend is not None and getattr(selected_backend, "name", None) not in (None, "CUSTOM"):
            logger.info("the neuron platform has one attention backend (%s); ignoring %s",
                        ATTENTION_BACKEND, selected_backend)
        return ATTENTION_BACKEND

    @classmethod
    def get_punica_wrapper(cls) -> str:
        raise NotImplementedError("LoRA adapters are not supported on the neuron platform yet")

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return True

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = WORKER
        if parallel.pipeline_parallel_size > 1:
            raise ValueError("the neuron platform does not run pipeline parallelism (nor does vLLM Neuron: PP is "
                             "not supported there); use --tensor-parallel-size")
        if parallel.data_parallel_size > 1:
            raise ValueError("the neuron platform does not run data parallelism in one server; run one server per "
                             "replica (as vLLM Neuron advises: DP 'does not scale as expected')")
        if vllm_config.speculative_config is not None:
            raise ValueError("speculative decoding is not supported on the neuron platform yet; serve without "
                             "--speculative-config")
        if getattr(parallel, "enable_dbo", False):
            parallel.enable_dbo = False
        scheduler = vllm_config.scheduler_config
        scheduler.async_scheduling = False  # one step at a time: the device queue is the overlap
        compilation = vllm_config.compilation_config
        # CUDA graphs are CUDA's; vLLM's own compilation passes are Inductor's. Unless
        # --enforce-eager, the model runner compiles the model's forward itself with the neuron
        # backend, one program per token bucket (Note [Compiled steps in token buckets] in
        # model_runner.py); vLLM's own compilation stays off.
        compilation.cudagraph_capture_sizes = []
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.mode = CompilationMode.NONE
        cache = vllm_config.cache_config
        if cache is not None and cache.cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype {cache.cache_dtype!r}: the neuron platform keeps the KV cache in "
                             "float16, bfloat16 or float32 ('auto': the model's dtype); quantized caches are not "
                             "supported yet")
        if cache is not None and not cache.user_specified_block_size:
            cache.block_size = 32
        if vllm_config.lora_config is not None:
            raise ValueError("LoRA adapters are not supported on the neuron platform yet")
        model = vllm_config.model_config
        if model is not None and model.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"dtype {model.dtype}: the neuron platform serves bfloat16, float16 or float32")
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        os.environ["VLLM_DISABLE_SHARED_EXPERTS_STREAM"] = "1"
