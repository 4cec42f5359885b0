"""Review 8, finding 5 (asynchronous part): a compiled dropout draws from the device's
generator, in program order with the host's draws: with the same seed it gives the same mask
in asynchronous and launch-blocking mode and run after run, and it leaves the CPU's generator
alone (a data loader's next CPU draw is the same with or without the compiled call).
Usage: run without arguments (it runs itself in both modes)."""
import os
import subprocess
import sys

if len(sys.argv) == 1:
    outputs = []
    for mode in ("0", "1", "0"):
        env = dict(os.environ, NEURON_LAUNCH_BLOCKING=mode, TORCH_NEURONX_DISABLE_NEFF_CACHE="1")
        result = subprocess.run([sys.executable, __file__, "child"], env=env, capture_output=True, text=True,
                                timeout=300)
        if result.returncode != 0:
            print(result.stderr[-2000:])
            sys.exit(1)
        outputs.append(result.stdout.strip())
    print(outputs)
    ok = len(set(outputs)) == 1
    print("OK" if ok else "BUG: compiled dropout is not reproducible across modes and runs")
    sys.exit(0 if ok else 1)

import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401

N = torch.device("neuron")
F = torch.nn.functional


def f(a, b):
    for _ in range(6):
        a = (a @ b).tanh()
    return F.dropout(a, 0.5, training=True)


g = torch.compile(f, backend="neuron")
a = torch.randn(256, 256, generator=torch.Generator().manual_seed(1)).to(N) / 30
b = torch.randn(256, 256, generator=torch.Generator().manual_seed(2)).to(N) / 30
g(a, b)
torch.neuron.synchronize()
torch.manual_seed(0)
mask = (g(a, b) == 0)
cpu_next = torch.rand(3)
torch.manual_seed(0)
untouched = torch.rand(3)
assert torch.equal(cpu_next, untouched), "the compiled dropout advanced the CPU generator"
print(int(mask.sum().item()), hash(tuple(mask.flatten()[:4096].cpu().tolist())))
