"""Runs a child script as 2 ranks of the "neuron" process group; returns [(returncode or 'hung', output)]."""
import os
import socket
import subprocess
import sys


def run(child, args=(), limit=60, python=None):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", PYTHONFAULTHANDLER="1")
    python = python or sys.executable
    procs = [subprocess.Popen([python, "-c", child, *args], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    results = []
    for p in procs:
        try:
            out = p.communicate(timeout=limit)[0]
            results.append((p.returncode, out))
        except subprocess.TimeoutExpired:
            p.kill()
            results.append(("hung", p.communicate()[0]))
    return results


def control_then_test(child, control, test, control_name="control", tail=3, limit=60):
    """Runs `child` on 2 ranks with argument `control`, then `test`; the exit code of a review
    repro: 2 when the control failed (the test cannot tell), 1 when the test failed, else 0."""
    ok = True
    for mode in (control, test):
        for rank, (code, out) in enumerate(run(child, [mode], limit=limit)):
            print(f"[{mode}] rank {rank}: exit {code}: {out.strip().splitlines()[-tail:]}")
            if code != 0:
                if mode == control:
                    print(f"{control_name} failed: the test cannot tell")
                    return 2
                ok = False
    return 0 if ok else 1
