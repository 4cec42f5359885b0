"""Runs PyTorch's own DTensor random tests (test/distributed/tensor/test_random_ops.py of PyTorch's
sources, which the wheel does not ship) on the neuron device, one rank of a torchrun launch:
    torchrun --nproc-per-node=4 tests/distributed/run_pytorch_dtensor_random_tests.py <test_random_ops.py> <out_dir>
(--nproc-per-node=8 with NEURON_LOGICAL_NC_CONFIG=1, 8 cores, for the 3-D mesh test)

PyTorch's harness (DTensorTestBase) spawns its own processes and accepts only its known
backends; here every rank of the torchrun launch runs each test method in the same order, in a
process group of backend "neuron" (made by the test's @with_comms, as PyTorch's harness would),
with device_type "neuron". Its GPU gates (skip_if_lt_x_gpu / skip_unless_torch_gpu count CUDA,
XPU and HPU devices only) count the neuron cores instead; the compile tests' torch.cuda.get_rng_state
reads the neuron generator. What does not apply to a device of
this kind is skipped with its reason (NOT_APPLICABLE below); what fails for a reason in PyTorch
is reported with it (KNOWN_FAILURES). Rank 0 writes summary.json: passed, failed (with the
error), known failures and skipped tests (with the reasons)."""
import importlib.util
import json
import os
import sys
import traceback
import unittest
from functools import wraps

import torch
import torch.distributed as dist
import torch_neuronx  # noqa: F401

# Tests that cannot apply to this device, with the reason (none: a test whose world size is not
# the launch's is skipped saying so; DistTensorRandomOpsTest3D runs in a launch of 8 ranks).
NOT_APPLICABLE: dict[str, str] = {}
# Failures whose cause is in PyTorch, not in the device: (class, text of the error, reason).
# Reported with the reason; any other failure fails the run.
KNOWN_FAILURES = [
    ("DistTensorRandomOpCompileTest", "Please convert all Tensors to FakeTensors first",
     "DTensor 2.13 traces random ops with its run_dtensor_rng_op only for device type 'cuda' "
     "(torch/distributed/tensor/_dispatch.py); any other device takes the eager RNG region while Dynamo traces, "
     "which moves the generator's real state tensor under FakeTensorMode (the tests then also compile with Inductor)"),
    ("WithLocalTensor", "Torch not compiled with CUDA enabled",
     "LocalTensor's RNG tracker (torch/distributed/_local_tensor) takes torch.cuda.current_device() for every "
     "device type but 'cpu'"),
]
# Classes made by create_local_tensor_test_class run every rank in one process (LocalTensor) on
# PyTorch's "fake" process group, which is registered for cpu, cuda, hpu and xpu only: neuron is
# added to it here. They run on rank 0 alone, outside the process group.


def neuron_gate(count, **_):
    """skip_if_lt_x_gpu for the neuron device: the test runs when there are `count` cores."""
    def decorator(function):
        @wraps(function)
        def wrapper(*args, **kwargs):
            if torch.accelerator.device_count() < count:
                raise unittest.SkipTest(f"needs {count} neuron cores")
            return function(*args, **kwargs)
        return wrapper
    return decorator


def load(path):
    import torch.testing._internal.common_distributed as common_distributed
    common_distributed.skip_if_lt_x_gpu = neuron_gate
    import torch.testing._internal.distributed._tensor.common_dtensor as common_dtensor
    common_dtensor.skip_if_lt_x_gpu = neuron_gate
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 (registers the backend)
    if "neuron" not in dist.Backend.backend_capability["fake"]:
        dist.Backend.backend_capability["fake"].append("neuron")
    spec = importlib.util.spec_from_file_location("pytorch_test_random_ops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, common_dtensor


def main(path, out_dir):
    module, common_dtensor = load(path)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.neuron.device_count())
    import torch.distributed.tensor._random as dtensor_random

    def init_pg(self, eager_init=False, backend=None):
        dist.init_process_group("neuron")

    def destroy_pg(self, device_id=None):
        dist.barrier()
        dist.destroy_process_group()

    results = {"passed": [], "failed": {}, "skipped": {}, "known_failures": {}}
    classes = [(name, cls) for name, cls in vars(module).items()
               if isinstance(cls, type) and issubclass(cls, unittest.TestCase) and cls.__module__ == module.__name__]
    for class_name, cls in classes:
        loader = unittest.TestLoader()
        for method in loader.getTestCaseNames(cls):
            label = f"{class_name}.{method}"
            if class_name in NOT_APPLICABLE:
                results["skipped"][label] = NOT_APPLICABLE[class_name]
                continue
            test = cls(method)
            local_tensor = bool(getattr(test, "is_local_tensor_enabled", False))
            if local_tensor and rank != 0:
                continue
            if not local_tensor:
                if test.world_size != world:
                    results["skipped"][label] = f"needs {test.world_size} ranks, this launch has {world}"
                    continue
                test.rank = rank
                test.init_pg = init_pg.__get__(test)
                test.destroy_pg = destroy_pg.__get__(test)
            dtensor_random._rng_tracker = None  # a fresh process's state, as PyTorch's harness gives each test
            torch.manual_seed(0)  # the harness seeds every rank alike
            # The compile tests read the state with torch.cuda.get_rng_state: the neuron one here.
            cuda_get_rng_state = torch.cuda.get_rng_state
            torch.cuda.get_rng_state = torch.neuron.get_rng_state
            try:
                if local_tensor:
                    test.setUp()
                getattr(test, method)()
                if local_tensor:
                    test.tearDown()
                results["passed"].append(label)
            except unittest.SkipTest as skip:
                results["skipped"][label] = str(skip)
            except SystemExit as exit_:  # PyTorch's skip decorators exit with a skip code
                results["skipped"][label] = f"skipped by PyTorch's harness (exit {exit_.code})"
            except Exception:
                error = traceback.format_exc()
                known = [reason for name, text, reason in KNOWN_FAILURES if name in class_name and text in error]
                if known:
                    results["known_failures"][label] = known[0]
                else:
                    results["failed"][label] = error[-3000:]
            finally:
                torch.cuda.get_rng_state = cuda_get_rng_state
            if dist.is_initialized():
                dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out_dir, "summary.json"), "w") as report:
            json.dump(results, report, indent=1)
    print(json.dumps({"rank": rank, "passed": len(results["passed"]), "failed": sorted(results["failed"]),
                      "known_failures": len(results["known_failures"]), "skipped": results["skipped"]}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
