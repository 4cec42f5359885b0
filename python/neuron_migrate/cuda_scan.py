"""Will it run? CUDA-only code in the user's scripts, found by reading their syntax tree
(nothing is executed): each finding has the file, line, the code and the suggested change."""
import ast
import re
import tokenize

CUDA_COMPILE_MODES = {"max-autotune", "reduce-overhead", "max-autotune-no-cudagraphs"}
CUDA_ONLY_BACKENDS = {"inductor", "cudagraphs", "tensorrt", "torch_tensorrt"}
CUDA_ONLY_PACKAGES = {
    "apex": "use torch.optim / torch.nn equivalents (fused AdamW: torch.optim.AdamW(fused=True))",
    "flash_attn": "use torch.nn.functional.scaled_dot_product_attention (TorchNeuron runs SDPA fused)",
    "xformers": "use torch.nn.functional.scaled_dot_product_attention",
    "bitsandbytes": "no Neuron build; keep bf16 weights or quantize with a Neuron-supported format",
    "triton": "Triton kernels do not run on Neuron; write the kernel with NKI (torch_neuronx.nki_op)",
    "pynvml": "NVIDIA management library; use neuron-top / neuron-monitor for device telemetry",
    "cupy": "CUDA arrays; use torch tensors on device 'neuron'",
    "nvidia": "NVIDIA package; find a Neuron or device-neutral equivalent",
}
# torch.cuda.<name> -> suggested replacement
CUDA_API = {
    "is_available": "torch.neuron.is_available() (or torch.accelerator.is_available())",
    "device_count": "torch.neuron.device_count()",
    "current_device": "torch.neuron.current_device()",
    "set_device": "torch.neuron.set_device(...)",
    "synchronize": "torch.neuron.synchronize()",
    "manual_seed": "torch.neuron.manual_seed(...)",
    "manual_seed_all": "torch.neuron.manual_seed_all(...)",
    "empty_cache": "torch.neuron.empty_cache()",
    "memory_allocated": "torch.neuron.memory_allocated()",
    "max_memory_allocated": "torch.neuron.max_memory_allocated()",
    "memory_reserved": "torch.neuron.memory_reserved()",
    "reset_peak_memory_stats": "torch.neuron.reset_peak_memory_stats()",
    "Stream": "torch.neuron.Stream", "Event": "torch.neuron.Event", "stream": "torch.neuron.stream(...)",
    "amp": "torch.autocast('neuron', dtype=torch.bfloat16) and torch.amp.GradScaler('neuron')",
    "CUDAGraph": "remove: TorchNeuron has no CUDA-graph equivalent; torch.compile(backend='neuron') "
                 "compiles the whole graph",
    "graph": "remove: TorchNeuron has no CUDA-graph equivalent",
    "make_graphed_callables": "remove: TorchNeuron has no CUDA-graph equivalent",
    "nvtx": "torch.profiler.record_function(...) (device-neutral ranges)",
    "get_device_name": "torch.neuron.get_device_name()",
    "get_device_properties": "torch.neuron.get_device_properties()",
}


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_cuda_string(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) \
        and (node.value == "cuda" or node.value.startswith("cuda:"))


class _Scanner(ast.NodeVisitor):
    def __init__(self, path, lines):
        self.path, self.lines, self.findings = path, lines, []
        self.torch_names = {"torch"}  # names bound to the torch module
        self.cuda_names = set()  # names bound to torch.cuda
        self.seen_strings = set()

    def add(self, node, kind, message, suggestion, at=None):
        """`at`: (line, 0-based column) where the finding is, when not where `node` starts."""
        line, column = at or (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        self.findings.append({"file": self.path, "line": line, "column": column + 1,
                              "code": self.lines[line - 1].strip() if 0 < line <= len(self.lines) else "",
                              "kind": kind, "message": message, "suggestion": suggestion})

    def visit_Import(self, node):
        for alias in node.names:
            root = alias.name.split(".")[0]
            if alias.name == "torch":
                self.torch_names.add(alias.asname or "torch")
            if alias.name == "torch.cuda" and alias.asname:
                self.cuda_names.add(alias.asname)
            if root in CUDA_ONLY_PACKAGES:
                self.add(node, "cuda-only package", f"imports {alias.name}", CUDA_ONLY_PACKAGES[root])

    def visit_ImportFrom(self, node):
        module = node.module or ""
        root = module.split(".")[0]
        if module == "torch":
            for alias in node.names:
                if alias.name == "cuda":
                    self.cuda_names.add(alias.asname or "cuda")
        if module.startswith("torch.cuda"):
            self.add(node, "torch.cuda API", f"imports from {module}", "import from torch.neuron / torch.amp instead")
        if root in CUDA_ONLY_PACKAGES:
            self.add(node, "cuda-only package", f"imports from {module}", CUDA_ONLY_PACKAGES[root])

    def _cuda_attribute(self, node):
        """For torch.cuda.X (or an alias of torch.cuda): X, else None."""
        name = _dotted(node)
        if not name:
            return None
        parts = name.split(".")
        if len(parts) >= 3 and parts[0] in self.torch_names and parts[1] == "cuda":
            return parts[2]
        if len(parts) >= 2 and parts[0] in self.cuda_names:
            return parts[1]
        if len(parts) >= 3 and parts[0] in self.torch_names and parts[1] == "backends" and parts[2] in ("cuda", "cudnn"):
            return "backends." + parts[2]
        return None

    def visit_Attribute(self, node):
        attribute = self._cuda_attribute(node)
        if attribute is not None:
            if attribute.startswith("backends."):
                self.add(node, "torch.backends (CUDA)", f"uses torch.{attribute}",
                         "remove: CUDA/cuDNN backend flags have no effect on Neuron")
            else:
                suggestion = CUDA_API.get(attribute, f"torch.neuron.{attribute} if it exists, "
                                                     "else a device-neutral torch.accelerator call")
                self.add(node, "torch.cuda API", f"uses torch.cuda.{attribute}", suggestion)
            return  # one finding per chain: its inner attributes are not visited
        self.generic_visit(node)

    def visit_Call(self, node):
        function = node.func
        name = _dotted(function) or ""
        if isinstance(function, ast.Attribute) and function.attr == "cuda" and self._cuda_attribute(function) is None:
            self.add(node, ".cuda()", "moves a tensor or module with .cuda()",
                     "replace .cuda() with .to(device), device = torch.device('neuron')",
                     at=(function.end_lineno, function.end_col_offset - len("cuda")))  # not where the chain starts
        if name.endswith("compile") and name.split(".")[0] in self.torch_names | {"compile"}:
            self._check_compile(node)
        if name.endswith("init_process_group"):
            for keyword in node.keywords:
                if keyword.arg == "backend" and isinstance(keyword.value, ast.Constant) and keyword.value.value == "nccl":
                    self.add(keyword.value, "nccl backend", "init_process_group(backend='nccl')",
                             "backend='neuron'")
                    self.seen_strings.add(id(keyword.value))
            for argument in node.args[:1]:
                if isinstance(argument, ast.Constant) and argument.value == "nccl":
                    self.add(argument, "nccl backend", "init_process_group('nccl')", "backend='neuron'")
        self.generic_visit(node)

    def _check_compile(self, node):
        for keyword in node.keywords:
            value = keyword.value
            if not isinstance(value, ast.Constant):
                continue
            if keyword.arg == "mode" and value.value in CUDA_COMPILE_MODES:
                self.add(value, "cuda-only compile mode", f"torch.compile(mode={value.value!r})",
                         "remove mode= (TorchNeuron only applies mode='default') and pass backend='neuron'")
            if keyword.arg == "backend" and value.value in CUDA_ONLY_BACKENDS:
                self.add(value, "cuda-only compile backend", f"torch.compile(backend={value.value!r})",
                         "backend='neuron'")
            if keyword.arg == "dynamic" and value.value is True:
                self.add(value, "dynamic shapes", "torch.compile(dynamic=True)",
                         "dynamic=False (TorchNeuron rejects dynamic=True); pad inputs to a few bucket sizes")

    def visit_Constant(self, node):
        if _is_cuda_string(node) and id(node) not in self.seen_strings:
            self.add(node, "device string", f"device {node.value!r}",
                     f"{node.value.replace('cuda', 'neuron')!r} (or torch.accelerator.current_accelerator())")


def scan_source(source, path="<string>"):
    """Findings for one script's text; a syntax error is itself a finding."""
    lines = re.split(r"\r\n|\r|\n", source)  # Python's line breaks only (splitlines also breaks at \f, \x1c, ...)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as error:
        return [{"file": path, "line": error.lineno or 0, "column": error.offset or 0, "code": (error.text or "").strip(),
                 "kind": "syntax error", "message": f"cannot parse: {error.msg}", "suggestion": "fix the syntax"}]
    scanner = _Scanner(path, lines)
    scanner.visit(tree)
    return sorted(scanner.findings, key=lambda f: (f["line"], f["column"]))


def scan_files(paths):
    """Findings for every script; one that cannot be read or decoded is an "unreadable" finding."""
    findings = []
    for path in paths:
        try:
            with tokenize.open(path) as handle:  # the encoding Python would use (PEP 263 cookie, BOM, UTF-8)
                source = handle.read()
        except (OSError, SyntaxError, UnicodeDecodeError) as error:
            why = error.strerror if isinstance(error, OSError) else f"not valid Python source text ({error})"
            findings.append({"file": path, "line": 0, "column": 0, "code": "", "kind": "unreadable",
                             "message": f"cannot read: {why}", "suggestion": "check workload.script"})
            continue
        findings.extend(scan_source(source, path))
    return findings
