"""Kernel benchmark: scorch's generated kernels against torch.sparse, scipy.sparse and dense
torch.mm, all in the same run, with the machine's own limits measured in that run.

    python -m benchmarks.kernels [--quick] [--only spmv,spmm,spmmt,spmmbt,sddmm,spgemm,dlmc]
                                 [--dtypes f32,f64] [--hugepages] [--json PATH] [--png PATH]

Kernels: SpMV "ij,j->i"; SpMM "ij,jk->ik" (K = 16, 64, 256); SpMMᵀ Aᵀ·G "ik,ij->jk" (K =
64: the gradient of A·X with respect to X, with A stored as CSR; against torch.sparse.mm
on the transposed CSR, a CSC view); SpMM·Bᵀ A·Bᵀ "ij,kj->ik" with B dense (K = 64:
what F.linear runs on a sparse input; against torch.sparse.mm(A, B.t())); SDDMM
"ij,ik,jk->ij" (K = 16, 64, 256); SpGEMM A·A
("ij,jk->ik" with both operands CSR; A·Aᵀ via "ij,kj->ik" when
A is rectangular).  Inputs: ../shared/data/matrices (SuiteSparse / SNAP), DLMC 90 %-pruned
Transformer and ResNet-50 weights (SpMM W @ Xᵀ, batch 256: y = x @ Wᵀ computed as its
transpose, the field's standard layout), and deterministic synthetic inputs (uniform random,
R-MAT power-law, banded).  Baselines: torch.sparse with int32 CSR (torch.mv, torch.sparse.mm,
torch.sparse.sampled_addmm, CSR @ CSR; MKL where torch uses it), scipy.sparse (one thread;
for SDDMM, which scipy lacks, gathered rows and a row-wise dot, not in --quick) and dense
torch.mm where the dense matrix takes < 1 GB.  Every time is a median; ratios are
scorch / baseline (< 1: scorch is faster).  GB/s use a traffic model per matrix: "min"
(matrix + dense operands + output each moved once) for banded / FEM-like / DNN weights, and
"no-reuse" (one dense row of K values fetched per nonzero) for random and power-law
matrices; "% BW" relates them to the STREAM triad measured at the start of the run and is
printed only where the modelled traffic exceeds the cache the run measures (the largest
buffer read back at 1.5x STREAM or faster, at most the L3 Linux reports: a VM's sysfs can
report its host's whole L3); a gathered operand that fits in half of it counts as cached
(the minimum-bytes model); "% rows" relates no-reuse figures to a random-row probe of the same run
(256-byte rows from a 256 MiB table, read by torch's embedding_bag): what random rows can
move on this machine.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch

import scorch

from .common import SHARED, geomean, median_time, shared_matrices, time_rounds

DENSE_LIMIT = 1 << 30          # bytes: dense baseline only where the dense matrix fits in 1 GB
DENSE_FLOP_LIMIT = 2e11        # dense A·A only below this many flops


def _llc_bytes(default=64 << 20):
    """This machine's L3 as Linux reports it (scorch's kernels read the same file), else
    64 MiB."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            v = f.read().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(v[-1:], 1)
        return int(v.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return default


LLC_BYTES = _llc_bytes()       # the L3 Linux reports: where cache_probe stops looking
MEM_LIMIT = 20 << 30           # skip a case whose estimated footprint exceeds this

# Matrices with locality (banded, FEM, stencils, roads, circuits, DNN weights): "min" model.
MIN_MODEL = {"bcsstk13", "bcsstk16", "cryg2500", "rajat01", "adder_dcop_05", "bcspwr10",
             "usroads"}


# --------------------------------------------------------------------------- inputs

def read_smtx(path, seed=0):
    """A DLMC .smtx pattern as a float32 scipy csr_array with seeded random values."""
    with open(path) as f:
        nrows, ncols, nnz = (int(t) for t in f.readline().replace(",", " ").split())
        indptr = np.array(f.readline().split(), dtype=np.int32)
        indices = np.array(f.readline().split(), dtype=np.int32) if nnz else \
            np.zeros(0, np.int32)
    vals = np.random.default_rng(seed).uniform(-1, 1, nnz).astype(np.float32)
    m = sp.csr_array((vals, indices, indptr), shape=(nrows, ncols))
    m.sort_indices()
    return m


def dlmc_matrices(per_model):
    """Up to per_model DLMC weights of each model, chosen deterministically to spread over
    the distinct shapes (files sorted by name; shapes round-robin)."""
    out = []
    for model in ("transformer", "rn50"):
        d = os.path.join(SHARED, "dlmc", model, "magnitude_pruning_0.9")
        if not os.path.isdir(d):
            continue
        files = sorted(f for f in os.listdir(d) if f.endswith(".smtx"))
        by_shape = {}
        for fn in files:
            with open(os.path.join(d, fn)) as f:
                r, c, _ = (int(t) for t in f.readline().replace(",", " ").split())
            by_shape.setdefault((r, c), []).append(fn)
        picked, rnd = [], 0
        while len(picked) < per_model and any(len(v) > rnd for v in by_shape.values()):
            for shape in sorted(by_shape):
                if rnd < len(by_shape[shape]) and len(picked) < per_model:
                    picked.append(by_shape[shape][rnd])
            rnd += 1
        for fn in picked:
            short = fn[:-5].replace("body_", "").replace("_fully_connected", "") \
                .replace("multihead_attention_", "").replace("bottleneck_", "bn")
            out.append((f"{'tf' if model == 'transformer' else 'rn50'}:{short}"[:34],
                        read_smtx(os.path.join(d, fn))))
    return out


def _csr_from_rows(n_rows, n_cols, rows, cols, rng):
    vals = rng.uniform(0.5, 1.5, rows.size).astype(np.float32)
    m = sp.coo_array((vals, (rows, cols)), shape=(n_rows, n_cols)).tocsr()
    m.sum_duplicates()
    m.indptr = m.indptr.astype(np.int32)
    m.indices = m.indices.astype(np.int32)
    return m


def uniform(n, per_row, seed=1):
    """n × n, exactly per_row uniformly random columns per row (duplicates summed)."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.integers(0, n, size=(n, per_row), dtype=np.int32), axis=1)
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    vals = rng.uniform(0.5, 1.5, n * per_row).astype(np.float32)
    m = sp.csr_array((vals, cols.ravel(), indptr), shape=(n, n))
    m.sum_duplicates()
    m.indptr = m.indptr.astype(np.int32)
    return m


def rmat(scale, n_edges, seed=2, abcd=(0.57, 0.19, 0.19, 0.05)):
    """R-MAT (Graph500 parameters) 2^scale square, n_edges edges before duplicate removal,
    vertex ids randomly permuted (as Graph500 does)."""
    rng = np.random.default_rng(seed)
    a, b, c, _ = abcd
    rows = np.zeros(n_edges, np.int64)
    cols = np.zeros(n_edges, np.int64)
    for lvl in range(scale):
        u = rng.random(n_edges, dtype=np.float32)
        bit = np.int64(1) << lvl
        rows += bit * (u >= a + b)
        cols += bit * (((u >= a) & (u < a + b)) | (u >= a + b + c))
    perm = rng.permutation(1 << scale)
    return _csr_from_rows(1 << scale, 1 << scale, perm[rows], perm[cols], rng)


def banded(n, width, seed=3):
    """n × n with `width` consecutive diagonals centred on the main one (FEM-like band)."""
    rng = np.random.default_rng(seed)
    h = width // 2
    offs = np.arange(-h, width - h, dtype=np.int64)
    cols = np.arange(n, dtype=np.int64)[:, None] + offs[None, :]
    ok = (cols >= 0) & (cols < n)
    counts = ok.sum(axis=1)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    cols = cols[ok].astype(np.int32)
    vals = rng.uniform(0.5, 1.5, cols.size).astype(np.float32)
    return sp.csr_array((vals, cols, indptr.astype(np.int32)), shape=(n, n))


def cpu_model():
    """The CPU's model name and widest vector extension, from /proc/cpuinfo (Linux)."""
    name, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and name is None:
                    name = val.strip()
                elif key.strip() == "flags":
                    flags = set(val.split())
                    break
    except OSError:
        pass
    name = name or platform.processor() or platform.machine()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    return f"{name} ({isa})" if isa else name


def vector_width():
    """The vector width scorch's kernels are written for here and whether its SpMV rows
    gather (what explain reports: the compiler measures the gathers, driver/probe.c)."""
    w = scorch.to_sparse(torch.eye(2), "csr")
    text = scorch.explain("ij,j->i", w, torch.ones(2))
    return (int(text.split("vectors: ", 1)[1].split(" ", 1)[0]),
            text.split("gathers: ", 1)[1].split("\n", 1)[0])


def synthetic(quick):
    if quick:
        return [("uniform-100k-10/row", uniform(100_000, 10), "noreuse"),
                ("rmat-2^17-1M", rmat(17, 1_000_000), "noreuse"),
                ("banded-100k-27/row", banded(100_000, 27), "min")]
    return [("uniform-1M-10/row", uniform(1_000_000, 10), "noreuse"),
            ("rmat-2^20-16M", rmat(20, 16_000_000), "noreuse"),
            ("banded-1M-27/row", banded(1_000_000, 27), "min")]


# --------------------------------------------------------------------------- probes

def stream_probe(n=32 << 20, repeat=7):
    """STREAM triad a = b + s*c on float32 arrays of n (3 × 128 MiB), torch on all threads.
    GB/s counts 12 bytes per element (no write-allocate)."""
    b = torch.rand(n)
    c = torch.rand(n)
    a = torch.empty(n)
    torch.add(b, c, alpha=3.0, out=a)
    t = median_time(lambda: torch.add(b, c, alpha=3.0, out=a), repeat=repeat, warmup=2)
    copy_t = median_time(lambda: a.copy_(b), repeat=repeat, warmup=1)
    return {"triad_GBps": 12 * n / t / 1e9, "copy_GBps": 8 * n / copy_t / 1e9,
            "triad_ms": t * 1e3, "array_MiB": 4 * n / 2**20}


def gather_probe(n=16 << 20, table_bytes=4 << 20, repeat=7):
    """Random 4-byte gathers from a 4 MiB table (x of a 1 M-column SpMV), torch on all
    threads: ns per gathered element (includes reading the int64 index and writing out)."""
    g = torch.Generator().manual_seed(0)
    table = torch.rand(table_bytes // 4)
    idx = torch.randint(0, table.numel(), (n,), generator=g)
    out = torch.empty(n)
    t = median_time(lambda: torch.index_select(table, 0, idx, out=out), repeat=repeat, warmup=2)
    seq = torch.arange(n) % table.numel()
    ts = median_time(lambda: torch.index_select(table, 0, seq, out=out), repeat=repeat, warmup=1)
    return {"gather_ns_per_elem": t / n * 1e9, "sequential_ns_per_elem": ts / n * 1e9}


def row_probe(rows=1 << 20, reads=10_000_000, K=64, repeat=5):
    """Random 256-byte rows (K = 64 float32) from a table of `rows` (256 MiB: beyond the
    L3), torch on all threads: GB/s of rows read (and their int64 indices) by ATen's
    embedding_bag sum over bags of 1000 random rows, a tuned gather-and-reduce.  What the
    no-reuse model's random rows can reach on this machine (DRAM latency and TLB misses
    bound it, not STREAM's sequential bandwidth)."""
    g = torch.Generator().manual_seed(0)
    table = torch.rand(rows, K)
    idx = torch.randint(0, rows, (reads // 1000, 1000), generator=g)
    t = median_time(lambda: torch.nn.functional.embedding_bag(idx, table, mode="sum"),
                    repeat=repeat, warmup=1)
    return {"rows_GBps": idx.numel() * (K * 4 + 8) / t / 1e9, "rows_table_MiB": rows * K * 4 / 2**20}


def cache_probe(triad_GBps, limit=None, repeat=5):
    """The cache this run has, measured: the largest buffer (1 MiB doubling, up to the L3
    Linux reports) that torch sums on all threads at 1.5x this run's STREAM triad or
    faster.  A VM's sysfs can report its host's whole L3 (480 MiB on the 2-vCPU Xeon),
    of which a guest gets a share (there 64 MiB read back at ~55 GB/s, 128 MiB at DRAM's
    ~27)."""
    limit = LLC_BYTES if limit is None else limit
    size, cached = 1 << 20, 0
    while size <= limit:
        buf = torch.ones(size // 4)
        t = median_time(buf.sum, repeat=repeat, warmup=2)
        if size / t / 1e9 < 1.5 * triad_GBps:
            break
        cached, size = size, size * 2
    return {"cache_MiB": cached / 2**20}


def huge_page_share(mib=64):
    """The share of a fresh torch tensor of `mib` MiB that Linux backs with 2 MiB pages
    (its mapping's AnonHugePages over its Rss in /proc/self/smaps), or None where that
    file is not there.  torch allocates on 4 KiB pages unless THP_MEM_ALLOC_ENABLE=1 is set
    (where transparent huge pages are "madvise", the usual default); a random gather of
    dense rows from tens of MiB on 4 KiB pages misses the TLB on nearly every row."""
    t = torch.ones(mib << 18)
    p = t.data_ptr()
    hit, rss, huge = False, 0, 0
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    hit = lo <= p < hi
                elif hit and head == "Rss:":
                    rss = int(line.split()[1])
                elif hit and head == "AnonHugePages:":
                    huge = int(line.split()[1])
    except (OSError, ValueError):
        return None
    return huge / rss if rss else None


def parallel_probe(repeat=15):
    """Health of 2-thread parallel regions: a 512×512×256 torch.mm (~0.8 ms on 2 idle
    cores) with all threads and with one.  When the host deschedules a vCPU, the
    all-thread time jumps to multiples of ~4-8 ms and every parallel kernel (scorch's and
    torch's alike) is distorted: the run then says so."""
    D, X = torch.rand(512, 512), torch.rand(512, 256)
    t_all = median_time(lambda: torch.mm(D, X), repeat=repeat, warmup=3)
    nt = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t_one = median_time(lambda: torch.mm(D, X), repeat=repeat, warmup=2)
    finally:
        torch.set_num_threads(nt)
    return {"mm512_all_threads_ms": t_all * 1e3, "mm512_one_thread_ms": t_one * 1e3}


def report_parallel(p, when):
    ok = p["mm512_all_threads_ms"] < 1.5 * p["mm512_one_thread_ms"]
    print(f"parallel-region probe ({when}): 512x512x256 mm {p['mm512_all_threads_ms']:.2f} ms "
          f"on all threads vs {p['mm512_one_thread_ms']:.2f} ms on one"
          + ("" if ok else "  ** WARNING: parallel regions are stalling (host contention); "
             "timings of this run are unreliable **"), flush=True)
    return ok


# --------------------------------------------------------------------------- cases

def torch_csr(m, dtype):
    return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int32)),
                                   torch.from_numpy(m.indices.astype(np.int32)),
                                   torch.from_numpy(m.data.astype(dtype)), m.shape)


def traffic(kernel, m, K, vb, model, out_nnz=None):
    """Modelled bytes: (min, no-reuse)."""
    n, ncols = m.shape
    nnz = m.nnz
    A = nnz * (4 + vb) + (n + 1) * 4
    if kernel == "spmv":
        return A + ncols * vb + n * vb, A + nnz * vb + n * vb
    if kernel == "spmm":
        return A + ncols * K * vb + n * K * vb, A + nnz * K * vb + n * K * vb
    if kernel == "spmmbt":  # A·Bᵀ, B dense K × ncols: as SpMM (B read once at least)
        return A + ncols * K * vb + n * K * vb, A + nnz * K * vb + n * K * vb
    if kernel == "spmmt":   # Aᵀ·G: G's rows gathered, one output row per column of A
        return A + n * K * vb + ncols * K * vb, A + nnz * K * vb + ncols * K * vb
    if kernel == "sddmm":
        return (A + n * K * vb + ncols * K * vb + nnz * vb,
                A + n * K * vb + nnz * K * vb + nnz * vb)
    return math.nan, math.nan


class Bench:
    def __init__(self, args, probes):
        self.args = args
        self.probes = probes
        self.rows = []
        self.skipped = []
        self.repeat, self.budget = (7, 0.25) if args.quick else (9, 2.0)
        self.order_rng = random.Random(0)

    def time_all(self, fns, big=False, warm=("scorch", "torch")):
        """Medians (s) of each candidate, timed in rounds (one call of each per round, after
        one warm-up call each) so that drifting machine load hits every candidate alike.  The
        order is a fresh permutation every round (seeded): the call after another
        library's finds the shared OpenMP pool asleep, and the call after the dense
        baseline finds every cache swept, so no candidate may always follow the same one.
        (Rotating one list keeps each candidate's predecessor: scorch, listed first,
        followed the dense baseline in 3 of 4 rounds, up to 2x its warm time on small
        matrices.)  ``warm``: the candidates the correctness check has just called, which
        need no warm-up call (a quick run's largest cost is the 3-round floor of the
        baselines' calls: on 2026-11-28 its candidates' medians summed to 15.7 s a round)."""
        repeat = (3 if self.args.quick else 5) if big else self.repeat
        budget = self.budget * (2 if big else 1) * len(fns)
        return time_rounds(fns, repeat, budget, self.order_rng, warm)

    def skip(self, matrix, what, why):
        self.skipped.append({"matrix": matrix, "case": what, "why": why})
        print(f"  skipped {what} on {matrix}: {why}", flush=True)

    def record(self, matrix, kind, kernel, K, dtype, m, model, cands, check, out_nnz=None):
        vb = 4 if dtype == "f32" else 8
        t_s = cands.pop("scorch")
        row = {"matrix": matrix, "kind": kind, "kernel": kernel, "K": K, "dtype": dtype,
               "rows": m.shape[0], "cols": m.shape[1], "nnz": int(m.nnz), "model": model,
               "scorch_ms": t_s * 1e3, "check": check}
        for k in ("torch", "scipy", "dense"):
            t = cands.get(k)
            row[f"{k}_ms"] = t * 1e3 if t else None
            row[f"vs_{k}"] = t_s / t if t else None
        bmin, bnr = traffic(kernel, m, K, vb, model)
        cache = self.probes["cache_MiB"] * 2**20
        if model == "noreuse" and m.shape[1] * max(K, 1) * vb <= cache / 2:
            model = "min"      # the gathered dense operand stays in cache: no-reuse is moot
        row["model"] = model
        b = bmin if model == "min" else bnr
        row["bytes_min"], row["bytes_noreuse"] = bmin, bnr
        row["GBps"] = b / t_s / 1e9 if b == b else None
        row["pct_bw"] = (100 * row["GBps"] / self.probes["triad_GBps"]
                         if b == b and bmin > cache else None)
        row["pct_rows"] = (100 * row["GBps"] / self.probes["rows_GBps"]
                           if row["pct_bw"] is not None and model == "noreuse" else None)
        if out_nnz is not None:
            row["out_nnz"] = int(out_nnz)
        self.rows.append(row)
        f = lambda v, w=8, p=2: f"{v:>{w}.{p}f}" if v is not None else f"{'-':>{w}}"
        label = kernel + (f" K={K}" if K else "")
        print(f"{matrix[:34]:<35}{label:<13}{dtype:<4}{m.nnz:>10}{row['scorch_ms']:>11.3f}"
              f"{f(row['torch_ms'], 10, 3)}{f(row['scipy_ms'], 10, 3)}{f(row['dense_ms'], 10, 3)}"
              f"{f(row['vs_torch'])}{f(row['vs_scipy'])}{f(row['vs_dense'])}"
              f"{f(row['GBps'], 7, 1)}{f(row['pct_bw'], 6, 0)}{f(row['pct_rows'], 6, 0)}"
              f" {model[:2]:<3}{check}",
              flush=True)

    # ----------------------------------------------------------------- kernels

    def run_matrix(self, name, kind, m32, model, dtype, kernels, Ks):
        npdt = np.float32 if dtype == "f32" else np.float64
        tdt = torch.float32 if dtype == "f32" else torch.float64
        vb = 4 if dtype == "f32" else 8
        m = m32.astype(npdt)
        m.indptr = m32.indptr.astype(np.int32)
        m.indices = m32.indices.astype(np.int32)
        n, nc = m.shape
        A = scorch.to_sparse(m, "csr")
        tA = torch_csr(m, npdt)
        dense_ok = n * nc * vb < DENSE_LIMIT
        D = torch.from_numpy(m.toarray()) if dense_ok else None
        big = m.nnz > 5_000_000
        g = torch.Generator().manual_seed(0)
        rnd = lambda *s: torch.rand(*s, generator=g, dtype=tdt)

        def close(a, b):
            tol = 1e-3 if dtype == "f32" else 1e-9
            a, b = a.double(), b.double()
            err = (a - b).abs().max().item() if a.numel() else 0.0
            return "ok" if err <= tol * max(1.0, b.abs().max().item()) else f"ERR {err:.2g}"

        if "spmv" in kernels:
            x = rnd(nc)
            xn = x.numpy()
            y = scorch.einsum("ij,j->i", A, x)
            chk = close(y, torch.mv(tA, x))
            c = {"scorch": lambda: scorch.einsum("ij,j->i", A, x),
                 "torch": lambda: torch.mv(tA, x), "scipy": lambda: m @ xn}
            if D is not None:
                c["dense"] = lambda: torch.mv(D, x)
            c = self.time_all(c, big)
            self.record(name, kind, "spmv", 0, dtype, m, model, c, chk)

        for K in Ks if "spmm" in kernels else ():
            foot = (n + nc) * K * vb * 4
            if foot > MEM_LIMIT:
                self.skip(name, f"spmm K={K} {dtype}", f"needs ~{foot / 2**30:.0f} GiB")
                continue
            X = rnd(nc, K)
            Xn = X.numpy()
            y = scorch.einsum("ij,jk->ik", A, X)
            chk = close(y, torch.sparse.mm(tA, X))
            del y
            c = {"scorch": lambda: scorch.einsum("ij,jk->ik", A, X),
                 "torch": lambda: torch.sparse.mm(tA, X), "scipy": lambda: m @ Xn}
            if D is not None:
                c["dense"] = lambda: torch.mm(D, X)
            c = self.time_all(c, big)
            self.record(name, kind, "spmm", K, dtype, m, model, c, chk)
            del X, Xn
            gc.collect()

        if "spmmt" in kernels and 64 in Ks:
            K = 64
            G = rnd(n, K)
            Gn = G.numpy()
            tAT = tA.t()
            y = scorch.einsum("ik,ij->jk", G, A)
            chk = close(y, torch.sparse.mm(tAT, G))
            del y
            c = {"scorch": lambda: scorch.einsum("ik,ij->jk", G, A),
                 "torch": lambda: torch.sparse.mm(tAT, G), "scipy": lambda: m.T @ Gn}
            if D is not None:
                c["dense"] = lambda: torch.mm(D.t(), G)
            c = self.time_all(c, big)
            self.record(name, kind, "spmmt", K, dtype, m, model, c, chk)
            del G, Gn
            gc.collect()

        if "spmmbt" in kernels and 64 in Ks:
            K = 64   # A·Bᵀ, B dense (K, ncols): what F.linear runs on a sparse input
            B = rnd(K, nc)
            Bn = B.numpy()
            y = scorch.einsum("ij,kj->ik", A, B)
            chk = close(y, torch.sparse.mm(tA, B.t()))
            del y
            c = {"scorch": lambda: scorch.einsum("ij,kj->ik", A, B),
                 "torch": lambda: torch.sparse.mm(tA, B.t()), "scipy": lambda: m @ Bn.T}
            if D is not None:
                c["dense"] = lambda: torch.mm(D, B.t())
            c = self.time_all(c, big)
            self.record(name, kind, "spmmbt", K, dtype, m, model, c, chk)
            del B, Bn
            gc.collect()

        for K in Ks if "sddmm" in kernels else ():
            U, V = rnd(n, K), rnd(nc, K)
            VT = V.t().contiguous()
            y = scorch.einsum("ij,ik,jk->ij", A, U, V)
            ref = torch.sparse.sampled_addmm(tA, U, VT, beta=0.0)
            # scorch multiplies by A's values; sampled_addmm samples U·Vᵀ on A's pattern.
            chk = close(y.values(), ref.values() * tA.values())
            del y, ref
            c = {"scorch": lambda: scorch.einsum("ij,ik,jk->ij", A, U, V),
                 "torch": lambda: torch.sparse.sampled_addmm(tA, U, VT, beta=0.0)}
            # scipy has no SDDMM: gathered rows, an nnz×K temporary (not in --quick: on
            # the large inputs this stand-in took 10 s of a 126 s quick run's floor)
            if m.nnz * K * vb <= (256 << 20) and not self.args.quick:
                r = np.repeat(np.arange(n, dtype=np.int32), np.diff(m.indptr))
                Un, Vn = U.numpy(), V.numpy()
                c["scipy"] = lambda: sp.csr_array(
                    (m.data * np.einsum("ij,ij->i", Un[r], Vn[m.indices]), m.indices, m.indptr),
                    shape=m.shape)
            if D is not None:
                c["dense"] = lambda: torch.mm(U, VT).mul_(D)
            c = self.time_all(c, big)
            self.record(name, kind, "sddmm", K, dtype, m, model, c, chk)
            del U, V, VT
            gc.collect()

        if "spgemm" in kernels:
            square = n == nc
            B = m if square else m.T.tocsr()
            colcnt = np.bincount(m.indices, minlength=nc).astype(np.int64)
            flops = int((colcnt * np.diff(B.indptr).astype(np.int64)).sum()) if square else \
                int((colcnt ** 2).sum())
            # f64 uniform-1M A·A (100 M multiply-adds and output entries) was OOM-killed at
            # 24 GB in two sessions' full runs (scorch's product alone peaks at 1.7 GB,
            # torch's at 4.5, scipy's at 2): f64 is capped below it
            limit = 5e7 if dtype == "f64" else 2e8 if self.args.quick else 1.2e9
            if flops > limit:
                self.skip(name, f"spgemm {dtype}",
                          f"{flops / 1e6:.0f} M multiply-adds (> {limit / 1e6:.0f} M)")
            else:
                expr = "ij,jk->ik" if square else "ij,kj->ik"
                tB = tA if square else torch_csr(B.astype(npdt), npdt)
                C = scorch.einsum(expr, A, A)
                ref = sp.csr_array(m @ B)
                ref.sort_indices()
                out_nnz = ref.nnz
                chk = "ok"
                if C.nnz != ref.nnz:
                    chk = f"ERR nnz {C.nnz} vs {ref.nnz}"
                elif ref.nnz <= 20_000_000:
                    Cs = sp.csr_array(C.to_scipy())
                    Cs.sort_indices()
                    chk = close(torch.from_numpy(Cs.data),
                                torch.from_numpy(ref.data))
                del C
                bigg = flops > 5e7
                c = {"scorch": lambda: scorch.einsum(expr, A, A),
                     "torch": lambda: torch.sparse.mm(tA, tB), "scipy": lambda: m @ B}
                if D is not None and n * nc * B.shape[1] * 2 < DENSE_FLOP_LIMIT:
                    DB = D if square else D.t().contiguous()
                    c["dense"] = lambda: torch.mm(D, DB)
                c = self.time_all(c, bigg, warm=("scorch", "scipy"))
                self.record(name, kind, "spgemm", 0, dtype, m, model, c, chk, out_nnz)
        gc.collect()

    def run_dlmc(self, name, W, dtype, batch=256):
        """y = x @ Wᵀ as its transpose: Y(out, batch) = W(out, in) @ Xᵀ(in, batch)."""
        npdt = np.float32 if dtype == "f32" else np.float64
        tdt = torch.float32 if dtype == "f32" else torch.float64
        m = W.astype(npdt)
        A = scorch.to_sparse(m, "csr")
        tA = torch_csr(m, npdt)
        D = torch.from_numpy(m.toarray())
        XT = torch.rand(m.shape[1], batch, generator=torch.Generator().manual_seed(0),
                        dtype=tdt)
        XTn = XT.numpy()
        tol = 1e-3 if dtype == "f32" else 1e-9
        y = scorch.einsum("ij,jk->ik", A, XT)
        ref = torch.mm(D, XT)
        chk = "ok" if torch.allclose(y, ref, rtol=tol, atol=tol * ref.abs().max().item()) \
            else "ERR"
        c = self.time_all({"scorch": lambda: scorch.einsum("ij,jk->ik", A, XT),
                           "torch": lambda: torch.sparse.mm(tA, XT),
                           "scipy": lambda: m @ XTn, "dense": lambda: torch.mm(D, XT)},
                          warm=("scorch", "dense"))
        self.record(name, "dlmc", "spmm", batch, dtype, m, "min", c, chk)


# --------------------------------------------------------------------------- summary

def summarize(rows):
    groups = {}
    for r in rows:
        key = f"{'dlmc ' if r['kind'] == 'dlmc' else ''}{r['kernel']}" + \
            (f" K={r['K']}" if r["K"] else "") + f" {r['dtype']}"
        groups.setdefault(key, []).append(r)
    out = []
    for key, sel in groups.items():
        s = {"group": key, "cases": len(sel)}
        for b in ("torch", "scipy", "dense"):
            vals = [r[f"vs_{b}"] for r in sel if r[f"vs_{b}"]]
            s[f"geo_vs_{b}"] = geomean(vals, empty=None)
            if vals:
                w = max((r for r in sel if r[f"vs_{b}"]), key=lambda r: r[f"vs_{b}"])
                s[f"worst_vs_{b}"] = (w["matrix"], w[f"vs_{b}"])
        pct = [r["pct_bw"] for r in sel if r["pct_bw"]]
        s["median_pct_bw"] = float(np.median(pct)) if pct else None
        pct = [r["pct_rows"] for r in sel if r.get("pct_rows")]
        s["median_pct_rows"] = float(np.median(pct)) if pct else None
        out.append(s)
    return out


def print_summary(summary):
    print("\nsummary: geometric mean of scorch / baseline (< 1: scorch faster), "
          "worst matrix vs torch")
    print(f"{'kernel':<22}{'n':>4}{'/torch':>8}{'/scipy':>8}{'/dense':>8}{'%BW':>6}{'%rows':>6}  "
          f"worst vs torch")
    f = lambda v, w=8: f"{v:>{w}.2f}" if v is not None else f"{'-':>{w}}"
    for s in summary:
        w = s.get("worst_vs_torch")
        pb, pr = s["median_pct_bw"], s["median_pct_rows"]
        print(f"{s['group']:<22}{s['cases']:>4}{f(s['geo_vs_torch'])}{f(s['geo_vs_scipy'])}"
              f"{f(s['geo_vs_dense'])}{(f'{pb:6.0f}' if pb else '     -')}"
              f"{(f'{pr:6.0f}' if pr else '     -')}  "
              f"{f'{w[1]:.2f} ({w[0]})' if w else '-'}")


def plot(rows, summary, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = [s["group"] for s in summary]
    fig, axes = plt.subplots(3, 1, figsize=(max(10, 0.55 * len(groups)), 12), sharex=True)
    for ax, b in zip(axes, ("torch", "scipy", "dense")):
        for gi, s in enumerate(summary):
            sel = [r for r in rows if _gkey(r) == s["group"] and r[f"vs_{b}"]]
            ys = [1 / r[f"vs_{b}"] for r in sel]
            xs = gi + np.linspace(-0.25, 0.25, len(ys)) if len(ys) > 1 else [gi] * len(ys)
            ax.scatter(xs, ys, s=12, alpha=0.6,
                       c=["tab:red" if y < 1 else "tab:green" for y in ys])
            if s[f"geo_vs_{b}"]:
                ax.plot([gi - 0.35, gi + 0.35], [1 / s[f"geo_vs_{b}"]] * 2, "k-", lw=2)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(f"speedup vs {b}\n({b} time / scorch time)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[-1].set_xticks(range(len(groups)))
    axes[-1].set_xticklabels(groups, rotation=60, ha="right", fontsize=8)
    axes[0].set_title("scorch kernels: speedup per matrix (> 1: scorch faster; bar: geo-mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _gkey(r):
    return f"{'dlmc ' if r['kind'] == 'dlmc' else ''}{r['kernel']}" + \
        (f" K={r['K']}" if r["K"] else "") + f" {r['dtype']}"


# --------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.kernels",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="5 shared matrices, small synthetic inputs (f32 only), fewer repetitions, "
                         "no scipy stand-in for SDDMM (< 2 min)")
    ap.add_argument("--only", default="spmv,spmm,spmmt,spmmbt,sddmm,spgemm,dlmc",
                    help="comma list of kernels/sets: spmv,spmm,spmmt,spmmbt,sddmm,spgemm,dlmc,"
                         "synthetic,shared (default: all)")
    ap.add_argument("--dtypes", default="f32,f64", help="f32,f64 (f64 runs a subset)")
    ap.add_argument("--matrices", help="comma list of shared matrix names to run")
    ap.add_argument("--hugepages", action="store_true",
                    help="put torch's tensors of 2 MiB and more on transparent huge pages "
                         "(sets THP_MEM_ALLOC_ENABLE=1 for this run; scorch's own large "
                         "arrays always ask for them): the dense operands of the large "
                         "random inputs then stop missing the TLB, for every library alike")
    ap.add_argument("--json", default="bench_out/kernels.json")
    ap.add_argument("--png", default="bench_out/kernels.png")
    args = ap.parse_args(argv)
    if args.hugepages:   # torch reads it at its first large allocation: before any here
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
    only = set(args.only.split(","))
    bad = only - {"spmv", "spmm", "spmmt", "spmmbt", "sddmm", "spgemm", "dlmc", "shared",
                  "synthetic"}
    if bad:
        ap.error(f"unknown --only item(s): {', '.join(sorted(bad))}")
    kernels = only & {"spmv", "spmm", "spmmt", "spmmbt", "sddmm", "spgemm"}
    sets = (only & {"shared", "synthetic"}) or ({"shared", "synthetic"} if kernels else set())
    if "dlmc" in only:
        sets.add("dlmc")
    if not kernels and sets - {"dlmc"}:
        kernels = {"spmv", "spmm", "spmmt", "spmmbt", "sddmm", "spgemm"}
    dtypes = args.dtypes.split(",")
    t_start = time.perf_counter()
    for p in (args.json, args.png):
        if p and os.path.dirname(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)

    print(f"scorch kernels benchmark  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  "
          f"{platform.processor() or platform.machine()}  cpus {os.cpu_count()}  "
          f"torch {torch.__version__} threads {torch.get_num_threads()}  "
          f"scipy {sp.__name__ and __import__('scipy').__version__} (1 thread)")
    print(f"load average before: {os.getloadavg()[0]:.2f} (other processes distort timings "
          f"on this 2-core machine; times in multiples of ~4-8 ms are a sign of it)")
    huge = huge_page_share()
    if huge is None:
        pages = "page size not readable here"
    elif os.environ.get("THP_MEM_ALLOC_ENABLE") == "1":
        pages = f"{huge:.0%} on 2 MiB pages (THP_MEM_ALLOC_ENABLE=1)"
    else:
        pages = f"{huge:.0%} on 2 MiB pages (THP_MEM_ALLOC_ENABLE unset; --hugepages sets it)"
    print(f"torch's large tensors: {pages}")
    probes = {"huge_page_share": huge,
              **stream_probe(16 << 20 if args.quick else 32 << 20),
              **gather_probe(8 << 20 if args.quick else 16 << 20),
              **(row_probe(1 << 18, 2_000_000) if args.quick else row_probe())}
    probes.update(cache_probe(probes["triad_GBps"]))
    pp = parallel_probe()
    probes.update({k + "_start": v for k, v in pp.items()})
    report_parallel(pp, "start")
    print(f"limits measured now: STREAM triad {probes['triad_GBps']:.1f} GB/s "
          f"(copy {probes['copy_GBps']:.1f}), random 4-byte gather from 4 MiB "
          f"{probes['gather_ns_per_elem']:.2f} ns/element "
          f"(sequential {probes['sequential_ns_per_elem']:.2f}), random 256-byte rows from "
          f"{probes['rows_table_MiB']:.0f} MiB {probes['rows_GBps']:.1f} GB/s (embedding_bag), "
          f"cache {probes['cache_MiB']:.0f} MiB (read at 1.5x STREAM; Linux reports "
          f"{LLC_BYTES / 2**20:.0f})")

    # warm the JIT for every (expression, dtype) before anything is timed
    for dt in (torch.float32, torch.float64):
        w = scorch.to_sparse(torch.eye(4, dtype=dt), "csr")
        scorch.einsum("ij,j->i", w, torch.ones(4, dtype=dt))
        scorch.einsum("ij,jk->ik", w, torch.ones(4, 3, dtype=dt))
        scorch.einsum("ik,ij->jk", torch.ones(4, 3, dtype=dt), w)
        scorch.einsum("ij,ik,jk->ij", w, torch.ones(4, 3, dtype=dt), torch.ones(4, 3, dtype=dt))
        scorch.einsum("ij,jk->ik", w, w)

    probes["cpu"] = cpu_model()
    probes["vec_bytes"], probes["gathers"] = vector_width()
    print(f"cpu: {probes['cpu']}; scorch writes {probes['vec_bytes']}-byte vectors, "
          f"gathers {probes['gathers']} (measured, or SCORCH_GATHERS)")

    bench = Bench(args, probes)
    hdr = (f"{'matrix':<35}{'kernel':<13}{'dt':<4}{'nnz':>10}{'scorch ms':>11}{'torch ms':>10}"
           f"{'scipy ms':>10}{'dense ms':>10}{'/torch':>8}{'/scipy':>8}{'/dense':>8}"
           f"{'GB/s':>7}{'%BW':>6}{'%rows':>6} mdl check")
    Ks = [16, 64] if args.quick else [16, 64, 256]

    quick_names = {"bcsstk13", "cryg2500", "wiki-Vote", "email-Enron", "usroads"}
    names = set(args.matrices.split(",")) if args.matrices else \
        (quick_names if args.quick else None)
    shared = list(shared_matrices(names)) if "shared" in sets else []
    syn = synthetic(args.quick) if "synthetic" in sets else []
    dlmc = dlmc_matrices(2 if args.quick else 8) if "dlmc" in sets else []
    if not shared and "shared" in sets:
        print(f"(no shared matrices found under {SHARED})")
    print(f"inputs ready after {time.perf_counter() - t_start:.1f} s\n")
    print(hdr)
    for dtype in dtypes:
        f64 = dtype == "f64"
        ks = [64] if f64 else Ks
        # (--quick leaves A·Bᵀ to f32: with it in f64 too, a quick run took 122 s on a busy
        # machine, past its 2 minutes)
        kd = kernels - {"spmmbt"} if f64 and args.quick else kernels
        for name, m in shared:
            model = "min" if name in MIN_MODEL else "noreuse"
            bench.run_matrix(name, "shared", m, model, dtype, kd, ks)
        # (--quick leaves the synthetic inputs to f32 too: on a slow 2-vCPU VM they made
        # the f64 half of a quick run 69 s of its 146)
        for name, m, model in syn if not (f64 and args.quick) else ():
            bench.run_matrix(name, "synthetic", m, model, dtype, kd,
                             [16, 64] if f64 and not args.quick else ks)
        if "dlmc" in sets and not f64:
            for name, W in dlmc:
                bench.run_dlmc(name, W, dtype)
    if bench.skipped:
        print("\nskipped:")
        for s in bench.skipped:
            print(f"  {s['case']} on {s['matrix']}: {s['why']}")
    summary = summarize(bench.rows)
    print_summary(summary)
    elapsed = time.perf_counter() - t_start
    probes["loadavg_end"] = os.getloadavg()[0]
    pp = parallel_probe()
    probes.update({k + "_end": v for k, v in pp.items()})
    report_parallel(pp, "end")
    print(f"\nelapsed {elapsed:.0f} s; ratios compare medians from this run only")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"probes": probes, "threads": torch.get_num_threads(),
                       "argv": sys.argv[1:], "elapsed_s": elapsed, "rows": bench.rows,
                       "skipped": bench.skipped, "summary": summary}, f, indent=1)
        print(f"wrote {args.json}")
    if args.png:
        try:
            plot(bench.rows, summary, args.png)
            print(f"wrote {args.png}")
        except ImportError:
            print("matplotlib not installed: no plot (pip install matplotlib)")


if __name__ == "__main__":
    main()
