"""predict(loop="generate") calls torch.manual_seed(0) (to build the stand-in) and draws on the
device, and leaves the process's random state changed: a script that seeds, predicts, then draws
gets other numbers than without the prediction. loop='forward' leaves the random state as it was."""
import os  # noqa: E402
import sys
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import torch  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

config = transformers.AutoConfig.for_model("llama", **CONFIGS["llama"])
failures = []
for loop in ("forward", "generate"):
    torch.manual_seed(1234)
    expected = (torch.rand(4), torch.rand(4, device="neuron").cpu())
    torch.manual_seed(1234)
    dry_run.predict(config, "trn2", input_tokens=3, output_tokens=2, mode="eager", loop=loop)
    got = (torch.rand(4), torch.rand(4, device="neuron").cpu())
    same = [torch.equal(a, b) for a, b in zip(expected, got)]
    print(loop, "CPU generator kept:", same[0], "device generator kept:", same[1])
    if not all(same):
        failures.append(f"loop={loop!r} changed the random state (cpu kept {same[0]}, neuron kept {same[1]})")
for f in failures:
    print("FAIL", f)
assert not failures
