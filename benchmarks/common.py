"""Shared helpers for scorch's benchmarks: timing (medians), the shared data matrices and
deterministic synthetic inputs.  Every benchmark compares candidates in the same run."""
from __future__ import annotations

import gzip
import math
import os
import sys
import statistics
import time

import numpy as np
import scipy.io
import scipy.sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("SCORCH_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def median_time(fn, repeat=7, warmup=1, budget=None):
    """Median wall time of fn() in seconds; stops early once `budget` seconds are spent."""
    for _ in range(warmup):
        fn()
    times = []
    spent = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
        if budget is not None and spent > budget and len(times) >= 3:
            break
    return statistics.median(times)


def geomean(xs, empty=math.nan):
    """The geometric mean of the positive, finite numbers in xs (None and nan skipped), or
    ``empty`` where there are none."""
    xs = [x for x in xs if x is not None and math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else empty


def time_rounds(fns, repeat, budget, rng, warm=()):
    """Medians (s) of each candidate in ``fns`` (name -> callable), timed in rounds: one
    call of each per round, after one warm-up call each (not for the names in ``warm``:
    the caller has just called them, checking their results), in a fresh order every
    round (``rng.shuffle``), so that drifting machine load hits every candidate alike;
    stops after a round once ``budget`` seconds are spent (three rounds at least).
    Kernels still compiling in the background (a built-in generic kernel standing in for
    one written for the call's sizes) are waited for first, and then every candidate
    warms up: the times are those of the kernels a long-running program settles on."""
    compiler = sys.modules.get("scorch._compiler")
    if compiler is not None and compiler.wait_compiles():
        warm = ()
    for k, fn in fns.items():
        if k not in warm:
            fn()
    times = {k: [] for k in fns}
    spent = 0.0
    items = list(fns.items())
    for r in range(repeat):
        rng.shuffle(items)
        for k, fn in items:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            times[k].append(dt)
            spent += dt
        if spent > budget and r >= 2:
            break
    return {k: statistics.median(v) for k, v in times.items()}


def shared_matrices(names=None):
    """(name, scipy csr_array float32) for the matrices in shared/data/matrices."""
    d = os.path.join(SHARED, "matrices")
    if not os.path.isdir(d):
        return
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".mtx.gz"):
            continue
        name = fn[: -len(".mtx.gz")]
        if names and name not in names:
            continue
        with gzip.open(os.path.join(d, fn)) as f:
            m = scipy.io.mmread(f)
        m = sp.csr_array(m)
        if m.dtype.kind not in "f" or m.nnz and not np.any(m.data):
            m = m.astype(np.float32)
        rng = np.random.default_rng(0)
        m.data = rng.uniform(0.5, 1.5, m.nnz).astype(np.float32)
        m.sum_duplicates()
        yield name, m


def powerlaw(n_rows, nnz, seed=0, alpha=1.0):
    """A deterministic power-law (Zipf-like row degrees, uniform columns) csr_array."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n_rows + 1) ** alpha
    rows = rng.choice(n_rows, size=nnz, p=w / w.sum())
    rows = rng.permutation(n_rows)[rows]
    cols = rng.integers(0, n_rows, size=nnz)
    vals = rng.uniform(0.5, 1.5, nnz).astype(np.float32)
    m = sp.coo_array((vals, (rows, cols)), shape=(n_rows, n_rows)).tocsr()
    m.sum_duplicates()
    return m
