"""Builds torch_neuron_sim._C: the bridge (csrc/) and the simulated runtime (runtime/)."""
import glob
import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/kernels/*.cpp") + glob.glob("csrc/compile/*.cpp")
                 + glob.glob("csrc/distributed/*.cpp") + glob.glob("runtime/*.cpp"))

setup(
    name="torch-neuron-sim",
    version="0.1.0",
    description="A simulated AWS Neuron device for PyTorch, with the torch_neuronx API",
    package_dir={"": "python"},
    packages=find_packages("python"),
    package_data={"torch_neuron_sim": ["data/*.txt"], "neuron_migrate": ["data/*.toml"]},
    ext_modules=[
        CppExtension(
            "torch_neuron_sim._C",
            sources,
            include_dirs=[ROOT],
            # -fopenmp: at::parallel_for in our kernels (SmallMatmul.cpp) runs on torch's own
            # OpenMP pool (the libgomp.so.1 torch loads), as ATen's kernels do.
            extra_compile_args=["-O2", "-std=c++17", "-Wno-unused-parameter", "-fopenmp"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    entry_points={"torch.backends": ["torch_neuronx = torch_neuronx:_autoload"],
                  "torch_dynamo_backends": ["neuron = torch_neuronx.neuron_dynamo_backend.backend:neuron_backend"],
                  "console_scripts": ["neuron-migrate = neuron_migrate.cli:main"]},
    python_requires=">=3.10",
)
