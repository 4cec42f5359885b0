"""The program cache of torch.compile(backend="neuron"), as TorchNeuron keeps its NEFFs: in
memory, and on disk under TORCH_NEURONX_NEFF_CACHE_DIR as <key[0:2]>/<key[2:4]>/<key>.neff,
written atomically (runtime/program.h holds the format and its checks, runtime/program_cache.h
the cache). The default directory is per user (<TMPDIR or /tmp>/neff_cache_<user>), not
TorchNeuron's shared /tmp/neff_cache, and what another user could have written is refused
(Note [Trusting the program cache]). TORCH_NEURONX_DISABLE_NEFF_CACHE=1 (or the C++ spelling
TORCH_NEURONX_NEFF_DISABLE_CACHE=1) turns it off: every graph is compiled.

The key is computed before any pass, from what determines the program: the graph's code,
its inputs' dtypes/sizes/strides, its constants, the graph type, the platform and logical
core configuration, the 64-bit setting and the compiler's version. Programs also travel
with torch.compiler.save_cache_artifacts() / load_cache_artifacts() (artifact type
"neuron_neff")."""
import dataclasses
import hashlib
import json
import os
import warnings

import torch
from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager

from .. import _C

def _compiler_version():
    """The compiler's version: a name bumped by hand when the executor (C++) changes what a program
    means, and a digest of this package's own sources (the passes, fusion and lowering that make a
    program), so that a program lowered by other code is never loaded from the cache."""
    digest = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read() + b"\0")
    return f"torch-neuron-sim-compiler-4+{digest.hexdigest()[:16]}"


COMPILER_VERSION = _compiler_version()
_cache = None


def disabled():
    return (os.environ.get("TORCH_NEURONX_DISABLE_NEFF_CACHE", "").strip().lower() in ("1", "true", "yes")
            or os.environ.get("TORCH_NEURONX_NEFF_DISABLE_CACHE", "") == "1")


def directory():
    setting = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    return _C.ProgramCache.default_directory() if setting is None else setting


def _report(message):
    warnings.warn(message, stacklevel=2)


def program_cache():
    """The process's cache (made on first use, for the directory set then)."""
    global _cache
    if _cache is None or _cache.directory != directory():
        _cache = _C.ProgramCache(directory(), int(os.environ.get("NEURON_COMPILATION_CACHE_MAX_ENTRIES", "1024")),
                                 _report)
    return _cache


def _tensor_key(t):
    return f"{t.dtype}|{tuple(t.shape)}|{t.stride()}|{t.storage_offset()}|{t.device.type}|{t.requires_grad}"


def identity():
    """What, besides the graph and its inputs, determines a program: the compiler's version and
    settings, torch's version, the platform and logical core configuration, the 64-bit setting."""
    platform, chips, lnc, cores = _C.topology()
    from . import fusion
    return "|".join((COMPILER_VERSION, f"fusion={fusion.enabled()}", torch.__version__, platform, str(lnc),
                     str(_C.computes_64bit_as_32bit())))


def _graph_code(gm):
    """The code of a graph and of the graphs it calls (higher-order operators' bodies)."""
    return "\0".join(f"{name}:{module.code}" for name, module in gm.named_modules()
                      if isinstance(module, torch.fx.GraphModule))


def key_for(gm, example_inputs, graph_type):
    digest = hashlib.sha256()
    for part in (identity(), graph_type, _graph_code(gm)):
        digest.update(part.encode())
        digest.update(b"\0")
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            digest.update((_tensor_key(val) if isinstance(val, torch.Tensor) else repr(val)).encode())
        elif node.op == "get_attr":
            _digest_constant(digest, getattr(gm, node.target))
    return digest.hexdigest()[:32]


def _digest_constant(digest, attribute):
    if isinstance(attribute, torch.Tensor):
        digest.update(_tensor_key(attribute).encode())
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            data = attribute.detach().cpu().contiguous().reshape(-1)
            digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")


def dynamo_graph_key(gm, example_inputs, aot_config):
    """Note [Caching past AOTAutograd]: the key under which AOTAutograd's cache keeps what it made
    of a Dynamo graph for our backend. It covers what AOTAutograd's own key covers for such a
    graph (the graph and the graphs it calls, its inputs' metadata with their device index and
    which of them share storage, its constants, grad and inference mode, autocast, deterministic algorithms, AOTAutograd's config)
    plus our compiler's identity. AOTAutograd's own key function is not used: it loads all of
    Inductor's code generators and hashes torch's sources (about 1.5 s per process), more than a
    warm start saves."""
    from torch._functorch._aot_autograd.autograd_cache import check_cacheable
    check_cacheable(gm)  # only graphs of torch operators: a Python function's body is not in the key
    digest = hashlib.sha256()
    autocast = [(device, str(torch.get_autocast_dtype(device))) for device in torch._C._autocast_supported_devices()
                if torch.is_autocast_enabled(device)]
    for part in (identity(), "aot", _graph_code(gm), str(torch.is_grad_enabled()),
                 str(torch.is_inference_mode_enabled()), repr(autocast),
                 str(torch.are_deterministic_algorithms_enabled()), repr(aot_config.num_params_buffers),
                 repr(aot_config.keep_inference_input_mutations), repr(aot_config.is_export),
                 repr(aot_config.no_tangents), repr(aot_config.dynamic_shapes), repr(aot_config.pre_dispatch)):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(torch._functorch.config.save_config())
    storages = {}
    for index, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            storage = torch.multiprocessing.reductions.StorageWeakRef(value.untyped_storage())
            shares = storages.setdefault(storage.cdata, index)
            digest.update(f"{_tensor_key(value)}|{value.device}|leaf={value.is_leaf}|storage={shares}|"
                          f"inference={value.is_inference()}".encode())
        else:
            digest.update(repr(value).encode())
        digest.update(b"\0")
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            _digest_constant(digest, getattr(gm, node.target))
    return "aneuron" + digest.hexdigest()[:40]


def load(key, device):
    """The program cached under `key`, loaded on `device` in one call that decodes it once:
    (program, payload bytes), or None. Its metadata holds the output layout ("layout", JSON)
    and the graph's node count ("nodes")."""
    if disabled():
        return None
    found = _C.Program.from_cache(program_cache(), key, device)
    if found is None:
        return None
    program, payload_bytes, sealed = found
    _record_artifact(key, sealed)
    return program, payload_bytes


def load_new(key, desc, device, *, keep):
    """A lowered program (lowering.lower's description) loaded on `device` in one call: checked,
    built, encoded and, when `keep` and the cache is on, stored under `key`. Returns (program,
    payload bytes); raises RuntimeError for a description the loader or the executor refuses
    (then nothing is stored)."""
    cached = keep and not disabled()
    program, payload_bytes, sealed = _C.Program.from_desc(desc, device, program_cache() if cached else None, key)
    if cached:
        _record_artifact(key, sealed)
    return program, payload_bytes


def _record_artifact(key, sealed):
    CacheArtifactManager.record_artifact(NeuronNeffCacheArtifact.type(), key, sealed)


@CacheArtifactFactory.register
@dataclasses.dataclass(frozen=True)
class NeuronNeffCacheArtifact(CacheArtifact):
    """A compiled program, carried by torch.compiler.save_cache_artifacts()."""

    def populate_cache(self):
        program_cache().put(self.key, _C.unseal_program(self.content, self.key))

    @staticmethod
    def type():
        return "neuron_neff"
