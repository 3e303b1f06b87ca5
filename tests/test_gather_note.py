"""The gather probe's outcome is kept in the kernel cache (`gathers-<ISA hash>`, "0\\n" or
"1\\n"): the probe is a timing, and on a shared machine it came out either way from one
process to the next, and with it the SpMV kernel a process wrote and the cache files it
found.  The first process measures and writes the note; later ones read it; a note that
is not "0\\n" or "1\\n" is measured again and rewritten; SCORCH_GATHERS still overrides.
Each step in a child process with the same cache directory."""
import os
import subprocess
import sys

import pytest

SHOW = r'''
import torch, scorch
A = scorch.to_sparse(torch.eye(6), "csr")
text = scorch.explain(torch.mv, A, torch.ones(6))
print("64" if "vectors: 64 bytes" in text else "32", "fast" if "gathers: fast" in text else "slow")
'''


def _show(cache, **env):
    e = {k: v for k, v in os.environ.items() if k != "SCORCH_GATHERS"}
    e.update(SCORCH_CACHE_DIR=str(cache), **env)
    r = subprocess.run([sys.executable, "-c", SHOW], env=e, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split()


def _note(cache):
    notes = [p for p in os.listdir(cache) if p.startswith("gathers-")]
    assert len(notes) == 1, notes
    return os.path.join(cache, notes[0])


def test_probe_outcome_is_kept_and_read(tmp_path):
    width, first = _show(tmp_path)
    note = _note(tmp_path)
    with open(note) as f:
        kept = f.read()
    assert kept in ("0\n", "1\n")
    assert first == ("fast" if kept == "1\n" and width == "64" else "slow")
    assert oct(os.stat(note).st_mode & 0o777) == "0o600"
    if width != "64":
        pytest.skip("gathers need 64-byte vectors, which this machine's kernels do not use")
    for text, want in (("1\n", "fast"), ("0\n", "slow")):
        with open(note, "w") as f:
            f.write(text)
        assert _show(tmp_path)[1] == want, text
    with open(note, "w") as f:
        f.write("1\n")
    assert _show(tmp_path, SCORCH_GATHERS="0")[1] == "slow"
    with open(note, "w") as f:
        f.write("yes\n")
    _show(tmp_path)
    with open(note) as f:
        assert f.read() in ("0\n", "1\n")
