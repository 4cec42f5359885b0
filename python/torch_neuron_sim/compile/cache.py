"""The program cache of torch.compile(backend="neuron"), as TorchNeuron keeps its NEFFs: in
memory, and on disk under TORCH_NEURONX_NEFF_CACHE_DIR (default /tmp/neff_cache) as
<key[0:2]>/<key[2:4]>/<key>.neff, written atomically (runtime/program.h holds the format,
the checks and the cache itself). TORCH_NEURONX_DISABLE_NEFF_CACHE=1 (or the C++ spelling
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

COMPILER_VERSION = "torch-neuron-sim-compiler-2"
_cache = None


def _disabled():
    return (os.environ.get("TORCH_NEURONX_DISABLE_NEFF_CACHE", "").strip().lower() in ("1", "true", "yes")
            or os.environ.get("TORCH_NEURONX_NEFF_DISABLE_CACHE", "") == "1")


def directory():
    return os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", "/tmp/neff_cache")


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


def key_for(gm, example_inputs, graph_type):
    digest = hashlib.sha256()
    platform, chips, lnc, cores = _C.topology()
    from . import fusion
    for part in (COMPILER_VERSION, f"fusion={fusion.enabled()}", torch.__version__, graph_type, platform, str(lnc),
                 str(_C.computes_64bit_as_32bit()), gm.code):
        digest.update(part.encode())
        digest.update(b"\0")
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            digest.update((_tensor_key(val) if isinstance(val, torch.Tensor) else repr(val)).encode())
        elif node.op == "get_attr":
            attribute = getattr(gm, node.target)
            if isinstance(attribute, torch.Tensor):
                digest.update(_tensor_key(attribute).encode())
                with torch._subclasses.fake_tensor.unset_fake_temporarily():
                    data = attribute.detach().cpu().contiguous().reshape(-1)
                    digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()[:32]


def lookup(key):
    """(payload, output layout, stats) of a cached program, or None."""
    if _disabled():
        return None
    found = program_cache().get(key)
    if found is None:
        return None
    payload, _ = found
    metadata = _C.describe_program(payload)["metadata"]
    _record_artifact(key, payload)
    return payload, json.loads(metadata["layout"]), {"nodes": int(metadata.get("nodes", 0))}


def store(key, payload, layout, stats):
    if _disabled():
        return
    program_cache().put(key, payload)
    _record_artifact(key, payload)


def _record_artifact(key, payload):
    CacheArtifactManager.record_artifact(NeuronNeffCacheArtifact.type(), key, _C.seal_program(key, payload))


@CacheArtifactFactory.register
@dataclasses.dataclass(frozen=True)
class NeuronNeffCacheArtifact(CacheArtifact):
    """A compiled program, carried by torch.compiler.save_cache_artifacts()."""

    def populate_cache(self):
        program_cache().put(self.key, _C.unseal_program(self.content, self.key))

    @staticmethod
    def type():
        return "neuron_neff"
