"""Distributed training on the neuron device with the c10d backend "neuron", under torchrun:
DDP (and its comm hooks), FSDP2, DTensor on a 2-D mesh (4 ranks), transformers' Trainer, and
`accelerate test`. Every result is compared with the same training on one device (the CPU),
or with the same collective computed locally; no result is hard-coded.

The ranks run tests/distributed/distributed_training_worker.py; each writes its checks to a JSON file
(the style of tests/distributed/test_distributed.py: one launch per scenario keeps the file's time down).
The 4-rank tests are marked `distributed4`; they, the asynchronous/Gloo-transport mode and the Gloo
run of `accelerate test` are also `distributed_extra` (`make test-distributed`), so that the
default run stays short."""
import os
import re
import subprocess
import sys

import pytest

from test_distributed import FOUR_CORES, assert_reports_pass as assert_checks, clean_env, free_port, results

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "distributed_training_worker.py")

# How the device and the backend run: the defaults (launch-blocking kernels, collectives through
# shared memory between the ranks of this host), and every op queued on the streams with every
# collective on Gloo (the transport between hosts), so the stream-ordered collectives and the
# Gloo path are trained through too.
MODES = {
    "launch-blocking": {},
    "asynchronous, Gloo transport": {"NEURON_LAUNCH_BLOCKING": "0", "NEURON_SIM_INLINE_BYTES": "0",
                                     "NEURON_SIM_SHM_COLLECTIVES": "0"},
}
EXTRA = pytest.mark.distributed_extra
MODE_PARAMS = [pytest.param(name, marks=() if name == "launch-blocking" else EXTRA) for name in MODES]


def torchrun(scenario, out_dir, nproc=2, env=None, timeout=240):
    """Runs the worker's `scenario` on `nproc` ranks under torchrun; asserts it exited 0 and
    returns each rank's report."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               f"--master-port={free_port()}", WORKER, scenario, str(out_dir)]
    result = subprocess.run(command, env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"torchrun {scenario} failed ({result.returncode}):\n{result.stdout[-3000:]}\n" \
                                   f"{result.stderr[-6000:]}"
    return [results(out_dir, rank) for rank in range(nproc)]


def assert_every_check_asserted(reports, asserted):
    unasserted = [name for name in reports[0] if not name.startswith(asserted)]
    assert not unasserted, f"checks no test asserts: {unasserted}"


# ---- DDP --------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=MODE_PARAMS)
def ddp(request, tmp_path_factory):
    return torchrun("ddp", tmp_path_factory.mktemp("ddp"), env=MODES[request.param])


def test_ddp_losses_equal_one_device(ddp):
    assert_checks(ddp, "DDP: the losses of 20 steps equal one device's")
    for rank, report in enumerate(ddp):
        assert report["device"][1] == f"{rank} cpu:gloo,neuron:neuron", report["device"]


def test_ddp_parameters_equal_one_device_and_every_rank(ddp):
    assert_checks(ddp, "DDP: the trained parameters equal one device's")


def test_ddp_fp16_and_bf16_compress_hooks(ddp):
    names = assert_checks(ddp, "DDP comm hook fp16_compress_hook", "DDP comm hook bf16_compress_hook")
    assert len(names) == 2, names


def test_ddp_powersgd_hook_one_bucket_equals_cpu(ddp):
    assert_checks(ddp, "DDP comm hook powerSGD_hook, one bucket")


def test_ddp_every_check_is_asserted(ddp):
    assert_every_check_asserted(ddp, ("device", "DDP: the losses", "DDP: the trained parameters",
                                      "DDP comm hook fp16", "DDP comm hook bf16", "DDP comm hook powerSGD_hook"))


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_ddp_powersgd_hook_several_buckets_keeps_ranks_equal(mode, tmp_path):
    """Each bucket's hook chains collectives in future callbacks; the ranks must issue them in
    one order (its own launch, with a 30 s group timeout: a mismatch may abort in Gloo or hang)."""
    reports = torchrun("ddp_powersgd_buckets", tmp_path, env=MODES[mode], timeout=150)
    assert_checks(reports, "DDP comm hook powerSGD_hook, several buckets")


# ---- FSDP2 ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=MODE_PARAMS)
def fsdp(request, tmp_path_factory):
    return torchrun("fsdp", tmp_path_factory.mktemp("fsdp"), env=MODES[request.param])


def test_fsdp2_fp32_losses_and_parameters_equal_one_device(fsdp):
    names = assert_checks(fsdp, "FSDP2 fp32")
    assert len(names) == 2, names
    assert all(report["mesh"][1] == "DeviceMesh((2,), 'neuron', stride=(1,))" for report in fsdp), fsdp[0]["mesh"]


def test_fsdp2_bf16_mixed_precision_near_one_device(fsdp):
    assert_checks(fsdp, "FSDP2 bf16 params, fp32 reduce")


def test_fsdp2_each_rank_holds_its_shard(fsdp):
    assert_checks(fsdp, "FSDP2: each rank holds its shard only")


def test_fsdp2_dcp_checkpoint_round_trip(fsdp):
    assert_checks(fsdp, "FSDP2: a DCP checkpoint")


def test_fsdp2_every_check_is_asserted(fsdp):
    assert_every_check_asserted(fsdp, ("mesh", "FSDP2 fp32", "FSDP2 bf16", "FSDP2: each rank", "FSDP2: a DCP"))


# ---- DTensor on a (dp, tp) = (2, 2) mesh: 4 ranks -----------------------------------------------

@pytest.fixture(scope="module")
def dtensor(tmp_path_factory):
    return torchrun("dtensor", tmp_path_factory.mktemp("dtensor"), nproc=4, env=FOUR_CORES)


@pytest.mark.distributed4
@EXTRA
def test_device_mesh_2d_and_sub_meshes(dtensor):
    assert_checks(dtensor, "mesh: (2, 2) neuron mesh")
    for rank, report in enumerate(dtensor):
        assert report["mesh: (2, 2) neuron mesh, sub-meshes dp and tp with their ranks and groups"][1].endswith(
            f"device neuron:{rank}")


@pytest.mark.distributed4
@EXTRA
def test_distribute_tensor_and_full_tensor(dtensor):
    assert_checks(dtensor, "distribute_tensor")


@pytest.mark.distributed4
@EXTRA
def test_redistribute_between_placements(dtensor):
    assert_checks(dtensor, "redistribute")


@pytest.mark.distributed4
@EXTRA
def test_dtensor_ops(dtensor):
    assert_checks(dtensor, "DTensor ops")


@pytest.mark.distributed4
@EXTRA
def test_parallelize_module_colwise_rowwise_mlp(dtensor):
    assert_checks(dtensor, "parallelize_module")


@pytest.mark.distributed4
@EXTRA
def test_functional_collectives_on_world_and_sub_meshes(dtensor):
    names = assert_checks(dtensor, "functional collectives")
    assert len(names) == 3, names  # world, tp, dp


@pytest.mark.distributed4
@EXTRA
def test_dtensor_every_check_is_asserted(dtensor):
    assert_every_check_asserted(dtensor, ("mesh", "distribute_tensor", "redistribute", "DTensor ops",
                                          "parallelize_module", "functional collectives"))


# ---- transformers' Trainer ----------------------------------------------------------------------

def test_hf_trainer_ddp_on_neuron(tmp_path):
    """TrainingArguments pick the device through accelerate's PartialState: under torchrun
    (LOCAL_RANK set), accelerate's is_neuron_available() makes it MULTI_NEURON with backend
    "neuron" and device neuron:<current device>; nothing neuron-specific in the arguments, and
    the script does not import torch_neuronx (`import torch` loads it: its torch.backends entry
    point)."""
    reports = torchrun("trainer", tmp_path)
    assert_checks(reports, "Trainer", "device module loaded by import torch")
    assert len(reports[0]) == 3, list(reports[0])
    for rank, report in enumerate(reports):
        assert report["Trainer: device neuron:LOCAL_RANK, distributed over the ranks with backend neuron"][1] == \
            f"neuron:{rank}, DistributedType.MULTI_NEURON, backend neuron"


# ---- accelerate test ----------------------------------------------------------------------------

ACCELERATE_CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_NEURON
num_machines: 1
num_processes: 2
machine_rank: 0
gpu_ids: all
mixed_precision: 'no'
main_training_function: main
rdzv_backend: static
same_network: true
use_cpu: false
debug: false
"""

# What accelerate's test script (accelerate/test_utils/scripts/test_script.py) prints, in
# order, up to its FP16 training check.
ACCELERATE_SECTIONS = [
    "**Initialization**",
    "Distributed environment: DistributedType.MULTI_NEURON  Backend: neuron",
    "**Test process execution**",
    "**Test split between processes as a list**",
    "**Test split between processes as a dict**",
    "**Test split between processes as a tensor**",
    "**Test split between processes evenly**",
    "**Test split between processes as a datasets.Dataset**",
    "**Test random number generator synchronization**",
    "All rng are properly synched.",
    "**DataLoader integration test**",
    "Non-shuffled dataloader passing.",
    "Shuffled dataloader passing.",
    "Non-shuffled central dataloader passing.",
    "Shuffled central dataloader passing.",
    "**Training integration test**",
    "Training yielded the same results on one CPU or distributed setup with no batch split.",
    "Training yielded the same results on one CPU or distributed setup with batch split.",
    "BF16 training check.",
    "FP16 training check.",
]
FP16_REFUSED = re.compile(r"ValueError: fp16 mixed precision requires a device in \(.*\) \(not 'neuron'\)\.")

TRANSPORTS = {"shared memory": {}, "Gloo": {"NEURON_SIM_SHM_COLLECTIVES": "0"}}


@pytest.mark.parametrize("transport", [pytest.param(name, marks=() if name == "shared memory" else EXTRA)
                                       for name in TRANSPORTS])
def test_accelerate_test_passes_every_section_up_to_its_fp16_check(transport, tmp_path):
    """`accelerate test --config_file` (2 processes, MULTI_NEURON) as installed: every section
    passes until the FP16 training check, where Accelerate 1.15 itself refuses fp16 on a
    'neuron' device (accelerator.py: fp16 needs one of its listed device types). The run fails
    there, with that error only."""
    config = tmp_path / "accelerate.yaml"
    config.write_text(ACCELERATE_CONFIG)
    bin_dir = os.path.dirname(sys.executable)  # `accelerate test` runs `accelerate-launch` from PATH
    env = clean_env(dict(TRANSPORTS[transport], PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
                         HF_HOME=str(tmp_path / "hf_home")))
    result = subprocess.run([os.path.join(bin_dir, "accelerate"), "test", "--config_file", str(config)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    tail = output[-6000:]
    assert result.returncode != 0, f"accelerate test passed: the FP16 check was expected to fail\n{tail}"
    assert "Test is a success" not in output, tail

    position = 0
    for section in ACCELERATE_SECTIONS:
        found = output.find(section, position)
        assert found >= 0, f"accelerate test did not reach (in order) {section!r}\n{tail}"
        position = found + len(section)

    errors = re.findall(r"^(?:stderr: )?\[rank(\d)\]: (\w+(?:Error|Exception)\b.*)$", output, re.MULTILINE)
    assert errors, f"no rank reported an error\n{tail}"
    other = [f"rank {rank}: {message}" for rank, message in errors if not FP16_REFUSED.match(message)]
    assert not other, "errors other than accelerate's fp16 refusal:\n" + "\n".join(other) + f"\n{tail}"
    assert {rank for rank, _ in errors} == {"0", "1"}, errors
