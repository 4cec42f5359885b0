"""neuron-migrate uses public APIs only: it never imports the simulator's internals, so the
same tool runs on a real Trainium, a GPU or the CPU."""
import ast
import os
import subprocess
import sys

from migrate_helpers import ROOT

PACKAGE = os.path.join(ROOT, "python", "neuron_migrate")


# The simulator's one public module the tool may use, and where: the dry run (issue 25 §2) that
# predicts a model of any size from its config; nothing else of torch_neuron_sim, never its _C.
ALLOWED_SIMULATOR = {"torch_neuron_sim.dry_run": "predict.py"}


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
                    [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
                for module in modules:
                    if module.split(".")[0] == "torch_neuron_sim":
                        assert ALLOWED_SIMULATOR.get(module) == name, f"{path}:{node.lineno} imports {module}"


def test_fit_runs_without_the_neuron_device():
    # with the device autoload off and torch_neuronx unimportable, the CPU-only parts still work
    code = ("import sys; sys.modules['torch_neuronx'] = None; sys.modules['torch_neuron_sim'] = None\n"
            "from neuron_migrate.cli import main\n"
            f"raise SystemExit(main(['fit', {os.path.join(ROOT, 'demo', 'model')!r}, '--platform', 'trn2', '--json']))")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=os.path.join(ROOT, "python"),
               HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert '"smallest_fitting_tp"' in result.stdout


# Private names of torch / transformers the tool may use, each because no public one does the job.
ALLOWED_PRIVATE = {
    "torch.utils._python_dispatch": "TorchDispatchMode, the op census (no public alias)",
    "torch.utils._pytree": "tree_flatten of op arguments (no public torch.utils.pytree in 2.13)",
    "torch._dynamo": "imported for torch._dynamo.config (read only)",
    "torch._dynamo.config": "recompile_limit, read for the report",
    "torch._dynamo.backends.registry": "lookup_backend: wrap the named backend to count its graphs",
    "torch._dynamo.utils": "counters: graph breaks (no public counter)",
    "torch._logging.set_logs": "the documented switch for Dynamo's recompile reasons",
    "torch._inductor": "imported for list_mode_options",
    "torch._inductor.list_mode_options": "the options torch.compile(mode=...) gives Inductor (the counting wrapper "
                                         "calls Inductor itself, so it applies them)",
}


def _private_uses(tree):
    """Dotted names rooted in torch / transformers / torch_neuronx with a private component."""
    roots = {"torch", "transformers", "torch_neuronx"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
            roots |= {alias.asname or alias.name for alias in node.names}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Attribute) and not isinstance(parents.get(node), ast.Attribute):
            names = [ast.unparse(node)]
        for name in names:
            parts = name.split(".")
            if parts[0] in roots and any(p.startswith("_") and not p.startswith("__") for p in parts):
                yield name, node.lineno


def test_private_torch_and_transformers_names_only_where_no_public_one_exists():
    found = []
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as handle:
                    found += [f"{name}:{line} {used}" for used, line in _private_uses(ast.parse(handle.read()))
                              if used not in ALLOWED_PRIVATE]
    # e.g. torch._dynamo.reset() (public: torch.compiler.reset()), AutoModelForCausalLM._model_mapping
    # (public: transformers.MODEL_FOR_CAUSAL_LM_MAPPING)
    assert found == []
