"""Review of issue 39, finding 6 (older code, passes.seeded_ops_take_a_generator; relevant to "CPU+neuron generators"):
a CPU random op inside a compiled neuron graph (torch.rand(4) on the CPU, then .to("neuron")) is given
the *neuron* generator: the compiled run advances torch.neuron's generator and not the CPU one, and
its numbers differ from eager's. So compiled and compiled+checkpoint runs of a region that mixes CPU
and neuron randomness do not match eager.
Expected: same numbers as eager, CPU generator advanced, neuron generator untouched (PASS)."""
import sys, warnings
import torch, torch_neuronx  # noqa: F401
warnings.simplefilter("ignore")


def f(x):
    return x + torch.rand(4).to("neuron")


results = []
for fn in (f, torch.compile(f, backend="neuron")):
    x = torch.zeros(4, device="neuron")
    fn(x)  # compile
    torch.manual_seed(0)
    cpu0, neuron0 = torch.get_rng_state(), torch.neuron.get_rng_state()
    out = fn(x).cpu()
    results.append((out, not torch.equal(cpu0, torch.get_rng_state()), not torch.equal(neuron0, torch.neuron.get_rng_state())))
for name, (out, cpu_moved, neuron_moved) in zip(("eager", "compiled"), results):
    print(f"{name:9s} {out.tolist()}  CPU generator advanced: {cpu_moved}  neuron generator advanced: {neuron_moved}")
ok = torch.equal(results[0][0], results[1][0]) and results[1][1] and not results[1][2]
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
