"""Where PyTorch reads a device module generically: a static survey of the installed torch.

PyTorch reaches the module of an accelerator (torch.cuda, torch.xpu, ... and ours, torch.neuron)
by the device's type, not by name: `torch.get_device_module(device)`, `torch._utils.
_get_device_module(type)`, `getattr(torch, device.type)`, DeviceMesh's `_get_device_handle`,
FSDP's device handle (which forwards every attribute to the module). Every attribute such code
reads is part of the contract a device module must answer as torch.cuda does: activation
checkpointing stashes a device's RNG state only when `getattr(module, "_initialized", False)`
is true, so a missing attribute silently changes what a feature does.

`survey(torch_root)` parses every source file of torch (its own tests, `torch/testing`, left
out) and returns {attribute: sorted list of "path:line"} for each read of an attribute on such a
module: `module.attr`, `getattr(module, "attr", ...)`, `hasattr(module, "attr")`. A module is:
- the value of a call to one of GETTERS, or of `getattr(torch, <not a constant>, ...)`
  (either branch of a conditional expression counts);
- a name assigned from one, in the same function (or module level), or an attribute of `self`
  assigned from one in any method of the same class;
- a name or attribute called as in HANDLE_NAMES (parameters and fields that hold a module by
  convention in PyTorch's code: `device_handle`, `device_module`, FSDP's `_device_handle`);
- the parameter of a lambda passed to `_get_device_attr` (torch/_utils.py).

Run as a script, it prints the survey: python tests/device/device_module_survey.py
"""
from __future__ import annotations

import ast
import os
import re
import sys

# Functions whose result is a device module.
GETTERS = {"get_device_module", "_get_device_module", "_get_device_handle"}
# Names (variables, parameters, fields) that hold a device module in PyTorch's code.
HANDLE_NAMES = re.compile(r"^_*(device_module|device_mod|device_handle|custom_device_mod|"
                          r"privateuse1_backend_module|custom_backend_module)$")
# getattr(torch, <expression>) is a device module when the expression names a device or backend
# (device.type, device_type, custom_backend_name, ...), not a dtype or an op.
DEVICE_WORDS = re.compile(r"device|backend", re.IGNORECASE)
# Parts of torch that are not run by users' programs.
SKIPPED_DIRS = ("testing",)


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_torch(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "torch"


class _Scope:
    def __init__(self, names=()):
        self.names = set(names)


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, found: dict[str, set[str]]):
        self.path = path
        self.found = found
        self.scopes = [_Scope()]
        self.class_fields: list[set[str]] = [set()]
        self.constants: dict[str, str] = {}

    # -- what is a device module ----------------------------------------------------------
    def is_module(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            name = _called_name(node)
            if name in GETTERS:
                return True
            if (name == "getattr" and isinstance(node.func, ast.Name) and len(node.args) >= 2
                    and _is_torch(node.args[0]) and not isinstance(node.args[1], ast.Constant)
                    and DEVICE_WORDS.search(ast.unparse(node.args[1]))):
                return True
            return False
        if isinstance(node, ast.IfExp):
            return self.is_module(node.body) or self.is_module(node.orelse)
        if isinstance(node, ast.Name):
            return bool(HANDLE_NAMES.match(node.id)) or any(node.id in s.names for s in self.scopes[-1:])
        if isinstance(node, ast.Attribute):
            if HANDLE_NAMES.match(node.attr):
                return True
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return node.attr in self.class_fields[-1]
        return False

    def module_path(self, node: ast.AST) -> str | None:
        """'' for a device module, 'a.b' for module.a.b, None for anything else."""
        if self.is_module(node):
            return ""
        if isinstance(node, ast.Attribute):
            inner = self.module_path(node.value)
            if inner is not None and not inner.startswith("__"):  # module.__name__.rsplit: one read, __name__
                return f"{inner}.{node.attr}" if inner else node.attr
        return None

    def constant_texts(self, node: ast.AST) -> tuple[str, ...]:
        """The strings an expression may be: a string constant, a list or tuple of them, or a
        name bound to one of those; () for anything else."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return (node.value,)
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            return tuple(e.value for e in node.elts)
        if isinstance(node, ast.Name):
            return self.constants.get(node.id, ())
        return ()

    def record(self, attr: str, node: ast.AST):
        self.found.setdefault(attr, set()).add(f"{self.path}:{node.lineno}")

    # -- scopes ---------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef):
        fields: set[str] = set()
        # self.<field> = <module> anywhere in the class's methods
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self" and self.is_module(sub.value)):
                        fields.add(target.attr)
        self.class_fields.append(fields)
        self.generic_visit(node)
        self.class_fields.pop()

    def _function(self, node):
        names = set()
        saved_constants = dict(self.constants)
        # string constants bound in the function (_bad_fork_name = "_is_in_bad_fork"; getattr(m, _bad_fork_name)),
        # lists of them and loop variables over those (for func in necessary_funcs: hasattr(m, func))
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                texts = self.constant_texts(sub.value)
                for target in sub.targets:
                    if texts and isinstance(target, ast.Name):
                        self.constants[target.id] = texts
            elif isinstance(sub, ast.For) and isinstance(sub.target, ast.Name):
                texts = self.constant_texts(sub.iter)
                if texts:
                    self.constants[sub.target.id] = texts
        for sub in ast.walk(node):
            targets = []
            if isinstance(sub, ast.Assign):
                targets, value = sub.targets, sub.value
            elif isinstance(sub, (ast.AnnAssign, ast.NamedExpr)) and sub.value is not None:
                targets, value = [sub.target], sub.value
            for target in targets:
                if isinstance(target, ast.Name) and self.is_module(value):
                    names.add(target.id)
        self.scopes.append(_Scope(names))
        self.generic_visit(node)
        self.scopes.pop()
        self.constants = saved_constants

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Module(self, node: ast.Module):
        # module-level string constants (getattr(module, NAME) with NAME = "current_device")
        self._function(node)

    # -- reads ----------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute):
        if isinstance(node.ctx, ast.Load):
            path = self.module_path(node)
            if path:
                # the longest chain only: module.a.b is one read, "a.b"
                self.record(path, node)
                return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call):
        name = _called_name(node)
        if isinstance(node.func, ast.Name) and name in ("getattr", "hasattr") and len(node.args) >= 2:
            path = self.module_path(node.args[0])
            if path is not None:
                for attr in self.constant_texts(node.args[1]):
                    self.record(f"{path}.{attr}" if path else attr, node)
        if name == "_get_custom_mod_func" and node.args:
            # torch.utils.backend_registration: the PrivateUse1 backend's module, by name
            for attr in self.constant_texts(node.args[0]):
                self.record(attr, node)
        if name == "_get_device_attr" and node.args and isinstance(node.args[0], ast.Lambda):
            lam = node.args[0]
            self.scopes.append(_Scope(a.arg for a in lam.args.args))
            self.visit(lam.body)
            self.scopes.pop()
            for arg in node.args[1:]:
                self.visit(arg)
            return
        self.generic_visit(node)


def survey(torch_root: str) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {}
    for folder, dirs, files in os.walk(torch_root):
        rel_folder = os.path.relpath(folder, torch_root)
        dirs[:] = sorted(d for d in dirs if not (rel_folder == "." and d in SKIPPED_DIRS) and d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as fh:
                source = fh.read()
            # cheap filter: a file with none of the markers reads no device module
            if not re.search(r"get_device_module|_get_device_handle|device_handle|device_mod|"
                             r"getattr\(torch,|_get_device_attr|custom_device_mod|backend_module|"
                             r"_get_custom_mod_func", source):
                continue
            tree = ast.parse(source, path)
            rel = "torch/" + os.path.relpath(path, torch_root).replace(os.sep, "/")
            _Visitor(rel, found).visit(tree)
    return {attr: sorted(where, key=_location_key) for attr, where in sorted(found.items())}


def _location_key(location: str):
    path, line = location.rsplit(":", 1)
    return path, int(line)


def torch_root() -> str:
    import importlib.util
    return os.path.dirname(importlib.util.find_spec("torch").origin)


if __name__ == "__main__":
    reads = survey(sys.argv[1] if len(sys.argv) > 1 else torch_root())
    for attr, where in reads.items():
        print(f"{attr:32} {len(where):3}  {where[0]}" + (f" (+{len(where) - 1})" if len(where) > 1 else ""))
    print(f"{len(reads)} attributes", file=sys.stderr)
