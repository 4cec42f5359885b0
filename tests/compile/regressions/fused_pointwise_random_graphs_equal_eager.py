"""Review 25 finding 1: random pointwise graphs with fan-out (diamonds, chains, bfloat16 and
float32, Python scalars), compiled by the neuron backend, equal eager bit for bit. A fused
bfloat16 add/sub kept its Python scalar in float where ATen rounds it to bfloat16 first."""
import random
import sys
import warnings

import torch
import torch_neuronx  # noqa: F401

warnings.simplefilter("ignore")
OPS = ["add", "sub", "mul", "neg", "rsqrt", "square", "to_bf16", "to_f32", "where", "add_s", "sub_s", "mul_s"]


def source(seed, n_inputs=3, n_nodes=14):
    rng = random.Random(seed)
    lines, names = [], [f"i{k}" for k in range(n_inputs)]
    for k in range(n_nodes):
        def pick():
            return rng.choice(names[-6:]) if rng.random() < 0.7 else rng.choice(names)
        a, b = pick(), pick()
        expr = {"add": f"{a} + {b}", "sub": f"{a} - {b}", "mul": f"{a} * {b}", "neg": f"-{a}",
                "rsqrt": f"torch.rsqrt({a}.float().abs() + 1)", "square": f"{a} ** 2",
                "to_bf16": f"{a}.to(torch.bfloat16)", "to_f32": f"{a}.to(torch.float32)",
                "where": f"torch.where({a} > 0, {a}, {b})", "add_s": f"{a} + 0.37", "sub_s": f"{a} - 1e-5",
                "mul_s": f"{a} * 1.9"}[rng.choice(OPS)]
        lines.append(f"    v{k} = {expr}")
        names.append(f"v{k}")
    outs = sorted({names[-1], rng.choice(names[n_inputs:]), rng.choice(names[n_inputs:])})
    return f"def f({', '.join(names[:n_inputs])}):\n" + "\n".join(lines) + f"\n    return ({', '.join(outs)},)\n"


bad = []
for seed in range(32):
    scope = {"torch": torch}
    exec(source(seed), scope)
    g = torch.Generator().manual_seed(seed)
    args = [torch.randn(33, 65, generator=g).to(dt) for dt in (torch.float32, torch.bfloat16, torch.float32)]
    expected = scope["f"](*args)
    torch._dynamo.reset()
    got = torch.compile(scope["f"], backend="neuron")(*[a.to("neuron") for a in args])
    for k, (e, o) in enumerate(zip(expected, got)):
        if not torch.equal(e, o.cpu()):
            bad.append((seed, k, int((e != o.cpu()).sum())))
if bad:
    print("compiled differs from eager (seed, output, elements):", bad)
    sys.exit(1)
print("32 random graphs: compiled equals eager")
