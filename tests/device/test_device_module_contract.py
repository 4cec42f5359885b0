"""The device-module contract (issue 39): every attribute PyTorch's own code reads from a device
module generically (torch.get_device_module, getattr(torch, device.type), DeviceMesh's and FSDP's
device handles, ...) is answered by torch.neuron as torch.cuda answers it, or differs for a reason
written here and in docs/device-module-contract.md.

- test_the_survey_is_the_contract: the static survey of the installed torch
  (device_module_survey.py) finds exactly the attributes CONTRACT lists. A torch upgrade that
  reads a new attribute (or no longer reads one) fails here, naming where it is read.
- test_each_read_is_answered: each attribute's check runs on the device.
- test_reads_seen_at_run_time_are_surveyed: the reads PyTorch makes while it runs the features
  (device_module_reads_worker.py: checkpointing, fork_rng, autocast, torch.load, the pin-memory
  thread, the profiler, torch.compile, DDP, FSDP2, DTensor, DCP) are all in the survey.
- the start-up and fork rules of `_initialized` / `is_initialized()` / `_is_in_bad_fork()`, in
  fresh processes."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import ROOT, run_python
from device_module_survey import survey, torch_root

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(ROOT, "docs", "device-module-contract.md")


# ---- the checks, one per attribute ---------------------------------------------------------------

def _initialized():
    torch.ones(1, device="neuron")
    assert torch.neuron._initialized is True and torch.neuron.is_initialized() is True


def _is_in_bad_fork():
    assert torch.neuron._is_in_bad_fork() is False  # the fork rule: test_fork_rules below


def _get_generator():
    generator = torch.neuron._get_generator(torch.device("neuron:0"))
    assert isinstance(generator, torch.Generator) and generator.device == torch.device("neuron:0")
    state = torch.neuron.get_rng_state(0)
    assert torch.equal(generator.get_state(), state)
    torch.neuron.manual_seed_all(5)
    assert generator.initial_seed() == 5  # the device's default generator itself
    current = torch.neuron._get_generator(torch.device("neuron"))
    assert current.device == torch.device("neuron", torch.neuron.current_device())


def _default_generators():
    generators = torch.neuron.default_generators
    assert isinstance(generators, tuple) and len(generators) == torch.neuron.device_count()
    assert [g.device for g in generators] == [torch.device("neuron", i) for i in range(len(generators))]
    generators[0].manual_seed(11)
    assert torch.neuron.initial_seed() == 11 or torch.neuron.current_device() != 0


def _utils_get_device_index():
    index = torch.neuron._utils._get_device_index
    assert index("neuron:1", True) == 1 and index(torch.device("neuron", 0)) == 0 and index(1) == 1
    assert index("neuron", True) == torch.neuron.current_device()
    assert index("cpu", allow_cpu=True) == -1
    with pytest.raises(ValueError, match="Expected a neuron device"):
        index("cpu")
    with pytest.raises(ValueError, match="specified index"):
        index("neuron")


def _utils(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.arange(3.0, device="neuron:1"), path)
    for location in ("neuron:1", "neuron:0"):  # torch.load reads module._utils._get_device_index
        loaded = torch.load(path, map_location=location)
        assert loaded.device == torch.device(location) and loaded.cpu().tolist() == [0.0, 1.0, 2.0]


def _current_device():
    assert torch.neuron.current_device() == torch._utils._get_current_device_index()


def _set_device():
    previous = torch.neuron.current_device()
    try:
        torch.neuron.set_device(1)
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device == torch.device("neuron:1")
    finally:
        torch.neuron.set_device(previous)


def _device():
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.get_device_module("neuron").get_rng_state().shape == (16,)
    with torch.neuron.device(torch.device("neuron:0")):
        assert torch.neuron.current_device() == 0


def _device_count():
    assert torch.neuron.device_count() == len(torch._utils._get_all_device_indices()) >= 2


def _is_available():
    assert torch.neuron.is_available() and torch._utils._get_available_device_type() == "neuron"


def _is_initialized():
    _initialized()


def _get_device_name():
    assert torch.neuron.get_device_name() == f"neuron:{torch.neuron.current_device()}"


def _get_device_properties():
    properties = torch._utils._get_devices_properties([0])[0]
    assert properties.name in ("trn1", "trn2", "trn3") and properties.total_memory > 0


def _get_amp_supported_dtype():
    assert torch.bfloat16 in torch.neuron.get_amp_supported_dtype()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert torch.mm(torch.ones(2, 2, device="neuron"), torch.ones(2, 2, device="neuron")).dtype == torch.bfloat16


def _rng_states():
    state = torch.neuron.get_rng_state(1)
    a = torch.rand(8, device="neuron:1")
    torch.neuron.set_rng_state(state, 1)
    assert torch.equal(a.cpu(), torch.rand(8, device="neuron:1").cpu())
    assert torch.neuron.get_rng_state(torch.device("neuron:1")).shape == (16,)


def _manual_seed_all():
    torch.manual_seed(3)  # reaches torch.neuron.manual_seed_all through _seed_custom_device
    assert all(torch.neuron.default_generators[i].initial_seed() == 3 for i in range(torch.neuron.device_count()))


def _streams_and_events():
    # what FSDP2 does with its device handle: priority streams, events, waits
    side = torch.neuron.Stream(priority=-1)
    x = torch.ones(1024, device="neuron")
    with torch.neuron.stream(side):
        side.wait_stream(torch.neuron.current_stream())
        y = x * 2
        done = torch.neuron.Event()
        done.record()
    torch.neuron.current_stream().wait_event(done)
    torch.neuron.synchronize()
    assert y.sum().item() == 2048


def _memory():
    torch.neuron.empty_cache()
    x = torch.empty(1 << 20, device="neuron")
    assert torch.neuron.memory_allocated() >= x.nbytes and torch.neuron.memory_reserved() >= x.nbytes
    stats = torch.neuron.memory_stats()
    assert stats["active_bytes.all.current"] >= x.nbytes and "num_alloc_retries" in stats
    assert "Allocated memory" in torch.neuron.memory_summary()


def _module_name():
    # Dynamo names the module's source from it: `module.__name__.rsplit(".")[-1]`
    assert torch.neuron.__name__.rsplit(".", maxsplit=1)[-1] == "neuron"


def _differs_sparse():
    # legacy typed sparse classes (torch.cuda.sparse.FloatTensor): none, as torch.xpu has none; the
    # device holds dense tensors only, and moving a sparse one says so
    assert not hasattr(torch.neuron, "sparse")
    s = torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,), check_invariants=True)
    with pytest.raises(NotImplementedError, match=r"dense strided tensors only.*to_dense"):
        s.neuron()


def _differs_rng_ctx():
    # read only for device type "hpu" (DTensor's _random.py): the Philox context is HPU's
    assert not hasattr(torch.neuron, "set_rng_ctx") and not hasattr(torch.neuron, "unset_rng_ctx")


def _differs_inductor_codegen():
    # Inductor's code generators for a PrivateUse1 backend: TorchNeuron compiles with its own
    # backend, not Inductor; torch.compile(model) of neuron inputs is routed to "neuron"
    from torch.utils.backend_registration import _get_custom_mod_func
    for name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen"):
        with pytest.raises(RuntimeError, match=name):
            _get_custom_mod_func(name)
    compiled = torch.compile(lambda x: x * 2)
    assert compiled(torch.ones(2, device="neuron")).cpu().tolist() == [2.0, 2.0]


# attribute -> (check, "same" or the reason it differs); docs/device-module-contract.md has a row each
CONTRACT = {
    "_initialized": (_initialized, "same"),
    "is_initialized": (_is_initialized, "same"),
    "_is_in_bad_fork": (_is_in_bad_fork, "same"),
    "_get_generator": (_get_generator, "same"),
    "default_generators": (_default_generators, "same"),
    "_utils": (_utils, "same"),
    "_utils._get_device_index": (_utils_get_device_index, "same"),
    "current_device": (_current_device, "same"),
    "set_device": (_set_device, "same"),
    "device": (_device, "same"),
    "device_count": (_device_count, "same"),
    "is_available": (_is_available, "same"),
    "get_device_name": (_get_device_name, "same"),
    "get_device_properties": (_get_device_properties, "same"),
    "get_amp_supported_dtype": (_get_amp_supported_dtype, "same"),
    "get_rng_state": (_rng_states, "same"),
    "set_rng_state": (_rng_states, "same"),
    "manual_seed_all": (_manual_seed_all, "same"),
    "Stream": (_streams_and_events, "same"),
    "Event": (_streams_and_events, "same"),
    "stream": (_streams_and_events, "same"),
    "current_stream": (_streams_and_events, "same"),
    "synchronize": (_streams_and_events, "same"),
    "empty_cache": (_memory, "same"),
    "memory_allocated": (_memory, "same"),
    "memory_reserved": (_memory, "same"),
    "memory_stats": (_memory, "same"),
    "memory_summary": (_memory, "same"),
    "__name__": (_module_name, "same"),
    "sparse": (_differs_sparse, "no legacy typed sparse tensor classes (as torch.xpu)"),
    "set_rng_ctx": (_differs_rng_ctx, "read for device type 'hpu' only"),
    "unset_rng_ctx": (_differs_rng_ctx, "read for device type 'hpu' only"),
    "Scheduling": (_differs_inductor_codegen, "TorchNeuron does not compile with Inductor"),
    "PythonWrapperCodegen": (_differs_inductor_codegen, "TorchNeuron does not compile with Inductor"),
    "CppWrapperCodegen": (_differs_inductor_codegen, "TorchNeuron does not compile with Inductor"),
    "WrapperFxCodegen": (_differs_inductor_codegen, "TorchNeuron does not compile with Inductor"),
}


@pytest.fixture(scope="module")
def reads():
    return survey(torch_root())


def test_the_survey_is_the_contract(reads):
    new = {attribute: where for attribute, where in reads.items() if attribute not in CONTRACT}
    gone = sorted(set(CONTRACT) - set(reads))
    assert not new, ("torch reads attributes of a device module that torch.neuron's contract does not list; "
                     "answer each as torch.cuda does and add it to CONTRACT and docs/device-module-contract.md:\n"
                     + "\n".join(f"  {a}: {', '.join(w[:3])}" for a, w in new.items()))
    assert not gone, f"torch no longer reads these from a device module (remove them from CONTRACT): {gone}"


def test_the_survey_finds_the_known_reads(reads):
    """The survey's own check: reads of each kind it must recognise, at places known in torch 2.13."""
    expected = {
        "_initialized": "torch/utils/checkpoint.py",             # getattr(device_module, "_initialized", False)
        "manual_seed_all": "torch/random.py",                    # getattr(mod, _seed_all_name)
        "get_amp_supported_dtype": "torch/amp/autocast_mode.py",  # for func in necessary_funcs: hasattr(...)
        "_utils._get_device_index": "torch/serialization.py",    # device_module._utils._get_device_index
        "Stream": "torch/distributed/fsdp/_fully_shard/",         # self.device_handle.Stream(...)
        "set_rng_state": "torch/distributed/tensor/_random.py",  # self._device_handle.set_rng_state
        "current_device": "torch/utils/backend_registration.py",  # getattr(mod, _get_device_index)
        "device_count": "torch/_utils.py",                       # _get_device_attr(lambda m: m.device_count())
        "Scheduling": "torch/_inductor/codegen/common.py",       # _get_custom_mod_func("Scheduling")
    }
    for attribute, place in expected.items():
        assert any(w.startswith(place) for w in reads.get(attribute, [])), (attribute, reads.get(attribute))
    # not device modules: getattr(torch, dtype_name).itemsize, getattr(torch, op_name)
    assert "itemsize" not in reads


def test_the_doc_lists_the_contract():
    with open(DOC) as fh:
        rows = {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", fh.read(), re.MULTILINE)}
    assert rows == set(CONTRACT), (sorted(set(CONTRACT) - rows), sorted(rows - set(CONTRACT)))


@pytest.mark.parametrize("attribute", sorted(CONTRACT))
def test_each_read_is_answered(attribute, tmp_path):
    check, answer = CONTRACT[attribute]
    if answer == "same":
        head = attribute.split(".")[0]
        assert hasattr(torch.neuron, head), f"torch.neuron has no {head}"
    if check.__code__.co_argcount:
        check(tmp_path)
    else:
        check()


def test_reads_seen_at_run_time_are_surveyed(reads, tmp_path):
    out = tmp_path / "reads.json"
    result = subprocess.run([sys.executable, os.path.join(HERE, "device_module_reads_worker.py"), str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    with open(out) as fh:
        seen = json.load(fh)
    failed = {name: outcome for name, outcome in seen["features"].items() if outcome != "ok"}
    assert not failed, failed
    # Python's object protocol (Dynamo inspecting the module as an object) is not a device read
    runtime = {a: w for a, w in seen["reads"].items() if not (a.startswith("__") and a != "__name__")}
    missing = {a: w for a, w in runtime.items() if a not in reads}
    assert not missing, f"reads made at run time that the static survey did not find: {missing}"
    # the recording saw what the features must read (so this check can fail)
    for attribute in ("_initialized", "get_rng_state", "set_rng_state", "device", "_is_in_bad_fork",
                      "manual_seed_all", "_utils", "get_amp_supported_dtype", "Stream", "Event", "stream"):
        assert attribute in runtime, (attribute, sorted(runtime))


# ---- start-up and fork ----------------------------------------------------------------------------

def test_initialized_is_false_until_the_device_is_used():
    """As torch.cuda: counting, seeding, properties and choosing a device start nothing."""
    code = textwrap.dedent("""
        import torch, torch_neuronx
        seen = [torch.neuron._initialized]
        torch.neuron.is_available(); torch.neuron.device_count(); torch.manual_seed(0)
        torch.neuron.get_device_properties(0); torch.neuron.set_device(1); torch.neuron.get_rng_state()
        torch.neuron.empty_cache(); torch.neuron.default_generators
        seen.append(torch.neuron._initialized)
        seen.append(torch.neuron.is_initialized())
        torch.ones(1, device="neuron")
        seen.append(torch.neuron._initialized)
        seen.append(torch.neuron.is_initialized())
        print(seen)
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[False, False, False, True, True]"


def test_fork_rules():
    """A child forked after the parent only seeded and counted uses the device; a child forked after
    the parent used it is in a bad fork: torch.manual_seed skips the device there (as for CUDA),
    and using the device raises the runtime's message."""
    code = textwrap.dedent("""
        import os, torch, torch_neuronx
        torch.manual_seed(0); torch.neuron.device_count()
        def child(body):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                try:
                    text = body()
                except Exception as error:
                    text = type(error).__name__ + ": " + str(error)[:80]
                os.write(write, text.encode()); os._exit(0)
            os.close(write)
            text = os.read(read, 4096).decode(); os.waitpid(pid, 0)
            return text
        print(child(lambda: f"{torch.neuron._is_in_bad_fork()} {torch.ones(2, device='neuron').sum().item()}"))
        torch.ones(1, device="neuron")
        print(child(lambda: f"{torch.neuron._is_in_bad_fork()} {torch.neuron.is_initialized()}"))
        print(child(lambda: (torch.manual_seed(1), "seeded")[1]))
        print(child(lambda: torch.ones(2, device="neuron")))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()[-4:]
    assert lines[0] == "False 2.0"
    assert lines[1] == "True False"
    assert lines[2] == "seeded"
    assert lines[3].startswith("RuntimeError: cannot re-initialize the neuron runtime in a forked subprocess")
