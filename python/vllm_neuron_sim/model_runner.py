"""vLLM's model runner on a `neuron` core: GPUModelRunner's batching, with the device's own
streams left out (the device queues each op asynchronously; a host read is the sync point)."""
import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner, _torch_cuda_wrapper
from vllm.v1.worker.gpu_model_runner import GPUModelRunner


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
