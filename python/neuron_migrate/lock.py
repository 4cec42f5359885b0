"""Can we go back? The lock record of a run: versions, the model's files and revision, the
workload file, the environment variables that matter, the inputs. Values of variables whose
names suggest a secret are never recorded."""
import hashlib
import importlib.metadata
import os
import platform
import sys

ENV_PREFIXES = ("NEURON_", "TORCH_NEURONX_", "TORCH_", "PYTORCH_", "HF_", "TRANSFORMERS_", "CUDA_",
                "NCCL_", "OMP_", "MKL_", "XLA_", "FI_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE")
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")
PACKAGES = ("torch", "transformers", "torch-neuronx", "accelerate", "safetensors", "tokenizers", "numpy")


def versions():
    found = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    if found["torch-neuronx"] is None and "torch_neuronx" in sys.modules:
        found["torch-neuronx"] = getattr(sys.modules["torch_neuronx"], "__version__", None)
    from . import __version__
    found["neuron-migrate"] = __version__
    return found


def environment():
    """The variables that change how the workload runs, by prefix; secrets redacted."""
    chosen = {}
    for name, value in sorted(os.environ.items()):
        if name.startswith(ENV_PREFIXES) or name in ENV_PREFIXES:
            chosen[name] = "<redacted>" if any(m in name.upper() for m in SECRET_MARKERS) else value
    return chosen


def sha256_file(path, chunk=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def model_files(folder):
    """{relative path: {bytes, sha256}} of every file in the model folder."""
    files = {}
    if not folder or not os.path.isdir(folder):
        return files
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            files[os.path.relpath(path, folder)] = {"bytes": os.path.getsize(path), "sha256": sha256_file(path)}
    return files


def record(workload, model_folder, factory_file=None):
    files = model_files(model_folder)
    if factory_file and os.path.isfile(factory_file):
        files[os.path.basename(factory_file)] = {"bytes": os.path.getsize(factory_file),
                                                 "sha256": sha256_file(factory_file)}
    return {"versions": versions(), "environment": environment(),
            "model": {"path": model_folder, "revision": workload.model.revision, "files": files},
            "workload": {"path": workload.path, "sha256": hashlib.sha256(workload.text.encode()).hexdigest(),
                         "text": workload.text},
            "command": sys.argv}
