"""Child of test_aee.py (asynchronous mode, set by the parent): every sample of OpInfo's
elementwise sets (unary_ufuncs, binary_ufuncs) in the dtypes each supports on the CPU, run on
neuron with Adaptive Eager Execution off, then on (Note [Adaptive Eager Execution]); each
OpInfo's samples of one dtype are issued before any is read, so they are buffered together.
Prints one JSON line: the ops compared, the groups formed, and every difference of bits."""
import json
import sys
import warnings

import torch
import torch_neuronx  # noqa: F401
from torch.testing._internal.common_methods_invocations import binary_ufuncs, unary_ufuncs
from torch_neuron_sim import _C

warnings.simplefilter("ignore")
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def bits(value):
    """The bytes of every tensor in `value` (a tensor or a tuple of them), read to the host."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous().reshape(-1)
        return (str(t.dtype), t.view(torch.uint8).tolist() if t.numel() else [])
    if isinstance(value, (tuple, list)):
        return [bits(v) for v in value]
    return repr(value)


def run(op, samples):
    """Issues every sample (nothing read), then reads them all: the bits, or the error's type."""
    outputs = []
    for sample in samples:
        try:
            outputs.append(op(sample.input, *sample.args, **sample.kwargs))
        except Exception as error:  # raised at the call: the same in both modes, compared by type
            outputs.append(type(error).__name__)
    return [bits(o) if not isinstance(o, str) else o for o in outputs]


def main():
    only = set(sys.argv[1:])
    compared, differences = 0, []
    for info in unary_ufuncs + binary_ufuncs:
        if only and info.name not in only:
            continue
        supported = info.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            try:
                samples = [s.transform(lambda t: t.to("neuron") if isinstance(t, torch.Tensor) else t)
                           for s in info.sample_inputs("cpu", dtype)]
            except Exception:
                continue  # the OpInfo cannot make CPU samples of this dtype
            if not samples:
                continue
            _C._set_concatenation(0)
            unfused = run(info.op, samples)
            _C._set_concatenation(1)
            fused = run(info.op, samples)
            _C._set_concatenation(-1)
            compared += len(samples)
            if fused != unfused:
                differences.append(f"{info.name} {dtype}")
    groups, grouped = _C.concatenation_counters()
    print(json.dumps({"samples": compared, "groups": groups, "grouped": grouped, "differences": differences}))


if __name__ == "__main__":
    main()
