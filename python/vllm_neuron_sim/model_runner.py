"""vLLM's model runner on a `neuron` core: GPUModelRunner's batching, with the device's own
streams left out (the device queues each op asynchronously; a host read is the sync point).

Note [Compiled steps in token buckets]
Unless --enforce-eager, the model's forward runs compiled with torch.compile(backend="neuron",
dynamic=False), as vLLM Neuron runs one NEFF per bucket: a step's token count is padded up to
the next token bucket (the padding's slots are -1, its outputs never read), so a running service
compiles at most one program per bucket, whatever its batches. The buckets are
compilation_config.compile_sizes when given, else powers of two from 1 up to
max_num_batched_tokens (and that number itself). Attention is vLLM's opaque custom op: the
compiler cuts each step's graph at it (Note [Graphs cut at opaque ops] in the compile backend),
so the attention over the paged cache, whose shapes follow the requests, runs op by op between
the programs, and the programs' shapes follow the bucket only."""
import bisect
import dataclasses
import warnings

import torch
from vllm.logger import init_logger
from vllm.v1.worker.cpu_model_runner import CPUModelRunner, _torch_cuda_wrapper
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

logger = init_logger(__name__)


def token_buckets(compile_sizes, max_num_batched_tokens: int) -> list[int]:
    """The step sizes programs are compiled for (Note [Compiled steps in token buckets])."""
    top = int(max_num_batched_tokens)
    if compile_sizes:
        if not all(isinstance(size, int) and not isinstance(size, bool) for size in compile_sizes):
            raise ValueError(f"compilation_config compile_sizes {compile_sizes}: the neuron platform takes them as "
                             "its token buckets, so each must be a whole number of tokens")
        sizes = sorted(set(compile_sizes))
        if sizes[0] < 1:
            raise ValueError(f"compile_sizes {compile_sizes}: a token bucket holds at least one token")
        beyond = [size for size in sizes if size > top]
        if beyond:
            # no step holds more than max_num_batched_tokens tokens, and the runner's input buffers hold
            # no more: a bigger bucket could never be used (vLLM drops capture sizes above it the same way)
            logger.warning("compile_sizes %s: above max_num_batched_tokens %d, dropped (a step never holds more "
                           "tokens); raise max_num_batched_tokens to use them", beyond, top)
            sizes = [size for size in sizes if size <= top]
        if not sizes or sizes[-1] < top:
            sizes.append(top)  # a step of up to max_num_batched_tokens tokens always has a bucket
        return sizes
    sizes, size = [], 1
    while size < top:
        sizes.append(size)
        size *= 2
    return sizes + [top]


class NeuronModelRunner(CPUModelRunner):
    def __init__(self, vllm_config, device: torch.device):
        if device.type != "neuron":
            raise ValueError(f"NeuronModelRunner runs on a neuron device, not {device}")
        with _torch_cuda_wrapper():  # GPUModelRunner makes CUDA streams and events for its copies
            GPUModelRunner.__init__(self, vllm_config, device)
        self.use_cuda_graph = False
        from vllm.distributed import get_tensor_model_parallel_rank
        from .clock import ServingClock
        self.clock = ServingClock(device, get_tensor_model_parallel_rank())
        # unlike CPUModelRunner, the persistent input buffers stay on the device (no _postprocess_tensors)
        self.buckets = None if self.model_config.enforce_eager else token_buckets(
            vllm_config.compilation_config.compile_sizes, self.scheduler_config.max_num_batched_tokens)
        self._compiled = None

    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        if self.buckets is None:
            return
        # one Dynamo cache entry per bucket (shapes are the only thing that changes between steps)
        limit = len(self.buckets) + 2
        if torch._dynamo.config.recompile_limit < limit:
            torch._dynamo.config.recompile_limit = limit
        if torch._dynamo.config.accumulated_recompile_limit < 8 * limit:
            torch._dynamo.config.accumulated_recompile_limit = 8 * limit
        # the backend's advice to pad a varying dimension to buckets: done here
        warnings.filterwarnings("ignore", message=r"torch\.compile\(backend='neuron'\) recompiled one function")
        self._compiled = torch.compile(self.model, backend="neuron", dynamic=False,
                                       options={"model_name": type(self.model).__name__})
        logger.info("neuron: compiled steps in %d token buckets %s", len(self.buckets), self.buckets)

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        mode, descriptor, *rest = super()._determine_batch_execution_and_padding(num_tokens, *args, **kwargs)
        if self.buckets is not None and not kwargs.get("force_eager"):
            index = bisect.bisect_left(self.buckets, descriptor.num_tokens)
            if index == len(self.buckets):
                raise ValueError(f"a step of {descriptor.num_tokens} tokens is above the largest token bucket "
                                 f"{self.buckets[-1]} (max_num_batched_tokens)")
            descriptor = dataclasses.replace(descriptor, num_tokens=self.buckets[index])
        return (mode, descriptor, *rest)

    def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None,
                       **model_kwargs):
        model = self._compiled if self._compiled is not None else self.model
        started = self.clock.read()
        output = model(input_ids=input_ids, positions=positions, intermediate_tensors=intermediate_tensors,
                       inputs_embeds=inputs_embeds, **model_kwargs)
        self.clock.model_forward(started)
        return output

    def _sync_device(self) -> None:
        torch.neuron.synchronize(self.device)

    def execute_model(self, *args, **kwargs):
        # a core is current per thread (as a CUDA device is): vLLM may step on another thread than the
        # one that made the worker, and tensors vLLM makes without an index must land on this core
        torch.neuron.set_device(self.device)
        self.clock.begin(args[0] if args else kwargs["scheduler_output"])
        output = super().execute_model(*args, **kwargs)
        if output is not None:  # nothing left to sample (else sample_tokens ends the step)
            self.clock.end(output)
        return output

    def sample_tokens(self, *args, **kwargs):
        output = super().sample_tokens(*args, **kwargs)
        self.clock.end(output)
        return output
