"""Review 12, finding 4. Since 09e3ce7 torch.compile(backend="neuron") depends on the installed package metadata (the
torch_dynamo_backends entry point of torch_neuron_sim-*.dist-info): `import torch_neuronx` no
longer registers "neuron" with Dynamo. Used from a source tree (PYTHONPATH=<repo>/python, e.g. a
checkout used from another environment that has torch but no `pip install -e .`, or a vendored
copy) the backend is simply not found; before, the import registered it.
This script simulates "not installed": a site-packages view without this package's dist-info and
.pth (symlinks to everything else), python -S, PYTHONPATH=<this package's python folder>.
Expected: [2.0, 2.0] (as before 09e3ce7). Actual: torch._dynamo.exc.InvalidBackend: 'neuron'.
Exit 1 while the bug is present, 0 once fixed."""
import glob
import os
import subprocess
import sys
import sysconfig
import tempfile

import torch_neuron_sim  # noqa: F401  (only to find the package's folder; runs in this env)

site = sysconfig.get_paths()["purelib"]
package_root = os.path.dirname(os.path.dirname(torch_neuron_sim.__file__))
view = tempfile.mkdtemp(prefix="r12_site_")
for entry in glob.glob(os.path.join(site, "*")):
    name = os.path.basename(entry)
    if name.startswith(("torch_neuron_sim-", "__editable__.torch_neuron_sim")):
        continue
    os.symlink(entry, os.path.join(view, name))
code = """
import torch, torch_neuronx
f = torch.compile(lambda x: x * 2, backend="neuron")
print(f(torch.ones(2, device="neuron")).cpu().tolist())
"""
env = dict(os.environ, PYTHONPATH=f"{view}:{package_root}", HF_HUB_OFFLINE="1")
try:
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=300)
finally:
    for name in os.listdir(view):  # symlinks only: unlink them, never what they point to
        os.unlink(os.path.join(view, name))
    os.rmdir(view)
if out.returncode != 0 or out.stdout.strip() != "[2.0, 2.0]":
    print("FAIL:", (out.stderr.strip().splitlines() or ["no output"])[-1])
    sys.exit(1)
print("ok")
