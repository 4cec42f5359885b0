import textwrap
import threading

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
