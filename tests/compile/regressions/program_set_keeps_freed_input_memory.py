"""Issue 23, review 17 finding 2. A loaded program writes (and reads) memory that is not its own: an in-place metadata op on an
arena value persists across calls, so `aten::set_.source_Tensor(arena, input)` leaves the
arena value pointing at the previous call's input; after that input is freed, the next call
writes into whatever tensor now lives there.

csrc/compile/Executor.cpp:371-408 builds the arena and constant tensors once (fixed_) and
execute_steps (Executor.cpp:587) hands those same TensorImpls to every call's kernels. set_
(also as_strided_, resize_, transpose_, ... on a fixed value) changes the TensorImpl itself;
check_result (Executor.cpp:198-211) only checks that the result lies inside its (new)
storage, and the loader (runtime/program.cpp check_program) cannot know op semantics. The
fuzzers do not catch it: runtime/fuzz's property is checked in a model of the executor
(program_fuzzing.h), and tests/compile/program_mutants.py runs each mutant in one call. With
NEURON_SIM_MEMORY_GUARD=1 the second call below dies with SIGSEGV; without it a tensor the
program never saw is overwritten. Issue 23 item 9: "a well-formed but hostile program can
neither read nor write outside its own buffers".

Fixed by Note [Fixed values keep their metadata] (compile/Executor.cpp): a step that changes a fixed value's storage or metadata fails the call and the value is restored. The original suggestion was:
as per-call values are), or refuse ops that replace a tensor's storage or metadata in place
(set_.*, as_strided_, resize_*, *_ view ops) when a program is loaded; and make the executor's
model in program_fuzzing.h / program_mutants.py run every accepted mutant at least twice."""
import gc
import sys

import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

FLOAT = _C.scalar_type_code(torch.float32)
VALUE, DOUBLE = 1, 3
INPUT, ARENA = 0, 2
N = 1024


def value(kind, index=0, nbytes=0):
    return {"kind": kind, "index": index, "bytes": nbytes, "on_host": False, "dtype": FLOAT, "sizes": [N],
            "strides": [1], "offset": 0}


def arg(kind, integer=0, real=0.0):
    return (kind, integer, real, [], [], "")


program = {
    "name": "hostile", "inputs": [0], "constants": [], "outputs": [0], "arena_bytes": 4 * N, "metadata": {},
    "values": [value(INPUT), value(ARENA, 0, 4 * N)],
    "nodes": [
        {"op": "aten::fill_.Scalar", "args": [arg(VALUE, 1), arg(DOUBLE, 0, 7.0)], "outputs": [1]},  # writes the arena
        {"op": "aten::set_.source_Tensor", "args": [arg(VALUE, 1), arg(VALUE, 0)], "outputs": [1]},  # arena := input
    ],
}
try:
    loaded = _C.Program(_C.encode_program(program), 0)
except RuntimeError as e:
    print("refused at load:", str(e).splitlines()[0][:200])
    print("OK")
    sys.exit(0)
first_input = torch.zeros(N, device="neuron")
try:
    loaded.run([first_input])
except RuntimeError as e:
    print("first call refused:", str(e).splitlines()[0][:200])
    print("OK")
    sys.exit(0)
address = first_input.data_ptr()
del first_input
gc.collect()
victim = torch.ones(N, device="neuron")  # a tensor the program is never given
if victim.data_ptr() != address:
    print("the allocator did not reuse the freed block here; cannot show the write")
    sys.exit(77)
try:
    loaded.run([torch.zeros(N, device="neuron")])
except RuntimeError as e:
    print("second call raised:", str(e).splitlines()[0][:200])
    print("OK")
    sys.exit(0)
seen = victim[:4].cpu().tolist()
print("victim (never given to the program) after the second call:", seen, "(was [1.0, 1.0, 1.0, 1.0])")
if seen != [1.0] * 4:
    print("BUG: the program wrote through the previous call's freed input into another tensor")
    sys.exit(1)
print("OK")
sys.exit(0)
