"""Shared, seeded inputs for the Python tests.

Every input is built from a seed derived from the test case's own id, so a failing case
reproduces alone.  Values are small integers (as floats) so that summing duplicates is exact
in any order, and every comparison with the dense reference can be bit-exact (torch.equal).
"""
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import scipy.sparse as sp
import torch

# The suite's kernels are the ones a CPU with slow gathers gets, whatever this one
# measures (driver/probe.c), so that tests of code shapes see the same code on every
# machine; tests/test_spmv_gathered_rows.py runs the gathered rows in child processes.
os.environ["SCORCH_GATHERS"] = "0"
# The suite's kernels are the ones the compiler writes for each call, never the generic
# built-in ones (setup.py: scorch._aot), whose background swap would make a test's view
# of a kernel depend on timing; tests/test_aot.py turns them on in child processes.
os.environ["SCORCH_AOT"] = "0"

import scorch  # noqa: E402

FLOAT_DTYPES = (torch.float32, torch.float64)
INDEX_DTYPES = (torch.int32, torch.int64)

# (id, shape, kind): kind "random" (about a third nonzero), "full" (every entry nonzero),
# "empty_rows" (some whole rows zero, the others dense-ish), "zeros" (no nonzero at all).
SHAPES_2D = [
    ("0x0", (0, 0), "random"),
    ("1x1", (1, 1), "full"),
    ("0x5", (0, 5), "random"),
    ("5x0", (5, 0), "random"),
    ("empty_rows_6x4", (6, 4), "empty_rows"),
    ("zeros_4x6", (4, 6), "zeros"),
    ("7x13", (7, 13), "random"),
    ("13x7", (13, 7), "random"),
]
SHAPES_ND = [
    ("3x4x5", (3, 4, 5), "random"),
    ("2x0x3", (2, 0, 3), "random"),
    ("zeros_2x3x2", (2, 3, 2), "zeros"),
    ("empty_rows_4x3x2", (4, 3, 2), "empty_rows"),
    ("2x3x2x3", (2, 3, 2, 3), "random"),
    ("1x1x1x1", (1, 1, 1, 1), "full"),
]


def seed_of(*parts) -> int:
    """A stable seed for a test case (independent of PYTHONHASHSEED)."""
    return zlib.crc32(repr(parts).encode())


def run_code(code: str, tmp_path, **env):
    """Run code in a fresh Python with its own kernel cache (tmp_path) and env added; it
    must exit 0 having printed "ok" last."""
    env = dict(os.environ, SCORCH_CACHE_DIR=str(tmp_path), **env)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def _gcc_runtime(name):
    p = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                       text=True).stdout.strip()
    return p if os.path.isabs(p) and os.path.exists(p) else None


def sanitized_env():
    """The env for run_code that builds kernels with -fsanitize=address,undefined (gcc's
    runtimes preloaded), or None where those runtimes are not installed."""
    asan, ubsan = _gcc_runtime("libasan.so"), _gcc_runtime("libubsan.so")
    if not (asan and ubsan):
        return None
    return {"LD_PRELOAD": asan + ":" + ubsan, "ASAN_OPTIONS": "detect_leaks=0",
            "SCORCH_CFLAGS": "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all "
                             "-march=native -fopenmp"}


# Subprocess checks loop over COMBOS, (value dtype, index dtype) pairs: all four, or the
# two corners under the sanitizers (slow to compile).
_COMBOS_ALL = ("import torch\nCOMBOS = [(torch.float32, torch.int32), (torch.float32, torch.int64), "
               "(torch.float64, torch.int32), (torch.float64, torch.int64)]\n")
_COMBOS_TWO = "import torch\nCOMBOS = [(torch.float32, torch.int32), (torch.float64, torch.int64)]\n"

# For subprocess checks of sparse products: check(C, ref, tol) compares a csr result with
# the dense reference and asserts each row's coordinates ascend with no repeat.
CHECK_CSR = r'''
def check(C, ref, tol):
    torch.testing.assert_close(C.to_dense(), ref, **tol)
    pos, crd = C._pos[1].long(), C._crd[1].long()
    for r in range(len(pos) - 1):
        seg = crd[pos[r]:pos[r + 1]]
        assert bool(torch.all(seg[1:] > seg[:-1])), (r, seg)
'''


def run_combos(code: str, tmp_path, **env):
    """run_code with COMBOS defined as every (value dtype, index dtype) pair."""
    run_code(_COMBOS_ALL + code, tmp_path, **env)


def run_combos_sanitized(code: str, tmp_path, **env):
    """run_code with kernels under ASan + UBSan and COMBOS = f32/int32 and f64/int64;
    skipped where gcc's sanitizer runtimes are not installed."""
    san = sanitized_env()
    if san is None:
        pytest.skip("gcc's ASan/UBSan runtimes are not installed")
    run_code(_COMBOS_TWO + code, tmp_path, **san, **env)


def with_threads(threads: int, fn):
    """fn() run with torch (and so scorch's kernels) on `threads` threads."""
    nt = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(nt)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_dense(shape, dtype=torch.float64, seed=0, kind="random", density=0.35):
    """A dense tensor of small nonzero integers (±1..±8) at random places."""
    g = generator(seed)
    mag = torch.randint(1, 9, shape, generator=g)
    sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
    vals = (mag * sign).to(dtype)
    if kind == "full":
        return vals
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if kind == "empty_rows":
        keep = torch.rand(shape, generator=g) < 0.7
        keep[0::2] = False          # rows 0, 2, 4, ... are empty (including the first)
        keep[-1] = False            # and the last one
        return torch.where(keep, vals, torch.zeros((), dtype=dtype))
    keep = torch.rand(shape, generator=g) < density
    return torch.where(keep, vals, torch.zeros((), dtype=dtype))


def nonzero_coords(x: torch.Tensor) -> set:
    return {tuple(c) for c in torch.nonzero(x).tolist()}


def duplicate_coo(ref: torch.Tensor, seed: int, n_cancel=2):
    """Coordinates [ndim, E] (int64) and values (E) of an uncoalesced COO whose sum is
    ``ref``: every nonzero is split into two or three parts (a part may be 0, an explicit
    zero), and up to ``n_cancel`` zero places get a pair +k, -k that sums to an explicit
    zero.  Entries are shuffled.  Returns (coords, values, stored) where ``stored`` is the
    set of distinct coordinates (the pattern a sparse format keeps)."""
    g = generator(seed)
    coords, vals = [], []
    for c in torch.nonzero(ref).tolist():
        v = float(ref[tuple(c)])
        parts = 2 + int(torch.randint(0, 2, (1,), generator=g))
        rest = v
        for _ in range(parts - 1):
            s = float(torch.randint(-3, 4, (1,), generator=g))
            coords.append(c)
            vals.append(s)
            rest -= s
        coords.append(c)
        vals.append(rest)
    zeros = torch.nonzero(ref == 0).tolist()
    cancelled = []
    if zeros:
        pick = torch.randperm(len(zeros), generator=g)[:n_cancel].tolist()
        for i in pick:
            c = zeros[i]
            k = float(torch.randint(1, 5, (1,), generator=g))
            coords += [c, c]
            vals += [k, -k]
            cancelled.append(tuple(c))
    ndim = ref.dim()
    if coords:
        perm = torch.randperm(len(coords), generator=g).tolist()
        coords = [coords[i] for i in perm]
        vals = [vals[i] for i in perm]
        idx = torch.tensor(coords, dtype=torch.int64).T.contiguous()
    else:
        idx = torch.zeros((ndim, 0), dtype=torch.int64)
    values = torch.tensor(vals, dtype=ref.dtype)
    return idx, values, nonzero_coords(ref) | set(cancelled)


def coo_pair_with_duplicates(ref: torch.Tensor, seed: int, dtype):
    """A 2-D ``ref`` as two uncoalesced COOs of ``dtype`` (duplicate_coo's entries): a torch
    sparse_coo_tensor, and a scorch coo that stores the duplicates (from_components, in
    row-major order)."""
    coords, vals, _ = duplicate_coo(ref, seed)
    t = torch.sparse_coo_tensor(coords, vals.to(dtype), tuple(ref.shape))
    order = torch.argsort(coords[0] * ref.shape[1] + coords[1], stable=True)
    coords, vals = coords[:, order], vals[order]
    B = scorch.from_components(tuple(ref.shape), "coo", pos=[torch.tensor([0, len(vals)]), None],
                               crd=[coords[0], coords[1]], values=vals.to(dtype))
    return t, B


def _bsr_blocksize(shape):
    def pick(n):
        for b in (3, 2):
            if n > 0 and n % b == 0:
                return b
        return 1
    return (pick(shape[0]), pick(shape[1]))


SOURCES_2D = [
    "dense", "numpy", "torch_coo", "torch_coo_dup", "torch_csr", "torch_csc", "torch_bsr",
    "scipy_csr_array", "scipy_csc_array", "scipy_coo_array", "scipy_csr_matrix",
    "scipy_csc_matrix", "scipy_coo_matrix", "scipy_coo_dup",
]
SOURCES_ND = ["dense", "numpy", "torch_coo", "torch_coo_dup", "scipy_coo_array",
              "scipy_coo_dup"]


def make_source(kind: str, ref: torch.Tensor, seed: int):
    """The input object of source kind ``kind`` equal to ``ref``, and the set of
    coordinates it stores (what a sparse format built from it keeps)."""
    stored = nonzero_coords(ref)
    a = ref.numpy()
    if kind == "dense":
        return ref.clone(), stored
    if kind == "numpy":
        return a.copy(), stored
    if kind == "torch_coo":
        x = ref.to_sparse().coalesce()
        assert x.is_coalesced()
        return x, stored
    if kind in ("torch_coo_dup", "scipy_coo_dup"):
        idx, vals, stored = duplicate_coo(ref, seed)
        if kind == "torch_coo_dup":
            x = torch.sparse_coo_tensor(idx, vals, ref.shape, check_invariants=True)
            assert idx.shape[1] < 2 or not x.is_coalesced()
            return x, stored
        return sp.coo_array((vals.numpy(), tuple(idx.numpy())), shape=ref.shape), stored
    if kind == "torch_csr":
        return ref.to_sparse_csr(), stored
    if kind == "torch_csc":
        return ref.to_sparse_csc(), stored
    if kind == "torch_bsr":
        return ref.to_sparse_bsr(_bsr_blocksize(ref.shape)), stored
    ctor = {
        "scipy_csr_array": sp.csr_array, "scipy_csc_array": sp.csc_array,
        "scipy_coo_array": sp.coo_array, "scipy_csr_matrix": sp.csr_matrix,
        "scipy_csc_matrix": sp.csc_matrix, "scipy_coo_matrix": sp.coo_matrix,
    }[kind]
    x = ctor(a)
    assert x.nnz == len(stored)
    return x, stored


def snapshot(x):
    """A deep copy of an input's data, to check later that it was not modified."""
    if isinstance(x, torch.Tensor):
        if x.layout is torch.sparse_coo:
            return ("coo", x._indices().clone(), x._values().clone(), x.is_coalesced())
        if x.layout in (torch.sparse_csr, torch.sparse_bsr):
            return ("csr", x.crow_indices().clone(), x.col_indices().clone(),
                    x.values().clone())
        if x.layout is torch.sparse_csc:
            return ("csc", x.ccol_indices().clone(), x.row_indices().clone(),
                    x.values().clone())
        return ("dense", x.clone())
    if isinstance(x, np.ndarray):
        return ("numpy", x.copy())
    if sp.issparse(x):
        return ("scipy", x.copy())
    if isinstance(x, scorch.SparseTensor):
        return ("scorch", sparse_arrays(x))
    raise TypeError(type(x))


def assert_unchanged(x, snap):
    now = snapshot(x)
    assert now[0] == snap[0]
    if snap[0] == "scipy":
        a, b = now[1], snap[1]
        assert a.format == b.format and a.shape == b.shape
        for name in ("data", "indices", "indptr", "coords"):
            if hasattr(b, name):
                old, new = getattr(b, name), getattr(a, name)
                if isinstance(old, tuple):
                    assert all(np.array_equal(o, n) for o, n in zip(old, new))
                else:
                    assert np.array_equal(old, new), name
        return
    if snap[0] == "numpy":
        assert np.array_equal(now[1], snap[1])
        return
    if snap[0] == "scorch":
        assert_arrays_equal(now[1], snap[1])
        return
    for old, new in zip(snap[1:], now[1:]):
        if isinstance(old, torch.Tensor):
            assert torch.equal(old, new)
        else:
            assert old == new


def sparse_arrays(A):
    """Clones of every array of a SparseTensor: (pos list, crd list, values)."""
    return ([None if p is None else p.clone() for p in A._pos],
            [None if c is None else c.clone() for c in A._crd],
            A.values().detach().clone())


def assert_arrays_equal(a, b):
    (pa, ca, va), (pb, cb, vb) = a, b
    for x, y in zip(pa + ca, pb + cb):
        assert (x is None) == (y is None)
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y)
    assert va.dtype == vb.dtype and torch.equal(va, vb)


def expected_nnz(stored: set, shape, fmt: scorch.Format) -> int:
    """Number of values a tensor storing the coordinates ``stored`` keeps in ``fmt``: a
    dense level multiplies the positions above it by its size (padding included), a
    compressed or singleton level keeps one position per distinct coordinate prefix."""
    order = fmt.order
    pts = {tuple(c[d] for d in order) for c in stored}
    count = 1
    for k, kind in enumerate(fmt.levels):
        if kind == "dense":
            count *= shape[order[k]]
        else:
            count = len({p[:k + 1] for p in pts})
    return count


def assert_valid(A):
    """A's arrays pass scorch's own O(nnz) validation (sorted, unique, pos monotone...),
    and have A's index dtype."""
    for arr in A._pos + A._crd:
        if arr is not None:
            assert arr.dtype == A.index_dtype
            assert arr.dim() == 1
    scorch.from_components(tuple(A.shape), A.format, pos=A._pos, crd=A._crd,
                           values=A.values())


def check_sparse(A, ref, fmt, index_dtype, stored=None):
    """A is a valid SparseTensor equal to ``ref`` (bit-exact) in format ``fmt``."""
    fmt = scorch.Format.parse(fmt, ref.dim())
    assert isinstance(A, scorch.SparseTensor)
    assert A.shape == ref.shape
    assert A.dtype == ref.dtype
    assert A.index_dtype == index_dtype
    assert A.format == fmt
    assert str(A.format) == str(fmt)
    assert A.format.name == fmt.name
    v = A.values()
    assert v.dim() == 1 and v.shape[0] == A.nnz and v.dtype == ref.dtype
    if stored is not None:
        assert A.nnz == expected_nnz(stored, tuple(ref.shape), fmt)
    assert_valid(A)
    D = A.to_dense()
    assert D.layout is torch.strided and D.dtype == ref.dtype and D.shape == ref.shape
    assert torch.equal(D, ref)


def pytest_configure(config):
    # torch's one-time notice when a CSR/CSC/BSR tensor is first built; not about scorch.
    config.addinivalue_line(
        "filterwarnings", "ignore:Sparse (CSR|CSC|BSR) tensor support is in beta:UserWarning")


@pytest.fixture
def rng(request):
    """A torch.Generator seeded from the test's node id."""
    return generator(seed_of(request.node.nodeid))
