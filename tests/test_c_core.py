"""The C core's own unit tests (csrc/tests), built without Python, plain and then under
AddressSanitizer + UndefinedBehaviorSanitizer.  The two builds share test_compile's
kernel cache (the kernels are the same C, compiled with the same flags): the sanitized run
loads what the plain one compiled instead of compiling it again.  One test runs both, in
that order, so that a parallel run (pytest -n) keeps them in one worker, one after the
other."""
import os
import re
import shutil
import subprocess

import pytest

CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")


def test_c_core_plain_then_sanitized(tmp_path):
    env = dict(os.environ, SC_TEST_KERNEL_CACHE=str(tmp_path / "kernels"))
    os.mkdir(env["SC_TEST_KERNEL_CACHE"])
    for target in ("test", "asan"):
        proc = subprocess.run(["make", "-s", f"-j{os.cpu_count() or 1}", "-C", CSRC, target,
                               f"BUILD={tmp_path / 'build'}"],
                              capture_output=True, text=True, timeout=1500, env=env)
        out = f"make {target}:\n" + proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        failed = re.findall(r" (\d+) failed", out)
        assert failed and all(n == "0" for n in failed) and "passed" in out, out
