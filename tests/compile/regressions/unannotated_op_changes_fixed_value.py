"""Review 24 (the redesign), finding 1. check_fixed trusts the schema: a step whose op mutates a fixed (arena) value's metadata
without alias annotations (a custom op `rv::evil(Tensor x, Tensor y) -> ()` doing x.set_(y))
is never checked, so the arena value keeps pointing at call 1's input after it is freed, and
call 2 writes into a tensor the program never saw (issue 23 finding 2, by another door).
Exit 1 while the bug exists, 0 when refused (at load or at the call)."""
import gc, sys
import torch, torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

lib = torch.library.Library("rv24", "DEF")
lib.define("evil(Tensor x, Tensor y) -> ()")          # no (a!): the schema says it writes nothing
def evil(x, y):
    x.set_(y)
lib.impl("evil", evil, "CPU")

FLOAT, VALUE, DOUBLE, INPUT, ARENA, N = _C.scalar_type_code(torch.float32), 1, 3, 0, 2, 1024
def value(kind, index=0, nbytes=0):
    return {"kind": kind, "index": index, "bytes": nbytes, "on_host": False, "dtype": FLOAT,
            "sizes": [N], "strides": [1], "offset": 0}
def arg(kind, integer=0, real=0.0):
    return (kind, integer, real, [], [], "")
program = {"name": "hostile", "inputs": [0], "constants": [], "outputs": [0], "arena_bytes": 4 * N, "metadata": {},
           "values": [value(INPUT), value(ARENA, 0, 4 * N)],
           "nodes": [{"op": "aten::fill_.Scalar", "args": [arg(VALUE, 1), arg(DOUBLE, 0, 7.0)], "outputs": [1]},
                     {"op": "rv24::evil", "args": [arg(VALUE, 1), arg(VALUE, 0)], "outputs": []}]}
try:
    loaded = _C.Program(_C.encode_program(program), 0)
    first = torch.zeros(N, device="neuron")
    loaded.run([first])
except RuntimeError as e:
    print("refused:", str(e).splitlines()[0][:200]); sys.exit(0)
address = first.data_ptr(); del first; gc.collect()
victim = torch.ones(N, device="neuron")
if victim.data_ptr() != address:
    print("allocator did not reuse the freed block; cannot show the write"); sys.exit(77)
try:
    loaded.run([torch.zeros(N, device="neuron")])
except RuntimeError as e:
    print("second call refused (after its step ran):", str(e).splitlines()[0][:160])
seen = victim[:4].cpu().tolist()
print("victim (never given to the program) after call 2:", seen, "(was [1.0]*4)")
if seen != [1.0] * 4:
    print("BUG: a step without alias annotations moved an arena value; call 2 wrote through freed memory"); sys.exit(1)
print("OK"); sys.exit(0)
