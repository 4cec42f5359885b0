"""The same behaviour with asynchronous streams (NEURON_LAUNCH_BLOCKING=0): hot ops are
enqueued on the current stream and the host syncs on reads."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_feature_suites_pass_in_asynchronous_mode():
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING="0")
    suites = ["test_ops.py", "test_autograd_amp.py", "test_memory.py", "test_rng.py",
              "test_threads_fork.py", "test_generate.py::test_forward_logits_match_cpu"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *[os.path.join(HERE, s) for s in suites], "-k", "llama or not generate"],
        env=env, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_hot_ops_run_on_the_stream_thread():
    code = (
        "import torch, torch_neuronx\n"
        "x = torch.randn(512, 512, device='neuron')\n"
        "torch.neuron.synchronize()\n"
        "ys = [x @ x for _ in range(20)]\n"          # enqueued, not yet run
        "pending = not torch.neuron.current_stream().query()\n"
        "torch.neuron.synchronize()\n"
        "print(pending, torch.neuron.current_stream().query())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, NEURON_LAUNCH_BLOCKING="0"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
