"""Build of scorch's C extension (scorch._C).

The extension uses the CPython and NumPy C APIs only: no PyTorch headers, so the build
needs neither torch nor a torch-version-specific toolchain.  Sources: every .c file of the
pipeline stages under csrc/ plus csrc/py/.  The runtime header is installed with the
package (scorch/include/scorch_rt.h) for the kernels the JIT compiles.
"""
import glob
import os
import shutil

import numpy
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ["base", "format", "expr", "lower", "schedule", "ir", "codegen", "jit", "driver", "py"]


def sources():
    out = []
    for stage in STAGES:
        out += sorted(glob.glob(os.path.join("csrc", stage, "*.c")))
    return out


class BuildPyWithHeader(build_py):
    """Copy csrc/runtime/scorch_rt.h into the package so generated kernels can include it."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "scorch", "include")
        os.makedirs(dest, exist_ok=True)
        shutil.copy(os.path.join(HERE, "csrc", "runtime", "scorch_rt.h"), dest)


WARNINGS = ["-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wmissing-prototypes", "-Werror"]
# Python's own headers trip -Wpedantic in places; they are system headers here.
ext = Extension(
    "scorch._C",
    sources=sources(),
    include_dirs=[numpy.get_include(), "csrc"],
    extra_compile_args=["-std=c11", "-O3", "-fopenmp", "-fvisibility=hidden"] + WARNINGS,
    extra_link_args=["-fopenmp"],
    libraries=["dl", "pthread", "m"],
)

setup(ext_modules=[ext], cmdclass={"build_py": BuildPyWithHeader})
