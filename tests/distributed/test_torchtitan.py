"""torchtitan, unchanged, trains on neuron as on the CPU (issue 26, item 3).

torchtitan 0.3.0 (requirements-torchtitan.txt; `make test-distributed` installs it into
build/torchtitan-venv, a virtual environment layered on .venv: README, torchtitan) runs its own
entry point, `torchrun -m torchtitan.train --module llama3 --config llama3_debugmodel`, through
tests/distributed/torchtitan_launch.py (which says the one torch 2.14 function it gives torch 2.13,
and how the CPU reference is made to run), with command-line overrides only: 10 steps, sequence
128, a local batch of 4, seed 26, `--debug.deterministic`, the tokenizer and dataset made by
tests/distributed/torchtitan_assets.py (the wheel does not ship the ones the config names), losses
logged to TensorBoard (read back at full precision).

Every run starts from the same weights: torchtitan's seed checkpoint (`--checkpoint.create-seed-
checkpoint`, made once on the CPU) loaded by every run (`--checkpoint.initial-load-path`). Without it
the neuron and CPU runs would start from different weights: neuron's generator is counter-based
Philox (as CUDA's and AWS's), which draws other numbers than the CPU's Mersenne Twister.

The CPU reference is the same torchtitan command with the same parallelism, on the CPU with Gloo
(torchtitan_launch.py --cpu). A neuron run passes when its per-step losses are within
TOLERANCE (absolute) of the CPU run's at every step; the largest difference of each run is written to
$TORCHTITAN_TABLE when set (the loss table of the closing note).
"""
import functools
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from test_distributed import FOUR_CORES, clean_env, free_port

pytestmark = pytest.mark.distributed_extra

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TITAN_PYTHON = os.path.join(ROOT, "build", "torchtitan-venv", "bin", "python")
LAUNCH = os.path.join(HERE, "torchtitan_launch.py")

# The issue measured 2.4e-4 (FSDP2) and 5.2e-4 (TP 2) as the largest loss difference from the CPU
# over 10 steps; 1e-3 absolute, at every step, is the bar here (the losses run from 8.1 to ~4).
TOLERANCE = 1e-3
STEPS = 10


def _titan_installed():
    if not os.path.exists(TITAN_PYTHON):
        return False
    return subprocess.run([TITAN_PYTHON, "-c", "import torchtitan.train"], capture_output=True,
                          env=clean_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})).returncode == 0


if not _titan_installed():
    pytest.skip("torchtitan is not installed: `make test-distributed` installs it into build/torchtitan-venv "
                "(requirements-torchtitan.txt)", allow_module_level=True)


def _environment(root, device, nproc):
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": os.path.join(root, "hf"),
           "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    elif nproc > 2:
        env.update(FOUR_CORES)
    return clean_env(env)


class Titan:
    """Runs torchtitan under torchrun in a folder of its own and reads its losses."""

    def __init__(self, root):
        from torchtitan_assets import make_assets

        self.root = str(root)
        self.tokenizer, self.dataset = make_assets(self.root)
        self.times = {}
        seed = self.run("seed checkpoint", "cpu", 1, ["--checkpoint.enable", "--checkpoint.create-seed-checkpoint",
                                                      "--parallelism.data-parallel-shard-degree", "1"],
                        seed_checkpoint=False, losses=False)
        self.seed_checkpoint = os.path.join(seed, "checkpoint", "step-0")
        assert os.path.isdir(self.seed_checkpoint), os.listdir(seed)

    def base_args(self, module="llama3", config="llama3_debugmodel"):
        return ["--module", module, "--config", config, "--hf-assets-path", self.tokenizer,
                "--dataloader.dataset-path", self.dataset, "--training.steps", str(STEPS),
                "--training.seq-len", "128", "--training.local-batch-size", "4", "--debug.seed", "26",
                "--debug.deterministic", "--metrics.enable-tensorboard", "--metrics.disable-color-printing"]

    def run(self, name, device, nproc, args, seed_checkpoint=True, losses=True, module="llama3",
            config="llama3_debugmodel", timeout=900, dump=None):
        """Returns the dump folder, or (dump folder, {step: loss}) with losses."""
        dump = dump or os.path.join(self.root, f"{name} on {device}".replace(" ", "_").replace("/", "-"))
        command = [TITAN_PYTHON, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   f"--master-port={free_port()}", LAUNCH, *(["--cpu"] if device == "cpu" else []),
                   *self.base_args(module, config), "--dump-folder", dump]
        if seed_checkpoint:
            command += ["--checkpoint.enable", "--checkpoint.initial-load-path", self.seed_checkpoint]
            if "--checkpoint.interval" not in args:
                command.append("--checkpoint.load-only")
        command += args
        start = time.monotonic()
        result = subprocess.run(command, env=_environment(self.root, device, nproc), capture_output=True,
                                text=True, timeout=timeout, cwd=self.root)
        self.times[(name, device)] = time.monotonic() - start
        with open(dump + ".log", "w") as log:
            log.write(f"{' '.join(command)}\n{result.stdout}\n{result.stderr}")
        assert result.returncode == 0, f"torchtitan ({name}, {device}) failed ({result.returncode}), log " \
                                       f"{dump}.log:\n{result.stdout[-2000:]}\n{result.stderr[-8000:]}"
        return (dump, read_losses(dump)) if losses else dump


def read_losses(dump):
    """The per-step global average loss torchtitan logged to TensorBoard, at full precision."""
    script = ("import glob, json, sys\n"
              "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
              "losses = {}\n"
              "for path in sorted(glob.glob(sys.argv[1] + '/tb/**/events.out.tfevents.*', recursive=True)):\n"
              "    events = EventAccumulator(path); events.Reload()\n"
              "    if 'loss_metrics/global_avg_loss' in events.Tags()['scalars']:\n"
              "        losses.update({e.step: e.value for e in events.Scalars('loss_metrics/global_avg_loss')})\n"
              "print(json.dumps(losses))\n")
    result = subprocess.run([TITAN_PYTHON, "-c", script, dump], capture_output=True, text=True,
                            env=clean_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))
    assert result.returncode == 0, result.stderr[-3000:]
    return {int(step): loss for step, loss in json.loads(result.stdout).items()}


@pytest.fixture(scope="module")
def titan(tmp_path_factory):
    titan = Titan(tmp_path_factory.mktemp("torchtitan"))
    yield titan
    table = os.environ.get("TORCHTITAN_TABLE")
    if table:
        with open(table, "a") as f:
            for (name, device), seconds in titan.times.items():
                f.write(json.dumps({"run": name, "device": device, "seconds": round(seconds, 1)}) + "\n")


@functools.lru_cache(maxsize=None)
def _cached(titan, name, device, nproc, args, module, config):
    return titan.run(name, device, nproc, list(args), module=module, config=config)


def run(titan, name, device, nproc=1, args=(), module="llama3", config="llama3_debugmodel"):
    return _cached(titan, name, device, nproc, tuple(args), module, config)[1]


def assert_close(name, losses, reference, tolerance=TOLERANCE, steps=range(1, STEPS + 1)):
    assert sorted(losses) == list(steps) and sorted(reference) >= list(steps), (losses, reference)
    differences = {step: abs(losses[step] - reference[step]) for step in steps}
    largest = max(differences.values())
    table = os.environ.get("TORCHTITAN_TABLE")
    if table:
        with open(table, "a") as f:
            f.write(json.dumps({"mode": name, "largest": largest, "losses": losses, "reference": reference}) + "\n")
    assert largest <= tolerance, f"{name}: loss differences {differences} (tolerance {tolerance})\n" \
                                 f"losses {losses}\nreference {reference}"
    # the model learns: the loss falls by at least 1 over the ten steps (8.1 -> ~4-5)
    assert losses[max(steps)] < losses[min(steps)] - 1 or min(steps) > 1, losses


# ---- llama3 debug model: eager, every parallelism torchtitan applies to it ---------------------

# torchtitan 0.3.0's default SPMD backend, "spmd_types", cannot shard with FSDP2 on torch 2.13 on any
# device (the CPU's included): torch's fully_shard(dp_mesh_dims=...) refuses the parameters torchtitan
# leaves undistributed ("When dp_mesh_dims is provided, all parameters must be DTensors on the full
# SPMD mesh ... Got plain tensor for parameter 'weight'", fsdp/_fully_shard/_fsdp_param.py
# _init_sharding_spec, from torchtitan's apply_fsdp_to_decoder, which runs with TP alone too). The
# multi-rank runs take its "partial_dtensor" backend (DTensor for the model-parallel axes only,
# torchtitan's FSDP2/TP path before spmd_types), an option of its command line.
PARTIAL_DTENSOR = ["--parallelism.spmd-backend", "partial_dtensor"]
MODES = {
    # name: (ranks, torchtitan's options)
    "single process": (1, []),
    "FSDP2, 2 ranks": (2, ["--parallelism.data-parallel-shard-degree", "2", *PARTIAL_DTENSOR]),
    "TP 2": (2, ["--parallelism.tensor-parallel-degree", "2", "--parallelism.data-parallel-shard-degree", "1",
                 *PARTIAL_DTENSOR]),
    "FSDP2 x TP, 4 ranks": (4, ["--parallelism.data-parallel-shard-degree", "2",
                                "--parallelism.tensor-parallel-degree", "2", *PARTIAL_DTENSOR]),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_llama3_matches_cpu(titan, mode):
    nproc, args = MODES[mode]
    assert_close(mode, run(titan, mode, "neuron", nproc, args), run(titan, mode, "cpu", nproc, args))
