"""Tensor-parallel greedy generation, one side of `make bench` (bench/bench.py): a Llama-style
model (bench/tp_generate.py --make DIR writes one from a config, random weights), loaded with
`DistributedConfig(tp_size=world)` under torchrun (or on one device without torchrun), greedy
`generate`; rank 0 prints tokens/s (median of --repeats) and the tokens of the last run.

--breakdown times one more `generate` with the calls it is made of wrapped (exclusive times, each
rank): the collectives (c10d and functional, waiting for the other ranks included), DTensor's
Python (from_local, to_local, redistribute without its collectives), the matmuls (F.linear) and the
rest (the model's and transformers' Python, its TP hooks, the other ops). The wrappers cost time
of their own, so these runs are not the tokens/s above."""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402


SIZES = {
    # ~5M parameters: a decode step is launch and Python overhead, hardly any work
    "small": dict(vocab_size=2048, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4),
    # ~111M parameters (float32, 445 MB): a decode step reads every weight once, so halving the
    # weights per rank halves the work
    "medium": dict(vocab_size=8192, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                   num_attention_heads=16, num_key_value_heads=8),
}


def make(path, size):
    torch.manual_seed(0)
    config = LlamaConfig(max_position_embeddings=256, **SIZES[size])
    AutoModelForCausalLM.from_config(config).save_pretrained(path)


class Breakdown:
    """Exclusive wall time per group of wrapped calls (a call's time less its wrapped callees')."""

    def __init__(self):
        self.times = {}
        self.stack = []

    def wrap(self, owner, name, group):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            self.stack.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                inner = self.stack.pop()
                self.times[group] = self.times.get(group, 0.0) + elapsed - inner
                if self.stack:
                    self.stack[-1] += elapsed

        setattr(owner, name, timed)

    def install(self):
        import torch.distributed._functional_collectives as funcol
        import torch.nn.functional as F
        from torch.distributed.tensor import DTensor
        for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast"):
            self.wrap(dist, name, "collectives")
        for name in ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "wait_tensor"):
            self.wrap(funcol, name, "collectives")
        for name in ("from_local", "to_local", "redistribute"):
            self.wrap(DTensor, name, "dtensor")
        self.wrap(F, "linear", "matmuls")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--make", action="store_true")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="with --make")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--phases", action="store_true",
                        help="with --compiled: ms per token inside the neuron programs and outside them, each rank")
    parser.add_argument("--compiled", action="store_true")
    parser.add_argument("--skip-module-guards", action="store_true",
                        help="compiled with PyTorch's guard filter torch.compiler.skip_guard_on_all_nn_modules_unsafe "
                             "(a user's option through transformers' CompileConfig)")
    parser.add_argument("--cut-at-collectives", action="store_true",
                        help="compiled graphs are cut at their collectives (NEURON_SIM_COLLECTIVES_IN_PROGRAMS=0)")
    args = parser.parse_args()
    if args.phases and not args.compiled:
        parser.error("--phases times a compiled decode step's programs: give --compiled too")
    if args.cut_at_collectives:
        os.environ["NEURON_SIM_COLLECTIVES_IN_PROGRAMS"] = "0"  # read when a graph compiles
    if args.make:
        return make(args.model, args.size)
    if "WORLD_SIZE" in os.environ:
        from transformers.distributed import DistributedConfig
        dist.init_process_group(backend="neuron")
        model = AutoModelForCausalLM.from_pretrained(args.model,
                                                     distributed_config=DistributedConfig(tp_size=dist.get_world_size()))
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, device_map="neuron")
    ids = torch.tensor([[1, 300, 301, 302, 303, 304, 305, 306]], device=model.device)

    options = {"cache_implementation": "static"} if args.compiled else {}
    if args.skip_module_guards:
        from transformers import CompileConfig
        # transformers' default for neuron (backend "neuron", static shapes) plus the guard filter;
        # torch.compile takes a mode or options, not both
        model.generation_config.compile_config = CompileConfig(
            backend="neuron", dynamic=False, mode=None,
            options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    decode_calls = DecodeCalls(model) if args.compiled else None

    def generate():
        return model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False, **options)

    generate()
    if args.breakdown:
        return breakdown(generate, args.tokens)
    if args.phases:
        return phases(generate, args.tokens, args.repeats, decode_calls)
    samples = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        tokens = generate()
        samples.append(time.perf_counter() - start)
    result = {"tok_s": args.tokens / statistics.median(samples), "tokens": tokens.tolist()}
    if decode_calls and decode_calls.last:
        result["guard_us"] = guard_check_us(*decode_calls.last)
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(json.dumps(result))
    if dist.is_initialized():
        dist.destroy_process_group()


class DecodeCalls:
    """generate's compiled decode step (transformers' get_compiled_call), watched: the model and the
    arguments of its last call (`last`), and the seconds spent in its calls (`seconds`: Dynamo's
    guards, AOTAutograd's wrappers, our backend's call and the program)."""

    def __init__(self, model):
        self.last, self.seconds = None, 0.0
        compiled_call = type(model).get_compiled_call

        def get_compiled_call(this, compile_config):
            compiled = compiled_call(this, compile_config)

            def decode(*args, **kwargs):
                self.last = (this, args, kwargs)
                start = time.perf_counter()
                try:
                    return compiled(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - start

            return decode

        model.get_compiled_call = get_compiled_call.__get__(model)


def guard_check_us(model, args, kwargs, checks=300):
    """Microseconds Dynamo's guards take to accept one compiled decode call (median of `checks`
    runs of the guard tree on that call's arguments): the host work torch.compile adds before
    each call. Reads Dynamo's cache entry (PyTorch internals): None when it is not found."""
    import inspect
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    function = type(model).forward
    while function is not None:
        entries = _debug_get_cache_entry_list(function.__code__)
        if entries:
            break
        function = getattr(function, "__wrapped__", None)
    if function is None or len(entries) != 1:
        return None
    bound = inspect.signature(function, follow_wrapped=False).bind(model, *args, **kwargs)
    bound.apply_defaults()  # an empty *args too
    frame = dict(bound.arguments)
    frame.update({name: cell.cell_contents for name, cell in zip(function.__code__.co_freevars,
                                                                  function.__closure__ or ())})
    guards = entries[0].guard_manager
    with torch.no_grad():  # as generate calls it
        if not guards.check(frame):
            return None
        times = []
        for _ in range(checks):
            start = time.perf_counter_ns()
            guards.check(frame)
            times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def phases(generate, tokens, repeats, decode_calls):
    """Milliseconds per token of a compiled generate (the medians of `repeats` runs), each rank's:
    the total; inside the neuron programs (NeuronProgramCode.__call__, our backend's call of a
    compiled graph: its kernels, and under TP the all-reduces in it, the wait for the other ranks
    included); around them in the decode step's calls (Dynamo's guards, AOTAutograd's wrappers);
    and generate's own host work (transformers' Python and eager ops, the prefill included).
    Tensor parallelism divides only the programs' kernels. Then the last program called alone,
    `alone` ms a call (the median of 5 rounds of 100 calls, the ranks starting each round together;
    its integer inputs reset before each call): the program with no host work between calls. Rank 0
    prints them, with the process's intra-op threads (torch.get_num_threads())."""
    from torch_neuron_sim.compile.backend import NeuronProgramCode
    inside, last, keep_last = [0.0], [], [False]
    call = NeuronProgramCode.__call__

    def copied(args):  # a boxed call's list is emptied by the call
        return [list(a) if isinstance(a, list) else a for a in args]

    def timed(self, *args):
        if keep_last[0]:  # outside the timed runs: the copies would count as host work
            # the last call's arguments, and its integer inputs' values (generate advances the
            # cache position in place)
            kept = copied(args)
            flat = [t for a in kept for t in (a if isinstance(a, list) else [a])]
            last[:] = [self, kept, [(t, t.clone()) for t in flat
                                    if isinstance(t, torch.Tensor) and not t.is_floating_point()]]
        start = time.perf_counter()
        try:
            return call(self, *args)
        finally:
            inside[0] += time.perf_counter() - start

    NeuronProgramCode.__call__ = timed
    profiled = os.environ.get("NEURON_SIM_PROGRAM_PROFILE") == "1"
    if profiled:
        torch_neuronx._sim._C.program_profile(reset=True)
    totals, programs, decodes = [], [], []
    for _ in range(repeats):
        inside[0], decode_calls.seconds = 0.0, 0.0
        start = time.perf_counter()
        generate()
        totals.append((time.perf_counter() - start) * 1e3 / tokens)
        programs.append(inside[0] * 1e3 / tokens)
        decodes.append(decode_calls.seconds * 1e3 / tokens)
    mine = {"total": statistics.median(totals), "programs": statistics.median(programs),
            "host": statistics.median(t - p for t, p in zip(totals, programs)),
            "around": statistics.median(d - p for d, p in zip(decodes, programs)),
            "generate": statistics.median(t - d for t, d in zip(totals, decodes)),
            "threads": torch.get_num_threads()}
    if profiled:  # the programs' steps by kind (NEURON_SIM_PROGRAM_PROFILE=1 times each), ms per token
        steps = {}
        for op, _, seconds in torch_neuronx._sim._C.program_profile():
            kind = ("collectives" if op.startswith("_c10d_functional::") else
                    "matmuls" if op in ("aten::mm", "aten::addmm", "aten::bmm") else "other steps")
            steps[kind] = steps.get(kind, 0.0) + seconds * 1e3 / (repeats * tokens)
        mine["steps"] = steps
    keep_last[0] = True
    generate()  # untimed: keeps its last program call's arguments
    NeuronProgramCode.__call__ = call
    rounds = []
    with torch.no_grad():
        for _ in range(5):
            if dist.is_initialized():
                dist.barrier()
            start = time.perf_counter()
            for _ in range(100):
                for tensor, value in last[2]:
                    tensor.copy_(value)
                call(last[0], *copied(last[1]))
            rounds.append((time.perf_counter() - start) * 1e3 / 100)
    mine["alone"] = statistics.median(rounds)
    print_every_rank("phases", mine)


def print_every_rank(key, mine):
    """Rank 0 prints {key: [every rank's `mine`]} (one process: [mine]); the group then ends."""
    ranks = [mine]
    if dist.is_initialized():
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(json.dumps({key: ranks}))
    if dist.is_initialized():
        dist.destroy_process_group()


def breakdown(generate, tokens):
    """Milliseconds per token of each group (Breakdown), every rank's; rank 0 prints them."""
    generate()
    parts = Breakdown()
    parts.install()
    generate()  # a warm-up through the wrappers
    parts.times.clear()
    start = time.perf_counter()
    generate()
    total = time.perf_counter() - start
    mine = {group: seconds * 1e3 / tokens for group, seconds in parts.times.items()}
    mine["rest"] = total * 1e3 / tokens - sum(mine.values())
    mine["total"] = total * 1e3 / tokens
    print_every_rank("ms_per_token", mine)


if __name__ == "__main__":
    main()
