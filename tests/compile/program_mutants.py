"""Runs structurally mutated programs of real compiled graphs through the executor
(tests/compile/test_program_cache_security.py starts it in a child process, with device memory guarded,
so that a crash fails the test instead of the test run). A mutant must be refused when it is
loaded or raise when it runs, or run; the process must never crash.

Usage: program_mutants.py CACHE_DIR SEED ROUNDS; prints one line per round before running it
(the last line names the round of a crash) and a JSON summary at the end."""
import copy
import gc
import json
import random
import sys

import torch
import torch_neuronx  # noqa: F401
from torch_neuron_sim import _C

# Every kind the schema has (Note [The program schema in Python]).
VALUE_KINDS = list(_C.ProgramValueKind.__members__.values())
ARG_KINDS = list(_C.ProgramArgKind.__members__.values())

OPS = ["aten::add.Tensor", "aten::mm", "aten::addmm", "aten::clone", "aten::_to_copy", "aten::copy_",
       "aten::index_copy_", "aten::cat", "aten::max.dim", "neuron::pointwise", "aten::_reshape_alias",
       "aten::as_strided", "aten::as_strided_", "aten::resize_", "aten::set_.source_Tensor", "aten::from_file",
       "aten::_sparse_coo_tensor_unsafe", "aten::view", "aten::_assert_async.msg", "aten::empty.memory_format",
       "aten::fill_.Scalar", "aten::index_select", "aten::gather", "aten::scatter_add_", "aten::embedding"]


def graphs():
    def linear(x, w, b):
        return torch.relu(x @ w + b).sum(0)

    def views(x):
        return x[1:].t() * 2, x[:, 1]

    def pointwise(x, y):
        return ((x * y + 1).square() + x).rsqrt()

    def several(x):
        values, indices = torch.max(x, 1)
        return values, indices, torch.topk(x, 2).values

    def update(cache, index, value):
        cache.index_copy_(0, index, value)
        return torch.cat([cache, value], 0).sum(1)

    def gathers(x, index):
        return torch.gather(x, 1, index) + torch.index_select(x, 0, index[:, 0])

    n = "neuron"
    return [
        (linear, (torch.randn(3, 4), torch.randn(4, 5), torch.randn(5))),
        (views, (torch.randn(4, 3),)),
        (pointwise, (torch.rand(8) + 1, torch.rand(8) + 1)),
        (several, (torch.randn(3, 4),)),
        (update, (torch.zeros(4, 2), torch.tensor([1]), torch.ones(1, 2))),
        (gathers, (torch.randn(3, 3), torch.tensor([[0, 1, 2], [2, 1, 0], [1, 1, 1]]))),
    ], n


def compiled_payloads(directory):
    """The programs of the graphs above, read back from the program cache."""
    import os
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = directory
    programs, device = graphs()
    for fn, args in programs:
        torch.compile(fn, backend="neuron")(*[a.to(device) for a in args])
    cache = _C.ProgramCache(directory, 64)
    payloads = []
    for root, _, names in sorted(os.walk(directory)):
        for name in sorted(names):
            if name.endswith(".neff"):
                payloads.append(cache.get(name[:-5])[0])
    return payloads


def _dtypes():
    codes = {}
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                  torch.float64, torch.bool, torch.bfloat16, torch.complex64):
        codes[_C.scalar_type_code(dtype)] = dtype
    return codes


DTYPES = _dtypes()


class Mutator:
    def __init__(self, seed):
        self.random = random.Random(seed)

    def edge(self, current, limit):
        r = self.random
        return r.choice([-1, 0, limit - 1, limit, limit + 1, current + 1, current - 1, 1 << r.randrange(62),
                         current * 2 + 1, r.randrange(max(limit, 1) + 2)])

    def mutate(self, p):
        r = self.random
        count = len(p["values"])
        choice = r.randrange(10)
        if choice < 3 and count:
            v = p["values"][r.randrange(count)]
            field = r.choice(["kind", "index", "bytes", "dtype", "sizes", "strides", "offset", "on_host"])
            if field == "kind":
                v["kind"] = r.choice(VALUE_KINDS)
            elif field == "index":
                v["index"] = self.edge(v["index"], count)
            elif field == "bytes":
                v["bytes"] = max(0, self.edge(v["bytes"], p["arena_bytes"]))
            elif field == "dtype":
                v["dtype"] = r.choice(list(DTYPES) + [12, 13, 46, 200])
            elif field == "on_host":
                v["on_host"] = not v["on_host"]
            elif field == "offset":
                v["offset"] = self.edge(v["offset"], 8)
            elif v[field]:
                i = r.randrange(len(v[field]))
                v[field][i] = self.edge(v[field][i], v[field][i] + 1)
        elif choice < 6 and p["nodes"]:
            node = p["nodes"][r.randrange(len(p["nodes"]))]
            what = r.randrange(4)
            if what == 0:
                node["op"] = r.choice(OPS)
            elif what == 1 and node["args"]:
                a = r.randrange(len(node["args"]))
                kind, integer, real, lst, reals, text = node["args"][a]
                sub = r.randrange(4)
                if sub == 0:
                    kind = r.choice(ARG_KINDS)
                elif sub == 1:
                    integer = self.edge(integer, count)
                elif sub == 2 and lst:
                    lst = list(lst)
                    lst[r.randrange(len(lst))] = self.edge(lst[0], count)
                else:
                    kind, integer = _C.ProgramArgKind.VALUE, r.randrange(count + 1)
                node["args"][a] = (kind, integer, real, lst, reals, text)
            elif what == 2:
                if node["outputs"]:
                    node["outputs"][r.randrange(len(node["outputs"]))] = self.edge(0, count)
                else:
                    node["outputs"].append(r.randrange(count + 1))
            else:
                node["args"].append((_C.ProgramArgKind.VALUE, r.randrange(count + 1), 0.0, [], [], ""))
        elif choice == 6:
            p["arena_bytes"] = max(0, self.edge(p["arena_bytes"], p["arena_bytes"]))
        elif choice == 7 and p["inputs"]:
            p["inputs"][r.randrange(len(p["inputs"]))] = self.edge(0, count)
        elif choice == 8 and p["outputs"]:
            p["outputs"][r.randrange(len(p["outputs"]))] = self.edge(0, count)
        elif count:  # a new view of some value
            base = r.randrange(count)
            v = copy.deepcopy(p["values"][base])
            v.update(kind=_C.ProgramValueKind.VIEW, index=base, offset=self.edge(v["offset"], 4))
            if v["sizes"]:
                v["sizes"][0] = self.edge(v["sizes"][0], v["sizes"][0] + 1)
            p["values"].append(v)
            if p["nodes"] and r.randrange(2):
                p["nodes"][r.randrange(len(p["nodes"]))]["outputs"].append(count)
            if r.randrange(2):
                p["outputs"].append(count)


def inputs_for(program):
    tensors = []
    for vid in program["inputs"]:
        v = program["values"][vid]
        dtype = DTYPES.get(v["dtype"])
        elements = 1
        for s in v["sizes"]:
            elements *= max(s, 1)
        if dtype is None or elements > 1 << 16 or any(s < 0 for s in v["sizes"] + v["strides"]):
            return None
        span = 1 + sum((s - 1) * st for s, st in zip(v["sizes"], v["strides"])) if elements and all(v["sizes"]) else 0
        if span > 1 << 16:
            return None
        storage = torch.randint(0, 3, (span,)).to(dtype)
        device = "cpu" if v["on_host"] else "neuron"
        tensors.append(storage.to(device).as_strided(v["sizes"], v["strides"]))
    return tensors


def main():
    directory, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    payloads = compiled_payloads(directory)
    seeds = [_C.program_dict_unchecked(p) for p in payloads]
    outcome = {"programs": len(seeds), "refused": 0, "failed": 0, "ran": 0, "unencodable": 0}
    for round_ in range(rounds):
        mutator = Mutator(seed * 1_000_003 + round_)
        program = copy.deepcopy(seeds[round_ % len(seeds)])
        for _ in range(1 + mutator.random.randrange(3)):
            mutator.mutate(program)
        print(f"round {round_}", flush=True)
        try:
            payload = _C.encode_program(program)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            outcome["unencodable"] += 1
            continue
        try:
            loaded = _C.Program(payload, 0)
        except Exception:  # noqa: BLE001
            outcome["refused"] += 1
            continue
        # Twice, with fresh inputs, the first call's freed between: what a call leaves in the
        # program (its arena, its fixed values) must not reach memory the next call does not own
        # (Note [Fixed values keep their metadata]).
        for call in range(2):
            tensors = inputs_for(program)
            if tensors is None:
                outcome["refused"] += 1
                break
            try:
                results = loaded.run(tensors)
                for t in results:
                    t.cpu()
                torch.neuron.synchronize()
                outcome["ran"] += call == 1
            except Exception:  # noqa: BLE001  (an error of any kind is a refusal; only a crash is not)
                outcome["failed"] += 1
                break
            del tensors, results
            gc.collect()
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
