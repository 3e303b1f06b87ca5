"""The C core's own unit tests (csrc/tests), built without Python, plain and under
AddressSanitizer + UndefinedBehaviorSanitizer."""
import os
import shutil
import subprocess

import pytest

CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")


@pytest.mark.parametrize("target", ["test", "asan"])
def test_c_core(target, tmp_path):
    proc = subprocess.run(["make", "-s", "-C", CSRC, target, f"BUILD={tmp_path}"],
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert " 0 failed" in out and "passed" in out, out
