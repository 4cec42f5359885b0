"""The compiled-program cache trusts only what the current user could have written
(Note [Trusting the program cache], runtime/program_cache.h), and a loaded program cannot reach
memory other than its own (Note [Program loader checks], runtime/program.h; the executor's
argument and result checks, csrc/compile/Executor.cpp).

The other user is uid 65534 (nobody): its file-system actions run as that user through
coreutils (Python itself lives under /root, which nobody cannot enter); what it plants is a
program any user can compute, computed here in a process of its own."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

import torch_neuronx
from torch_neuron_sim import _C

from conftest import run_python

OTHER_UID = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user (setuid) needs root")

# f is what the victim runs; g is what the other user wants it to run instead.
FUNCTIONS = """
import torch
def f(x):
    return x + 1
def g(x):
    return x * 100
"""

PLANT = FUNCTIONS + """
import json, os, torch, torch_neuronx
from torch_neuron_sim import _C
keys = {}
for name, fn in (("f", f), ("g", g)):
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(os.environ["WORK"], name)
    torch._dynamo.reset()
    torch.compile(fn, backend="neuron")(torch.arange(4.0).to("neuron"))
    (path,) = __import__("glob").glob(os.path.join(os.environ["WORK"], name, "*", "*", "*.neff"))
    keys[name] = os.path.basename(path)[:-5]
g_file = open(os.path.join(os.environ["WORK"], "g", keys["g"][:2], keys["g"][2:4], keys["g"] + ".neff"), "rb").read()
planted = _C.seal_program(keys["f"], _C.unseal_program(g_file, keys["g"]))
with open(os.path.join(os.environ["WORK"], "planted.neff"), "wb") as out:
    out.write(planted)
print(json.dumps(keys))
"""

VICTIM = FUNCTIONS + """
import torch, torch_neuronx
print(torch.compile(f, backend="neuron")(torch.arange(4.0).to("neuron")).cpu().tolist())
"""


def _as_other_user(*command):
    """Runs a coreutils command as the other user; fails the test if it fails."""
    def drop():
        os.setgroups([])
        os.setgid(OTHER_UID)
        os.setuid(OTHER_UID)
    result = subprocess.run(list(command), preexec_fn=drop, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} as uid {OTHER_UID}: {result.stderr}"


@pytest.fixture
def shared_tmp():
    """A sticky directory every user can write to, as /tmp (pytest's own folders are private)."""
    path = tempfile.mkdtemp(prefix="neff_shared_", dir="/tmp")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _planted_program(tmp_path, shared_tmp):
    """(f's key, a sealed program of g under f's key), readable by the other user."""
    work = tmp_path / "plant"
    result = run_python(PLANT, {"WORK": str(work), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor_plant")},
                        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    keys = json.loads(result.stdout.strip().splitlines()[-1])
    readable = os.path.join(shared_tmp, "planted.neff")
    shutil.copy(work / "planted.neff", readable)
    os.chmod(readable, 0o644)
    return keys["f"], readable


def _plant(directory, key, planted):
    """The other user writes the planted program where f's entry goes, in `directory`."""
    folder = os.path.join(directory, key[:2], key[2:4])
    _as_other_user("mkdir", "-p", "-m", "0777", folder)
    _as_other_user("cp", planted, os.path.join(folder, key + ".neff"))


def _victim(tmp_path, env):
    result = run_python(VICTIM, dict(env, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor_victim")), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@needs_root
def test_a_program_planted_in_a_shared_directory_is_not_run(tmp_path, shared_tmp):
    # The repro: a directory every user can write to (as TorchNeuron's /tmp/neff_cache, made
    # by whoever came first), and the other user's program of g sealed under f's key in it.
    shared = os.path.join(shared_tmp, "neff_cache")
    _as_other_user("mkdir", "-m", "0777", shared)
    _as_other_user("chmod", "0777", shared)
    key, planted = _planted_program(tmp_path, shared_tmp)
    _plant(shared, key, planted)
    result, warnings = _victim(tmp_path, {"TORCH_NEURONX_NEFF_CACHE_DIR": shared})
    assert result == [1.0, 2.0, 3.0, 4.0]  # f, compiled here; the planted g gave [0, 100, 200, 300]
    assert f"the program cache directory {shared} belongs to nobody (uid {OTHER_UID})" in warnings, warnings
    assert "mode 0777" in warnings and "TORCH_NEURONX_NEFF_CACHE_DIR" in warnings, warnings
    assert os.stat(_C.ProgramCache.path_for(shared, key)).st_uid == OTHER_UID  # never touched


@needs_root
def test_the_default_directory_is_per_user_and_a_squatted_one_is_refused(tmp_path, shared_tmp):
    # Every user's default is their own folder of TMPDIR; another user who makes ours first
    # (and plants a program in it) is refused by name.
    key, planted = _planted_program(tmp_path, shared_tmp)
    mine = os.path.join(shared_tmp, "neff_cache_root")
    _as_other_user("mkdir", "-m", "0700", mine)
    _as_other_user("chmod", "0777", mine)
    _plant(mine, key, planted)
    env = {"TMPDIR": shared_tmp}
    env_without_setting = {k: v for k, v in os.environ.items() if k != "TORCH_NEURONX_NEFF_CACHE_DIR"}
    result = subprocess.run([sys.executable, "-c", VICTIM], env=dict(env_without_setting, **env,
                            TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor_victim")),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [1.0, 2.0, 3.0, 4.0]
    assert f"the program cache directory {mine} belongs to nobody" in result.stderr, result.stderr
    assert "have it removed" in result.stderr, result.stderr


def test_the_default_directory_is_made_private(tmp_path):
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NEURONX_NEFF_CACHE_DIR"}
    env.update(TMPDIR=str(own_tmp), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    result = subprocess.run([sys.executable, "-c", VICTIM + "\nfrom torch_neuron_sim.compile import cache\n"
                             "print(cache.directory())"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    directory = result.stdout.strip().splitlines()[-1]
    import pwd
    assert directory == str(own_tmp / f"neff_cache_{pwd.getpwuid(os.geteuid()).pw_name}")
    assert os.stat(directory).st_mode & 0o777 == 0o700
    (entry,) = glob.glob(os.path.join(directory, "*", "*", "*.neff"))
    assert os.stat(os.path.dirname(entry)).st_mode & 0o777 == 0o700
    assert os.stat(entry).st_mode & 0o777 == 0o600


@needs_root
def test_an_entry_of_another_user_is_reported_and_replaced(tmp_path):
    directory = tmp_path / "neff"
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(directory)}
    _victim(tmp_path, env)
    (entry,) = glob.glob(str(directory / "*" / "*" / "*.neff"))
    os.chown(entry, OTHER_UID, OTHER_UID)
    shutil.rmtree(tmp_path / "inductor_victim")  # so that the program is looked up again
    result, warnings = _victim(tmp_path, env)
    assert result == [1.0, 2.0, 3.0, 4.0]
    assert f"the program cache entry {entry} belongs to nobody (uid {OTHER_UID})" in warnings, warnings
    assert f"rm {entry}" in warnings, warnings
    assert os.stat(entry).st_uid == os.geteuid()  # the program compiled again replaced it


def test_an_entry_others_can_write_is_reported(tmp_path):
    directory = tmp_path / "neff"
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(directory)}
    _victim(tmp_path, env)
    (entry,) = glob.glob(str(directory / "*" / "*" / "*.neff"))
    os.chmod(entry, 0o666)
    shutil.rmtree(tmp_path / "inductor_victim")
    result, warnings = _victim(tmp_path, env)
    assert result == [1.0, 2.0, 3.0, 4.0]
    assert "can be written by group or others" in warnings and "mode 0666" in warnings, warnings


def test_an_artifact_key_cannot_name_a_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    cache = _C.ProgramCache(str(tmp_path / "neff"), 4)
    with pytest.raises(RuntimeError, match="not a file name"):
        cache.put("../../outside", b"x")
    assert not (tmp_path / "outside.neff").exists()


def test_the_migration_tool_measures_the_cache_where_it_is(monkeypatch):
    from neuron_migrate import compiles
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_DIR", raising=False)
    assert compiles.cache_dir() == torch_neuronx.neff_cache_dir() == _C.ProgramCache.default_directory()
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", "/somewhere/else")
    assert compiles.cache_dir() == torch_neuronx.neff_cache_dir() == "/somewhere/else"


# ---- hostile programs --------------------------------------------------------------------------

FLOAT = _C.scalar_type_code(torch.float32)


def _value(kind, sizes, index=0, nbytes=0, on_host=False):
    strides, stride = [], 1
    for size in reversed(sizes):
        strides.insert(0, stride)
        stride *= max(size, 1)
    return {"kind": kind, "index": index, "bytes": nbytes, "on_host": on_host, "dtype": FLOAT, "sizes": list(sizes),
            "strides": strides, "offset": 0}


def _program(values, nodes, outputs, inputs=(0,)):
    return {"name": "hostile", "values": values, "inputs": list(inputs), "constants": [], "nodes": nodes,
            "outputs": outputs, "arena_bytes": 0, "metadata": {}}


Kind, Arg = _C.ProgramValueKind, _C.ProgramArgKind  # Note [The program schema in Python]
INPUT, OUTPUT, DYNAMIC = Kind.INPUT, Kind.OUTPUT, Kind.DYNAMIC
VALUE, INT, INTS, NONE, STRING, BOOL = Arg.VALUE, Arg.INT, Arg.INT_LIST, Arg.NONE, Arg.STRING, Arg.BOOL


def _arg(kind, integer=0, values=()):
    return (kind, integer, 0.0, list(values), [], "")


def test_a_kernel_result_outside_its_storage_is_refused(neuron):
    # _reshape_alias builds its result from its arguments unchecked: a 4-element input seen as
    # 4096 elements would hand 16 KB of whatever follows it to the next node.
    program = _program(
        [_value(INPUT, [4]), _value(DYNAMIC, [4096]), _value(OUTPUT, [4096])],
        [{"op": "aten::_reshape_alias", "args": [_arg(VALUE, 0), _arg(INTS, values=[4096]), _arg(INTS, values=[1])],
          "outputs": [1]},
         {"op": "aten::clone", "args": [_arg(VALUE, 1), _arg(NONE)], "outputs": [2]}],
        [2])
    loaded = _C.Program(_C.encode_program(program), 0)
    with pytest.raises(RuntimeError, match="_reshape_alias returned a tensor reaching byte 16384 of a storage of 16"):
        loaded.run([torch.ones(4, device=neuron)])


def test_arguments_must_be_of_the_kind_their_schema_takes():
    program = _program([_value(INPUT, [4]), _value(OUTPUT, [4])],
                       [{"op": "aten::neg", "args": [_arg(NONE)], "outputs": [1]}], [1])
    with pytest.raises(RuntimeError, match=r"aten::neg argument 0 \(self\): None for a value that is not optional"):
        _C.Program(_C.encode_program(program), 0)
    program["nodes"][0] = {"op": "aten::sum.dim_IntList",
                           "args": [_arg(VALUE, 0), _arg(VALUE, 0), _arg(BOOL), _arg(NONE)], "outputs": [1]}
    with pytest.raises(RuntimeError, match=r"argument 1 \(dim\): a program argument of kind 1 for type int"):
        _C.Program(_C.encode_program(program), 0)


def test_reading_files_is_refused():
    program = _program([_value(INPUT, [4]), _value(OUTPUT, [4])],
                       [{"op": "aten::from_file", "args": [(STRING, 0, 0.0, [], [], "/etc/passwd")] + [_arg(NONE)] * 6,
                         "outputs": [1]}], [1])
    with pytest.raises(RuntimeError, match="programs may not read or map files"):
        _C.Program(_C.encode_program(program), 0)


def test_mutated_programs_never_crash_the_executor(tmp_path):
    # Structural mutants of real compiled programs (a value's kind, index, bytes, sizes,
    # strides, offset, dtype; a node's op, arguments, outputs; inputs, outputs, the arena),
    # loaded and run with device memory guarded: each is refused, raises, or runs.
    env = dict(os.environ, NEURON_SIM_MEMORY_GUARD="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    result = subprocess.run([sys.executable, "-X", "faulthandler", os.path.join(os.path.dirname(os.path.abspath(__file__)), "program_mutants.py"),
                             str(tmp_path / "neff"), "7", "1500"], env=env, capture_output=True, text=True,
                            timeout=900)
    last = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    assert result.returncode == 0, f"crashed at {last}:\n{result.stderr[-3000:]}"
    outcome = json.loads(last)
    assert outcome["programs"] >= 6 and outcome["ran"] > 50 and outcome["refused"] > 500, outcome
