import textwrap
import threading

import pytest

import torch

from conftest import run_python


def test_many_python_threads_use_one_device():
    errors = []

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            a = torch.randn(64, 64, generator=g)
            n = a.to("neuron")
            for _ in range(50):
                r = (n @ n).relu().sum(dim=0)
            torch.testing.assert_close(r.cpu(), (a @ a).relu().sum(dim=0))
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


def test_forked_child_after_parent_initialised_gets_clear_error():
    code = textwrap.dedent("""
        import os, torch, torch_neuronx
        torch.ones(2, device="neuron")
        pid = os.fork()
        if pid == 0:
            try:
                torch.ones(2, device="neuron")
                os._exit(1)
            except RuntimeError as e:
                os._exit(0 if "forked subprocess" in str(e) and "spawn" in str(e) else 2)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        print("parent still works", torch.ones(2, device="neuron").sum().item())
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "child exit 0" in result.stdout
    assert "parent still works 2.0" in result.stdout


def test_forked_child_may_free_inherited_tensors_and_run_cpu_convolutions():
    # review item 2: every deleter called Runtime::get(), which throws in a forked child
    code = textwrap.dedent("""
        import os, torch, torch_neuronx
        t = torch.ones(1000, device="neuron")
        pid = os.fork()
        if pid == 0:
            del t                                                   # an inherited neuron tensor
            torch.nn.functional.conv2d(torch.randn(8, 16, 32, 32), torch.randn(32, 16, 3, 3))  # oneDNN raw frees
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child exit status:", os.waitstatus_to_exitcode(status))
        print("parent:", (t * 2).sum().item())
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "child exit status: 0" in result.stdout and "parent: 2000.0" in result.stdout


def test_dataloader_fork_workers_run_cpu_convolutions_while_the_parent_trains_on_neuron():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        from torch.utils.data import DataLoader, Dataset

        class Images(Dataset):
            conv = torch.nn.Conv2d(3, 4, 3, padding=1)          # CPU work in the workers
            def __len__(self):
                return 16
            def __getitem__(self, i):
                with torch.no_grad():
                    x = self.conv(torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(i)))
                return x[0], i % 2

        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 16 * 16, 2)).to("neuron")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = DataLoader(Images(), batch_size=4, num_workers=2, multiprocessing_context="fork")
        losses = []
        for epoch in range(2):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.to("neuron")), y.to("neuron"))
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                losses.append(loss.item())
        print("steps", len(losses), "finite", all(l == l for l in losses))
    """)
    result = run_python(code, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "steps 8 finite True" in result.stdout


def test_forked_children_free_inherited_pinned_tensors_while_the_parent_pins():
    # review 7, item 4: the child took the pinned allocator's lock, which a parent thread
    # could hold at fork(): the child hung
    code = textwrap.dedent("""
        import os, threading, time, torch, torch_neuronx
        torch.ones(1, device="neuron")
        keep = torch.ones(1024).pin_memory()
        stop = False
        def pinner():
            while not stop:
                torch.empty(4096).pin_memory()
        threads = [threading.Thread(target=pinner) for _ in range(2)]
        for t in threads: t.start()
        hung = 0
        for trial in range(150):
            pid = os.fork()
            if pid == 0:
                del keep
                os._exit(0)
            deadline = time.time() + 2
            while time.time() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.005)
            else:
                hung += 1
                os.kill(pid, 9); os.waitpid(pid, 0)
        stop = True
        for t in threads: t.join()
        print("hung", hung)
    """)
    result = run_python(code, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "hung 0" in result.stdout


# Note [The autograd device thread at exit] (csrc/ExitQuiesce.cpp): the backward of a neuron
# tensor ends on autograd's device thread, which may still be dropping the backward's Python
# context when the script ends. Pinned to one core, the script's main thread runs on into the
# interpreter's finalization before the device thread gets the core back: without the atexit
# flush, 19 of 20 such processes aborted ("terminate called without an active exception").
_BACKWARD_THEN_EXIT = textwrap.dedent("""
    import atexit, os, sys
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before torch starts its threads
    import torch, torch_neuronx, torch_neuron_sim
    if sys.argv[1] == "without-flush":
        atexit.unregister(torch_neuron_sim._C._quiesce_for_exit)
    x = torch.ones(4, device="neuron", requires_grad=True)
    (x * 2).sum().backward()
""")


def _backward_then_exit(mode, runs):
    return [run_python(_BACKWARD_THEN_EXIT.replace("sys.argv[1]", repr(mode))) for _ in range(runs)]


def test_a_script_ending_right_after_a_backward_exits_cleanly():
    for result in _backward_then_exit("with-flush", 5):
        assert result.returncode == 0, result.stderr[-2000:]


def test_the_exit_race_is_real_without_the_flush():
    """The test above can fail: without the flush, the same script aborts (about 19 runs in 20
    on this pinned torch on an idle machine, 10 in 12 by hand today). Under the test suite's
    load fewer runs abort (5 of 5 once passed: the other worker shares the pinned core), so
    this runs up to 20 and stops at the first abort. Whether the race shows depends on the
    machine's scheduler: on 2026-12-03 an idle machine of this kind ran 20 of 20 to a clean exit
    without the flush, so 20 clean runs skip (naming them) rather than fail; a run that fails any
    other way fails the test."""
    codes = []
    for _ in range(20):
        (result,) = _backward_then_exit("without-flush", 1)
        codes.append(result.returncode)
        if result.returncode != 0 and "terminate called" in result.stderr:
            return
        assert result.returncode == 0, f"failed otherwise than the exit race: {result.stderr[-2000:]}"
    pytest.skip(f"the exit race did not show on this machine in 20 runs without the flush (exit codes {codes}): "
                "it depends on how the scheduler runs the two threads on one core")
