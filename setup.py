"""Builds torch_neuron_sim._C: the bridge (csrc/) and the simulated runtime (runtime/). The
package's metadata, dependencies and entry points are in pyproject.toml; install with
`pip install --no-build-isolation .` after torch (see pyproject.toml)."""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/kernels/*.cpp") + glob.glob("csrc/compile/*.cpp")
                 + glob.glob("csrc/distributed/*.cpp") + glob.glob("runtime/*.cpp"))

setup(
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
)
