"""Builds torch_neuron_sim._C: the bridge (csrc/) and the simulated runtime (runtime/). The
package's metadata, dependencies and entry points are in pyproject.toml; install with
`pip install --no-build-isolation .` after torch (see pyproject.toml)."""
import glob
import os
import sys
import sysconfig

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/kernels/*.cpp") + glob.glob("csrc/compile/*.cpp")
                 + glob.glob("csrc/distributed/*.cpp") + glob.glob("runtime/*.cpp"))


class InTreeBuildExtension(BuildExtension.with_options(use_ninja=True)):
    """Objects always go to build/temp.<platform>-<python>, the folder `setup.py build_ext` uses,
    also for an editable install and a wheel (pip gives those a new temporary folder each time).
    So ninja finds the objects of the last build of the same sources up to date (make test-wheel
    does not compile the extension again), and ccache, keyed on paths relative to the checkout
    (Makefile: CCACHE_BASEDIR), finds them for a clean clone of the same sources."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", f"temp.{sysconfig.get_platform()}-{sys.implementation.cache_tag}")


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
    cmdclass={"build_ext": InTreeBuildExtension},
)
