"""review42: an unwritable VLLM_NEURON_CLOCK_REPORT kills the serving engine at its first step.

Bug: ServingClock.write() runs inside every engine step (NeuronModelRunner.execute_model /
sample_tokens -> ServingClock.end -> write) and lets any OSError out: a report path in a folder
that does not exist (a typo, a folder not yet made), a read-only or full disk. The path is not
checked when the clock is made, so `vllm serve` starts fine and then the first request's step
raises FileNotFoundError out of execute_model: the engine core dies and every request in flight
fails, because of an optional statistics file. (A failed json.dump also leaves its *.tmp file behind:
NamedTemporaryFile(delete=False) with no cleanup.)

Expected: either the bad path is refused when the engine starts (a clear error naming
VLLM_NEURON_CLOCK_REPORT), or a failed report write is logged (once) and serving goes on. This repro
accepts both: it fails only if making the clock succeeds and a step then raises.

Fix: check the folder in ServingClock.__init__ (os.path.isdir / os.access(folder, W_OK)) and raise a
ValueError there; in write(), wrap the dump in try/except OSError: log a warning once and remove the
temporary file.
"""
import sys
import types

import torch
import torch_neuronx  # noqa: F401  (registers the neuron device)

from vllm_neuron_sim.clock import ServingClock

DEV = torch.device("neuron", 0)
S = types.SimpleNamespace


def main():
    path = "/nonexistent-review42-dir/sub/clock.json"
    try:
        clock = ServingClock(DEV, 0, path=path)
    except (ValueError, OSError) as error:
        print(f"ok: refused up front: {error}")
        return
    clock.begin(S(finished_req_ids=set(), total_num_scheduled_tokens=3,
                  scheduled_new_reqs=[S(req_id="a", prompt_token_ids=[1, 2, 3])], num_scheduled_tokens={"a": 3}))
    torch.ones(4, device=DEV).sum().item()  # the step's device work
    try:
        clock.end(S(req_ids=["a"], sampled_token_ids=[[7]]))
    except Exception as error:  # noqa: BLE001
        print(f"FAIL: an engine step raised {type(error).__name__}: {error} (the engine core would die)")
        sys.exit(1)
    print("ok: the step went on")


if __name__ == "__main__":
    main()
