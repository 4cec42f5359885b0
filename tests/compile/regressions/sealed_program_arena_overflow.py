"""Review 8, finding 11. The program loader accepts a sealed program whose arena slot is smaller than its tensor;
running it writes past the arena into other live tensors.

decode_program (runtime/program.cpp:231-258) checks that a slot lies inside the arena
(`bytes <= arena_bytes - index`) but never that the slot's TensorSpec fits in `bytes`
(nor a constant's or a view's spec in its base); the executor then builds a host tensor of
the spec's size over the slot (csrc/compile/Executor.cpp:239-243, host_tensor ignores
nbytes for bounds). The CRC only proves the writer's bytes arrived intact, so a program
from a buggy or older writer with the same format version, a shared /tmp/neff_cache, or a
load_cache_artifacts() blob is executed out of bounds. The random-damage test never gets
past the CRC, so these checks are not exercised."""
import os
import sys
import tempfile

import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

N = torch.device("neuron")
f32 = _C.scalar_type_code(torch.float32)
n = 4096


def value(kind, index, nbytes):
    return {"kind": kind, "index": index, "bytes": nbytes, "on_host": False, "dtype": f32,
            "sizes": [n], "strides": [1], "offset": 0}


def arg(value_id):
    return (1, value_id, 0.0, [], [], "")


NONE = (0, 0, 0.0, [], [], "")
program = {
    "name": "crafted",
    # input x; an arena slot of 512 bytes holding a 16 KiB tensor; an output
    "values": [value(0, 0, 4 * n), value(2, 0, 512), value(3, 0, 4 * n)],
    "inputs": [0], "constants": [],
    "nodes": [{"op": "aten::neg", "args": [arg(0)], "outputs": [1]},
              {"op": "aten::clone", "args": [arg(1), NONE], "outputs": [2]}],
    "outputs": [2], "arena_bytes": 512, "metadata": {},
}
payload = _C.encode_program(program)
directory = tempfile.mkdtemp()
key = "ab" * 16
path = _C.ProgramCache.path_for(directory, key)
os.makedirs(os.path.dirname(path))
with open(path, "wb") as f:
    f.write(_C.seal_program(key, payload))          # what a writer with a bug would leave

found = _C.ProgramCache(directory, 4, print).get(key)   # the disk cache's checks
print("the cache loader accepted the entry:", found is not None)
damaged = []
if found is not None:
    try:
        executor = _C.Program(found[0], 0)
        others = [torch.zeros(n, device=N) for _ in range(4)]   # unrelated live tensors
        executor.run([torch.ones(n, device=N)])
        damaged = [int((t.cpu() != 0).sum()) for t in others]
    except RuntimeError as error:                               # rejected when built or run: fine
        print("rejected:", str(error).splitlines()[0][:160])
print("elements overwritten in unrelated tensors:", damaged)
ok = not any(damaged)
print("OK" if ok else "BUG: a malformed program passed the loader's checks and wrote outside its arena")
sys.exit(0 if ok else 1)
