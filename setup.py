"""Build of scorch's C extension (scorch._C) and its ahead-of-time kernels (scorch._aot).

The extension uses the CPython and NumPy C APIs only: no PyTorch headers, so the build
needs neither torch nor a torch-version-specific toolchain.  Sources: every .c file of the
pipeline stages under csrc/ plus csrc/py/.  The runtime header is installed with the
package (scorch/include/scorch_rt.h) for the kernels the JIT compiles.

scorch._aot is not a Python module: once scorch._C is built, the compiler itself writes
the C of the common products' kernels (tools/aot.py, tools/aot_signatures.json), which
are compiled as the JIT would compile them (-O3 -march=native -fopenmp) into one shared
object that scorch._C loads, so those products need no C compiler at run time.
SCORCH_AOT=0 in the build's environment leaves it out.
"""
import glob
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
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

# The kernels are compiled as the JIT compiles them: its compiler ($SCORCH_CC, else cc) and
# flags (csrc/jit/sc_jit.h: SC_JIT_DEFAULT_CFLAGS and SC_JIT_BASE_FLAGS), not Python's
# (-fwrapv, -g), and without warnings (a kernel's helpers go unused in some kernels).
AOT_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-w"]
aot = Extension("scorch._aot", sources=[], extra_link_args=["-fopenmp"], libraries=["m"])


class BuildExtWithKernels(build_ext):
    """scorch._C first; then scorch._aot from the kernels scorch._C generates."""

    def build_extensions(self):
        self.check_extensions_list(self.extensions)
        for e in self.extensions:
            if e.name != "scorch._aot":
                self.build_extension(e)
        for e in self.extensions:
            if e.name == "scorch._aot" and os.environ.get("SCORCH_AOT", "1") != "0":
                try:
                    self.build_kernels(e)
                except Exception as exc:   # scorch works without them (the JIT compiles)
                    print(f"warning: scorch's ahead-of-time kernels not built: {exc}",
                          file=sys.stderr)

    def build_kernels(self, e):
        spec = importlib.util.spec_from_file_location("scorch._C",
                                                      self.get_ext_fullpath("scorch._C"))
        C = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(C)
        runtime = os.path.join(HERE, "csrc", "runtime")
        C.set_include_dir(runtime)
        sys.path.insert(0, os.path.join(HERE, "tools"))
        try:
            import aot as gen
        finally:
            sys.path.pop(0)
        src_dir = os.path.join(self.build_temp, "aot")
        saved = os.environ.get("SCORCH_CACHE_DIR")
        with tempfile.TemporaryDirectory() as cache:   # (the compiler makes its cache dir)
            os.environ["SCORCH_CACHE_DIR"] = cache
            try:
                files = gen.generate(C, src_dir)
            finally:
                if saved is None:
                    os.environ.pop("SCORCH_CACHE_DIR", None)
                else:
                    os.environ["SCORCH_CACHE_DIR"] = saved

        cc = shlex.split(os.environ.get("SCORCH_CC") or "cc")

        def compile_one(src):
            obj = src[:-2] + ".o"
            if not (os.path.exists(obj) and os.path.getmtime(obj) >= os.path.getmtime(src)):
                subprocess.run(cc + AOT_FLAGS + ["-I", runtime, "-c", src, "-o", obj],
                               check=True)
            return obj

        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            objects = list(pool.map(compile_one, files))
        e.sources = []
        e.extra_objects = objects
        e.depends = objects   # (relinked when an object is newer than the library)
        self.build_extension(e)


setup(ext_modules=[ext, aot],
      cmdclass={"build_py": BuildPyWithHeader, "build_ext": BuildExtWithKernels})
