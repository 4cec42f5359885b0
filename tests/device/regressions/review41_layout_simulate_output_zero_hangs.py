"""dry_run.simulate / simulate_rate check the new `lengths` (_check_lengths: whole numbers 1 or
more) but, without lengths, build [(1, output_tokens)] unchecked: output_tokens=0 (or None, the
value the new tests pass when they give lengths) starts a request at 1 token made and
_serve_requests decodes it until tokens_made == 0, which never comes: the call never returns
instead of raising a ValueError. (Present before this change too; the new validation misses it.)"""
import signal
import sys

import torch_neuronx  # noqa: F401
from torch_neuron_sim import dry_run


def hung(*_):
    raise TimeoutError


signal.signal(signal.SIGALRM, hung)
failed = False
for name, call in (("simulate", lambda out: dry_run.simulate(1.0, {1: 1.0}, out, 1, 1)),
                   ("simulate_rate", lambda out: dry_run.simulate_rate(1.0, {1: 1.0}, out, 10.0, 1, 1))):
    for out in (0, None):
        signal.alarm(3)
        try:
            call(out)
            print(f"FAIL {name}(output_tokens={out!r}) returned")
            failed = True
        except ValueError as error:
            print(f"{name}(output_tokens={out!r}): ValueError {error}")
        except TimeoutError:
            print(f"FAIL {name}(output_tokens={out!r}) never returns (stopped after 3 s)")
            failed = True
        except Exception as error:  # noqa: BLE001
            print(f"FAIL {name}(output_tokens={out!r}): {type(error).__name__}: {error}")
            failed = True
        finally:
            signal.alarm(0)
sys.exit(1 if failed else 0)
