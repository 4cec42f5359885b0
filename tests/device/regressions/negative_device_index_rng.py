"""Review of issue 39, finding 4: negative device indices are silently taken as "the current core" by the RNG functions.
torch.neuron.get_rng_state(-2) / set_rng_state(state, -5) / _get_generator(...) reach
_C.default_generator(index), which maps any index < 0 to the current device, so a bad index
reads or overwrites the current core's generator instead of failing. torch.cuda.get_rng_state(-2)
raises (torch.device("cuda", -2): "Device index must not be negative"), and torch.neuron's own
get_device_properties(-1) raises an IndexError.
Expected: an error for a negative index (PASS)."""
import sys
import torch, torch_neuronx  # noqa: F401

failed = False
torch.neuron.set_device(1)
torch.neuron.manual_seed_all(0)
before = torch.neuron.get_rng_state(1)
for name, call in [("get_rng_state(-2)", lambda: torch.neuron.get_rng_state(-2)),
                   ("set_rng_state(state, -5)", lambda: torch.neuron.set_rng_state(
                       torch.tensor([9] + [0] * 15, dtype=torch.uint8), -5))]:
    try:
        got = call()
        print(f"{name}: no error (returned {None if got is None else got[:2].tolist()})  [FAIL]")
        failed = True
    except (RuntimeError, ValueError, IndexError) as error:
        print(f"{name}: {type(error).__name__}: {str(error)[:90]}  [ok]")
changed = not torch.equal(torch.neuron.get_rng_state(1), before)
print("current core neuron:1's generator was overwritten by set_rng_state(state, -5):", changed)
failed |= changed
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
