"""torchtitan, unchanged, trains on neuron as on the CPU (issue 26, item 3).

torchtitan 0.3.0 (requirements-torchtitan.txt; `make test-distributed` installs it into
build/torchtitan-venv, a virtual environment layered on .venv: README, torchtitan) runs its own
entry point, `torchrun -m torchtitan.train --module llama3 --config llama3_debugmodel`, through
tests/distributed/torchtitan_launch.py (which says the one torch 2.14 function it gives torch 2.13,
and how the CPU reference is made to run), with command-line overrides only: 10 steps, sequence
128, a local batch of 4, seed 26, `--debug.deterministic`, bfloat16 autocast (float32 where ATen's
bfloat16 matmuls are scalar loops: PRECISION), the tokenizer and dataset made by
tests/distributed/torchtitan_assets.py (the wheel does not ship the ones the config names), losses
logged to TensorBoard (read back at full precision).

Every run starts from the same weights: torchtitan's seed checkpoint (`--checkpoint.create-seed-
checkpoint`, made once on the CPU) loaded by every run (`--checkpoint.initial-load-path`). Without it
the neuron and CPU runs would start from different weights: neuron's generator is counter-based
Philox (as CUDA's and AWS's), which draws other numbers than the CPU's Mersenne Twister.

The CPU reference is the same torchtitan command with the same parallelism, on the CPU with Gloo
(torchtitan_launch.py --cpu says how it is made to run there). A neuron run passes when its per-step
losses are within TOLERANCE (1e-3 absolute) of the CPU run's at every step (compiled runs also of
neuron's eager run; the MoE model: MOE_TOLERANCE, which says why); the largest differences and each
run's wall time are written to $TORCHTITAN_TABLE when it is set (JSON lines: the loss table).
What torchtitan 0.3.0 cannot run on torch 2.13 on any device (pipeline parallelism) or refuses
itself (`--compile.backend neuron` with FlexAttention) is an expected failure naming what fails where.
Its varlen attention config runs on neuron (FlashAttention's ops, which PyTorch ships for CUDA
only) and is compared with the CPU's FlexAttention run (test_varlen_attention_matches_cpu).
"""
import functools
import json
import os
import platform
import shutil
import subprocess
import time

import pytest
import torch

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


def _bfloat16_matmuls_are_scalar_loops():
    """An x86-64 CPU without AVX-512 (F, BW, VL, DQ; an AVX2 one, as an AMD EPYC Zen 3): ATen runs
    no oneDNN for bfloat16 matmuls there (mkldnn_bf16_device_check wants AVX-512 BW, VL and DQ,
    which at::cpu::is_avx512_supported checks with F) but cpublas's scalar loops, on the CPU and on
    neuron alike (the same ATen kernels)."""
    return platform.machine() in ("x86_64", "AMD64") and not torch.cpu._is_avx512_supported()


# torchtitan trains under bfloat16 autocast by default (`--training.mixed-precision-param
# bfloat16`). Where ATen's bfloat16 matmuls are scalar loops, a step of the debug model took 7.4 s
# on both devices (AMD EPYC Zen 3: 69 tokens/s against 916 on a Zen 4 with AVX-512), which put
# this file past CI's time budget; there the runs train in float32 (the same comparison of neuron
# with the CPU: 20 s a run instead of 43 in a trial of 6 steps), and the bfloat16 path is what
# CPUs with AVX-512 run. The record (TORCHTITAN_TABLE) and bench say which.
PRECISION = "float32" if _bfloat16_matmuls_are_scalar_loops() else "bfloat16"


def _titan_installed():
    if not os.path.exists(TITAN_PYTHON):
        return False
    return subprocess.run([TITAN_PYTHON, "-c", "import torchtitan.train"], capture_output=True,
                          env=clean_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})).returncode == 0




def _environment(root, device, nproc):
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": os.path.join(root, "hf"),
           "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    elif nproc > 2:
        env.update(FOUR_CORES)
    return clean_env(env)


class Run:
    def __init__(self, dump, returncode, output, seconds):
        self.dump, self.returncode, self.output, self.seconds = dump, returncode, output, seconds
        self.losses = read_losses(dump) if returncode == 0 else None


class Titan:
    """Runs torchtitan under torchrun in a folder of its own and reads its losses."""

    def __init__(self, root):
        from torchtitan_assets import make_assets

        self.root = str(root)
        self.tokenizer, self.dataset = make_assets(self.root)
        self.seeds = {}
        self.times = {}

    def seed_checkpoint(self, module, config):
        """torchtitan's seed checkpoint of the model (its initial weights), made once on the CPU."""
        if (module, config) not in self.seeds:
            run = self.run(f"seed checkpoint {config}", "cpu", 1, ["--checkpoint.enable", "--checkpoint.create-seed-checkpoint",
                           "--parallelism.data-parallel-shard-degree", "1"], module=module, config=config, seed=False)
            assert run.returncode == 0, run.output
            path = os.path.join(run.dump, "checkpoint", "step-0")
            assert os.path.isdir(path), os.listdir(run.dump)
            self.seeds[module, config] = path
        return self.seeds[module, config]

    def run(self, name, device, nproc, args, module="llama3", config="llama3_debugmodel", seed=True,
            timeout=900, dump=None, resume=False, seed_config=None):
        """Runs torchtitan: from the seed checkpoint (of `seed_config`, by default the run's own
        config), or (resume) from the checkpoint in `dump`."""
        dump = dump or os.path.join(self.root, f"{name} on {device}".replace(" ", "_").replace("/", "-"))
        command = [TITAN_PYTHON, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   f"--master-port={free_port()}", LAUNCH, *(["--cpu"] if device == "cpu" else []),
                   "--module", module, "--config", config, "--hf-assets-path", self.tokenizer,
                   "--dataloader.dataset-path", self.dataset, "--training.steps", str(STEPS),
                   "--training.seq-len", "128", "--training.local-batch-size", "4", "--debug.seed", "26",
                   "--debug.deterministic", "--training.mixed-precision-param", PRECISION, "--metrics.enable-tensorboard", "--metrics.disable-color-printing",
                   "--dump-folder", dump]
        if seed and not resume:
            command += ["--checkpoint.enable", "--checkpoint.initial-load-path",
                        self.seed_checkpoint(module, seed_config or config)]
            if "--checkpoint.interval" not in args:
                command.append("--checkpoint.load-only")
        command += args
        start = time.monotonic()
        result = subprocess.run(command, env=_environment(self.root, device, nproc), capture_output=True,
                                text=True, timeout=timeout, cwd=self.root)
        seconds = time.monotonic() - start
        self.times[name, device] = seconds
        output = f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
        with open(dump + ".log", "w") as log:
            log.write(output)
        return Run(dump, result.returncode, output, seconds)

    def losses(self, name, device, nproc, args, **kwargs):
        run = self.run(name, device, nproc, args, **kwargs)
        assert run.returncode == 0, f"torchtitan ({name}, {device}) failed ({run.returncode}), log {run.dump}.log:\n" \
                                    f"{run.output[-10000:]}"
        return run.losses


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
    # checked here, not at import: `make test` collects this file too (and deselects it)
    if not _titan_installed():
        pytest.skip("torchtitan is not installed: `make test-distributed` installs it into build/torchtitan-venv "
                    "(requirements-torchtitan.txt)")
    titan = Titan(tmp_path_factory.mktemp("torchtitan"))
    yield titan
    table = os.environ.get("TORCHTITAN_TABLE")
    if table:
        with open(table, "a") as f:
            for (name, device), seconds in titan.times.items():
                f.write(json.dumps({"run": name, "device": device, "seconds": round(seconds, 1)}) + "\n")


@functools.lru_cache(maxsize=None)
def _cached(titan, name, device, nproc, args, kwargs):
    return titan.losses(name, device, nproc, list(args), **dict(kwargs))


def run(titan, name, device, nproc=1, args=(), **kwargs):
    """The losses of a run (each run once per module of tests)."""
    return _cached(titan, name, device, nproc, tuple(args), tuple(sorted(kwargs.items())))


def assert_close(name, losses, reference, tolerance=TOLERANCE, steps=range(1, STEPS + 1)):
    assert sorted(losses) == list(steps) and sorted(reference) >= list(steps), (losses, reference)
    differences = {step: abs(losses[step] - reference[step]) for step in steps}
    largest = max(differences.values())
    table = os.environ.get("TORCHTITAN_TABLE")
    if table:
        with open(table, "a") as f:
            f.write(json.dumps({"mode": name, "precision": PRECISION, "largest": largest, "losses": losses, "reference": reference}) + "\n")
    assert largest <= tolerance, f"{name}: loss differences {differences} (tolerance {tolerance})\n" \
                                 f"losses {losses}\nreference {reference}"
    # the model learns: the loss falls by at least 1 over the ten steps (8.1 -> ~4-5)
    assert losses[max(steps)] < losses[min(steps)] - 1 or min(steps) > 1, losses


def record(row):
    table = os.environ.get("TORCHTITAN_TABLE")
    if table:
        with open(table, "a") as f:
            f.write(json.dumps(row) + "\n")


def expect_failure_on_every_device(titan, name, nproc, args, message, reason, **kwargs):
    """A feature torchtitan 0.3.0 cannot run on torch 2.13 on any device: asserts that it fails on
    neuron and on the CPU with `message`, and xfails with `reason`. When a run passes instead (a
    newer torch), its losses are compared as every other mode's."""
    runs = {device: titan.run(name, device, nproc, args, **kwargs) for device in ("neuron", "cpu")}
    if all(run.returncode == 0 for run in runs.values()):
        assert_close(name, runs["neuron"].losses, runs["cpu"].losses)
        return
    for device, run in runs.items():
        assert run.returncode != 0 and message in run.output, \
            f"{name} on {device}: expected to fail with {message!r}, log {run.dump}.log:\n{run.output[-6000:]}"
    record({"mode": name, "xfail": reason})
    pytest.xfail(reason)


# ---- llama3 debug model: every parallelism torchtitan applies to it ------------------------------

# torchtitan 0.3.0's default SPMD backend, "spmd_types", cannot shard with FSDP2 on torch 2.13 on any
# device (the CPU's included): torch's fully_shard(dp_mesh_dims=...) refuses the parameters torchtitan
# leaves undistributed ("When dp_mesh_dims is provided, all parameters must be DTensors on the full
# SPMD mesh ... Got plain tensor for parameter 'weight'", fsdp/_fully_shard/_fsdp_param.py
# _init_sharding_spec, from torchtitan's apply_fsdp_to_decoder, which runs with TP alone too). The
# other runs take its "partial_dtensor" backend (DTensor for the model-parallel axes only,
# torchtitan's FSDP2/TP path before spmd_types), an option of its command line. The single-process
# runs keep torchtitan's defaults (spmd_types; partial_dtensor gives them the same losses).
PARTIAL_DTENSOR = ["--parallelism.spmd-backend", "partial_dtensor"]
MODES = {
    # name: (ranks, torchtitan's options)
    "single process": (1, []),  # `torchrun -m torchtitan.train --module llama3 --config llama3_debugmodel`
    "FSDP2, 2 ranks": (2, ["--parallelism.data-parallel-shard-degree", "2", *PARTIAL_DTENSOR]),
    "TP 2": (2, ["--parallelism.tensor-parallel-degree", "2", "--parallelism.data-parallel-shard-degree", "1",
                 *PARTIAL_DTENSOR]),
    "FSDP2 x TP, 4 ranks": (4, ["--parallelism.data-parallel-shard-degree", "2",
                                "--parallelism.tensor-parallel-degree", "2", *PARTIAL_DTENSOR]),
}
# The single-process run on neuron also saves DCP checkpoints at steps 5 and 10 (test_dcp_resume).
SAVES = ["--checkpoint.interval", "5"]


def neuron_single(titan):
    return run(titan, "single process", "neuron", 1, MODES["single process"][1] + SAVES)


@pytest.mark.parametrize("mode", list(MODES))
def test_llama3_matches_cpu(titan, mode):
    nproc, args = MODES[mode]
    losses = neuron_single(titan) if mode == "single process" else run(titan, mode, "neuron", nproc, args)
    assert_close(mode, losses, run(titan, mode, "cpu", nproc, args))
    if mode == "single process":  # torchtitan's MFU knows the device (get_peak_flops, issue 26 item 4)
        with open(os.path.join(titan.root, "single_process_on_neuron.log")) as log:
            output = log.read()
        assert "Unknown neuron device" not in output and "Peak flops undefined" not in output


@pytest.mark.parametrize("ac", ["none", "full"])
def test_activation_checkpointing_matches_cpu(titan, ac):
    """`activation-checkpoint:none` and `:full` against the CPU's run with the debug config's
    selective checkpointing (what is recomputed does not change the values); and the same losses as
    neuron's selective run (recomputation on neuron gives the same values)."""
    losses = run(titan, f"activation checkpointing {ac}", "neuron", 1, [f"activation-checkpoint:{ac}"])
    assert_close(f"activation checkpointing {ac}", losses, run(titan, "single process", "cpu", 1, MODES["single process"][1]))
    selective = neuron_single(titan)
    assert max(abs(losses[step] - selective[step]) for step in losses) <= 1e-5, (losses, selective)


def test_dcp_resume_from_step_5_reproduces_steps_6_to_10(titan, tmp_path):
    """The single-process run saved DCP checkpoints at steps 5 and 10 (torchtitan's CheckpointManager,
    full state: model, optimizer, lr scheduler, dataloader, train state); a new run that finds
    step-5 in its checkpoint folder resumes there and gives steps 6-10 the same losses, exactly."""
    first = neuron_single(titan)
    checkpoints = os.path.join(titan.root, "single_process_on_neuron", "checkpoint")
    assert sorted(os.listdir(checkpoints)) == ["step-10", "step-5"], os.listdir(checkpoints)
    dump = str(tmp_path / "resumed")
    shutil.copytree(os.path.join(checkpoints, "step-5"), os.path.join(dump, "checkpoint", "step-5"))
    resumed = titan.losses("resumed from step 5", "neuron", 1, ["--checkpoint.enable"],
                           dump=dump, resume=True)
    record({"mode": "DCP resume from step 5 (steps 6-10 vs the first run)",
            "largest": max(abs(resumed[step] - first[step]) for step in resumed)})
    assert sorted(resumed) == list(range(6, STEPS + 1)), resumed
    assert resumed == {step: first[step] for step in resumed}, (resumed, first)


# ---- torch.compile ------------------------------------------------------------------------------

# torchtitan's apply_compile (distributed/compile.py) compiles each TransformerBlock with
# `--compile.backend`; for a model with FlexAttention, `_maybe_regional_inductor_backend` accepts only
# "inductor" and "aot_eager" and raises for any other name, "neuron" included: a string comparison in
# torchtitan, which nothing a backend registers can pass. `--compile.backend inductor` compiles on
# neuron with the neuron backend: torch.compile's Inductor entry selects it for graphs on the neuron
# device (Note [Patches of torch internals], patch 2), as the real package does.
COMPILE = ["--compile.enable", "--compile.backend", "inductor"]


def test_compile_backends_other_than_inductor_with_flex_attention(titan):
    """With FlexAttention, torchtitan 0.3.0 accepts `--compile.backend inductor` (the road that
    compiles on neuron: test_compiled_matches_cpu_and_eager) or `aot_eager`, and refuses
    `--compile.backend neuron`. `aot_eager` wraps the model's compile in regional_inductor, which
    hands the flex region to Inductor; Inductor does not generate code for neuron, so the region
    runs eagerly as aot_eager runs the rest (patch 5 of Note [Patches of torch internals]) and
    training gives the CPU's losses. The varlen attention config passes torchtitan's check and
    compiles with `neuron` (its FlashAttention ops become neuron's, Note [FlashAttention's ops on
    neuron]), but every batch packs another number of documents with another longest one:
    cu_seq_q's length and max_q/max_k change, and a neuron program has static shapes (one program
    per shape, as TorchNeuron's NEFFs), so each batch recompiles until Dynamo's recompile limit
    (8), which torchtitan's fullgraph=True makes an error; varlen attention runs eagerly
    (test_varlen_attention_matches_cpu)."""
    reference = run(titan, "single process", "cpu", 1, [])
    aot_eager = titan.run("compiled, backend aot_eager", "neuron", 1, ["--compile.enable", "--compile.backend", "aot_eager"])
    assert aot_eager.returncode == 0, aot_eager.output[-6000:]
    assert "Inductor does not generate code for the neuron device" in aot_eager.output, aot_eager.output[-6000:]
    assert_close("compiled, backend aot_eager", aot_eager.losses, reference)
    result = titan.run("compiled, backend neuron", "neuron", 1, ["--compile.enable", "--compile.backend", "neuron"])
    if result.returncode == 0:
        assert_close("compiled, backend neuron", result.losses, reference)
        return
    assert "Model uses FlexAttention but compile backend 'neuron' is neither 'inductor' nor 'aot_eager'" \
        in result.output, result.output[-6000:]
    varlen = titan.run("compiled, backend neuron, varlen attention", "neuron", 1,
                       ["--compile.enable", "--compile.backend", "neuron"], config="llama3_debugmodel_varlen_attn",
                       seed_config="llama3_debugmodel")
    assert varlen.returncode != 0 and "FailOnRecompileLimitHit" in varlen.output \
        and "recompiled one function" in varlen.output, varlen.output[-6000:]
    reason = ("torchtitan 0.3.0 refuses --compile.backend neuron for models with FlexAttention "
              "(torchtitan/distributed/compile.py _maybe_regional_inductor_backend: only 'inductor' or "
              "'aot_eager'; aot_eager trains, its flex region run eagerly); "
              "varlen attention compiles but recompiles for every batch (static shapes: the document count and "
              "the longest document change) until the recompile limit, an error under torchtitan's "
              "fullgraph=True; --compile.backend inductor compiles with the neuron backend on neuron tensors")
    record({"mode": "compiled, --compile.backend neuron", "xfail": reason})
    pytest.xfail(reason)


def test_varlen_attention_matches_cpu(titan):
    """torchtitan's varlen attention config (`llama3_debugmodel_varlen_attn`: VarlenAttention,
    varlen_attn over each batch's documents, which calls aten::_flash_attention_forward/_backward)
    on neuron. The CPU has no kernel for those ops (PyTorch ships them for CUDA only), so the
    reference is the CPU's run of the FlexAttention config from the same weights: the same
    document-causal attention (torchtitan's block_causal mask), so the same losses within
    TOLERANCE, though varlen attends in bfloat16 (VarlenAttention casts q, k, v)."""
    losses = run(titan, "varlen attention", "neuron", 1, [], config="llama3_debugmodel_varlen_attn",
                 seed_config="llama3_debugmodel")
    assert_close("varlen attention (neuron) vs FlexAttention (CPU)", losses,
                 run(titan, "single process", "cpu", 1, MODES["single process"][1]))


COMPILED = {
    "single process": (1, COMPILE),
    "FSDP2, 2 ranks": (2, [*MODES["FSDP2, 2 ranks"][1], *COMPILE]),
}


# Compiled against eager: equal losses (0.0 over 10 steps, one process and FSDP2). They drifted by
# 3.2-4.2e-3 while the compiled backward of torchtitan's complex rotary embeddings multiplied by an
# unconjugated value (issue 26 item 5: tests/compile/regressions/
# complex_rope_backward_conj_and_real_view_outputs.py), so compiled runs are held to TOLERANCE.


@pytest.mark.parametrize("mode", list(COMPILED))
def test_compiled_matches_cpu_and_eager(titan, mode):
    """Compiled on neuron against the CPU's eager run (the reference is never compiled:
    torchtitan_launch.py) and against neuron's eager run."""
    nproc, args = COMPILED[mode]
    losses = run(titan, f"{mode}, compiled", "neuron", nproc, args)
    eager = neuron_single(titan) if mode == "single process" else run(titan, mode, "neuron", nproc, MODES[mode][1])
    assert_close(f"{mode}, compiled (vs neuron eager)", losses, eager)
    assert_close(f"{mode}, compiled (vs CPU eager)", losses, run(titan, mode, "cpu", nproc, MODES[mode][1]))


# ---- pipeline, context and expert parallelism ---------------------------------------------------

def test_pipeline_parallel_2_stages(titan):
    """PP 2 with the debug config's schedule (Interleaved1F1B: 2 ranks, 2 stages each, 4 microbatches)."""
    expect_failure_on_every_device(
        titan, "PP 2", 2, ["--parallelism.pipeline-parallel-degree", "2", "--parallelism.data-parallel-shard-degree",
                           "1", "--training.disable-cuda-graphs", *PARTIAL_DTENSOR],
        "ValueError: Expecting 4 arg_mbs but got 1",
        "torchtitan 0.3.0 calls PipelineSchedule.step(arg_mbs=, kwarg_mbs=, target_mbs=, loss_kwargs=) "
        "(trainer.py pp_forward_backward_step), torch nightly's API: torch 2.13's step() takes them as the "
        "model's keyword arguments and refuses them (torch/distributed/pipelining/schedules.py _check_inputs: "
        "'Expecting 4 arg_mbs but got 1'), on the CPU as on neuron")


def test_context_parallel_2_matches_cpu(titan):
    """CP 2 (FlexAttention's context parallelism; the sequence, 256 here, must divide into 2 x its
    128-token blocks)."""
    args = ["--parallelism.context-parallel-degree", "2", "--parallelism.data-parallel-shard-degree", "1",
            "--training.seq-len", "256", *PARTIAL_DTENSOR]
    assert_close("CP 2", run(titan, "CP 2", "neuron", 2, args), run(titan, "CP 2", "cpu", 2, args))


# torchtitan's experts compute in bfloat16 (models/common/moe.py GroupedExperts: x and the weights cast
# to bfloat16 before torch._grouped_mm, which is bit for bit the CPU's on neuron, forward and
# backward), and top-k routing is discontinuous: float32 differences of an ulp before them (1e-7,
# FlexAttention's and RMSNorm's reductions) come out as bfloat16 ulps of the experts' outputs
# (2.4e-4 in layer 1 of a forward of the debug model on the same weights and tokens) and, through
# training, as loss differences of a few 1e-3 (the largest seen: 4.2e-3 at step 9, the first step's
# 1.3e-4). 1e-2 absolute for this model.
MOE_TOLERANCE = 1e-2


def test_moe_expert_parallel_2_matches_cpu(titan):
    """torchtitan's MoE debug model (deepseek_v3_debugmodel: 8 routed experts through
    torch._grouped_mm, 2 shared, MLA attention with FlexAttention) with EP 2 on 2 ranks (FSDP 2 for
    the dense part): the token dispatch's all_to_all_single on the c10d backend "neuron"."""
    args = ["--parallelism.expert-parallel-degree", "2", "--parallelism.data-parallel-shard-degree", "2",
            "--training.disable-cuda-graphs", *PARTIAL_DTENSOR]
    model = dict(module="deepseek_v3", config="deepseek_v3_debugmodel")
    assert_close("MoE, EP 2", run(titan, "MoE EP 2", "neuron", 2, args, **model),
                 run(titan, "MoE EP 2", "cpu", 2, args, **model), tolerance=MOE_TOLERANCE)
