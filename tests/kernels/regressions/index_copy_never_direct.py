"""Finding 7. The eager index_copy_ hot kernel (Hot.cpp index_copy_inplace) takes its direct
kernel only when `!compute_64bit_as_32bit()`, i.e. only with NEURON_SIM_NATIVE_64BIT=1. The
narrowing is on by default, so in the default configuration the "hot kernel" never runs its
direct kernel: every KV-cache update takes the boxed generic path. index_copy_ is an exact op
(Dtype64.cpp is_exact_op: never narrowed), like cat / index_select / fill_, whose hot kernels
take the direct path in any dtype.

Run: python tests/kernels/regressions/THIS_FILE"""
import sys
import time
import warnings

import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

warnings.filterwarnings("ignore")

cache = torch.zeros(1, 8, 64, 16, device="neuron")
values = torch.randn(1, 8, 1, 16, device="neuron")
position = torch.tensor([3], device="neuron")


def paths_and_time():
    cache.index_copy_(2, position, values)
    _C._count_launches(True)
    cache.index_copy_(2, position, values)
    counts = _C._launch_counts()
    _C._count_launches(False)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(2000):
            cache.index_copy_(2, position, values)
        best = min(best, (time.perf_counter() - start) / 2000)
    return {k: v for k, v in counts.items() if v}, best * 1e6


print("narrowing (default):", _C.computes_64bit_as_32bit())
default_paths, default_us = paths_and_time()
print(f"default:               launch paths {default_paths}, {default_us:.2f} us per call")
_C._set_computes_64bit_as_32bit(False)
native_paths, native_us = paths_and_time()
print(f"NEURON_SIM_NATIVE_64BIT: launch paths {native_paths}, {native_us:.2f} us per call")
if default_paths.get("direct", 0) == 0:
    print("BUG: in the default configuration eager index_copy_ (float32 operands, launch-blocking) never takes "
          "its direct kernel")
    sys.exit(1)
print("ok")
