"""The C core's own unit tests (csrc/tests), built without Python, plain and under
AddressSanitizer + UndefinedBehaviorSanitizer.  The two builds share test_compile's
kernel cache (the kernels are the same C, compiled with the same flags): the second run
loads what the first compiled instead of compiling it again."""
import os
import shutil
import subprocess

import pytest

CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


@pytest.mark.parametrize("target", ["test", "asan"])
def test_c_core(target, tmp_path, kernel_cache):
    env = dict(os.environ, SC_TEST_KERNEL_CACHE=kernel_cache)
    proc = subprocess.run(["make", "-s", f"-j{os.cpu_count() or 1}", "-C", CSRC, target,
                           f"BUILD={tmp_path}"],
                          capture_output=True, text=True, timeout=1500, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert " 0 failed" in out and "passed" in out, out
