"""The repro scripts in distributed/regressions/, each run in its own process that starts 2 or 4
ranks (_two_ranks_spawned.py: a function on 2 ranks; _two_rank_scripts.py: a child script on 2
ranks; _ranks_on_fake_hosts.py: ranks pretending to be on the hosts a layout names); each exits
0 while the behaviour it checks holds. The contracts they guard for the "neuron" process group:
- every Work's future completes without wait(), also for reduce-scatter and point-to-point, and
  a future callback may issue a collective and wait for it (PowerSGD's hook);
- a wait() that timed out fails the Work and leaves no half-finished result (AVG undivided);
- all ranks take the same path for a call (the transport is chosen from facts every rank
  shares) and issue collectives in one order (PowerSGD over several buckets), while
  asynchronous collectives of two groups may be issued in different orders;
- a failed group fails every later call: a late rank never writes into a failed peer's output,
  a failed rank's counter does not run ahead, memory lent to a peer is not reused, a failure
  inside one host reaches the other hosts at once, abort() and the deadline end a step across
  hosts, a group name reused after destroy gets its own store prefix;
- completed works do not pin their tensors; transport threads never wait for the GIL and
  releases do not pile up threads; each group has its own communication stream and
  torch.manual_seed does not wait for collectives;
- a group freed after destroy_process_group, and a process exiting with pending works,
  callbacks, daemon threads in a backward or point-to-point futures in later atexit handlers,
  neither hang nor abort;
- hierarchical collectives give flat values for every host layout, reduce op, dtype and root.
About 3 minutes of launches with deliberate timeouts: they carry `distributed_extra`, so `make
test-distributed` runs them and `make test` does not."""
import os

import pytest

from conftest import regression_scripts, run_regression_script

pytestmark = pytest.mark.distributed_extra

REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")


@pytest.mark.parametrize("script", regression_scripts(REGRESSIONS))
def test_regression_stays_fixed(script, tmp_path):
    run_regression_script(os.path.join(REGRESSIONS, script), tmp_path)
