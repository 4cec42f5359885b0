"""neuron-migrate uses public APIs only: it never imports the simulator's internals, so the
same tool runs on a real Trainium, a GPU or the CPU."""
import ast
import os
import subprocess
import sys

from migrate_helpers import HERE

PACKAGE = os.path.join(HERE, "..", "python", "neuron_migrate")


def test_no_module_imports_the_simulator():
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(m.split(".")[0] == "torch_neuron_sim" for m in modules), f"{path}:{node.lineno}"


def test_fit_runs_without_the_neuron_device():
    # with the device autoload off and torch_neuronx unimportable, the CPU-only parts still work
    code = ("import sys; sys.modules['torch_neuronx'] = None; sys.modules['torch_neuron_sim'] = None\n"
            "from neuron_migrate.cli import main\n"
            f"raise SystemExit(main(['fit', {os.path.join(HERE, '..', 'demo', 'model')!r}, '--platform', 'trn2', '--json']))")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=os.path.join(HERE, "..", "python"),
               HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert '"smallest_fitting_tp"' in result.stdout
