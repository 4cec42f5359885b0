"""Smoke test of an installed wheel (make test-wheel): run with the fresh virtual environment's
Python, from outside the repository, with the demo model's folder as the argument. Checks that
the package works where a user installed it: the torch.backends entry point registers "neuron"
without any import of ours, torch_neuronx imports from site-packages, the neuron-migrate
command runs, and a tiny greedy generate on neuron gives the CPU's tokens."""
import os
import subprocess
import sys

model_path = sys.argv[1]
bin_dir = os.path.dirname(sys.executable)
site = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      capture_output=True, text=True, check=True).stdout.strip()


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""))
    if not ok:
        sys.exit(1)


autoload = subprocess.run([sys.executable, "-c", "import torch; t = torch.ones(2, device='neuron') * 2; "
                           "print(t.device, t.cpu().tolist())"], capture_output=True, text=True)
check("autoload registers 'neuron' (import torch only)", autoload.returncode == 0
      and autoload.stdout.strip() == "neuron:0 [2.0, 2.0]", (autoload.stdout + autoload.stderr).strip()[-500:])

import torch  # noqa: E402
import torch_neuronx  # noqa: E402

check("torch_neuronx imports from the environment's site-packages",
      os.path.realpath(torch_neuronx.__file__).startswith(os.path.realpath(site)), torch_neuronx.__file__)
check("torch.neuron is available", torch.neuron.is_available() and torch.neuron.device_count() > 0)

cli = subprocess.run([os.path.join(bin_dir, "neuron-migrate"), "--help"], capture_output=True, text=True)
check("neuron-migrate --help", cli.returncode == 0 and "run" in cli.stdout,
      "" if cli.returncode == 0 else (cli.stdout + cli.stderr)[-300:])

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(model_path)
tokens = {}
for device in ("cpu", "neuron"):
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16, device_map=device)
    inputs = tok("The list data type has", return_tensors="pt").to(device)
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    tokens[device] = out[0].cpu().tolist()
check("tiny greedy generate on neuron equals CPU", tokens["neuron"] == tokens["cpu"],
      repr(tok.decode(tokens["neuron"])))
print("wheel smoke test passed")
