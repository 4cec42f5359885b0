"""Note [Composites on the device]: CostingMode runs an op without a device kernel through
func._op_dk(CompositeExplicitAutograd, ...). For the Scalar overloads whose composite redispatches
to the Tensor overload (remainder.Scalar, fmod.Scalar, bitwise_and.Scalar, ...) that raises
"aten::remainder() Expected a value of type 'Tensor' for argument 'other' but instead found type
'int'": any eager dry run (loop 'forward' too: a model whose forward does `x % n` or `x & 1`) and
the generate loop's costing crash where HEAD~1 costed one launch. generate() with the folder's
num_beams > 1 hits it in its beam bookkeeping (an obscure error, not a prediction and not a
refusal naming num_beams)."""
import os  # noqa: E402
import sys
import tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import torch  # noqa: E402
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

failures = []
ints = torch.arange(12, device="neuron").reshape(3, 4)
floats = torch.randn(3, 4, device="neuron")
for name, fn in [("remainder", lambda i, f: torch.remainder(i, 3)), ("x % 3", lambda i, f: i % 3),
                 ("fmod", lambda i, f: torch.fmod(f, 2)), ("x & 1", lambda i, f: i & 1)]:
    for device in ("neuron", "meta"):
        mode = dry_run.CostingMode("trn2", 2)
        i, f = ints.to(device), floats.to(device)
        try:
            with mode:
                fn(i, f)
            print(f"{name} on {device}: {mode.launches} launch(es)")
        except Exception as e:  # noqa: BLE001
            failures.append(f"CostingMode, {name} on {device}: {type(e).__name__}: {str(e).splitlines()[0]}")

folder = tempfile.mkdtemp(prefix="beams_")
transformers.AutoConfig.for_model("llama", **CONFIGS["llama"]).save_pretrained(folder)
transformers.GenerationConfig(bos_token_id=1, eos_token_id=2, num_beams=3).save_pretrained(folder)
try:
    p = dry_run.predict(folder, "trn2", input_tokens=4, output_tokens=3, mode="eager", loop="generate")
    print("num_beams 3: predicted", p.ttft_ms, p.per_token_ms)
except ValueError as e:
    if "beam" not in str(e):
        failures.append(f"num_beams 3 in generation_config.json: a ValueError that does not name it: {e}")
except Exception as e:  # noqa: BLE001
    failures.append(f"num_beams 3 in generation_config.json: {type(e).__name__}: {str(e).splitlines()[0]}")
for f in failures:
    print("FAIL", f)
assert not failures
