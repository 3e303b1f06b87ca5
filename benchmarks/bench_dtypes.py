"""Products in the value dtypes torch.sparse's CSR kernels refuse: bfloat16, float16, int32
and int64 (and on request int16, int8 and uint8), scorch against what torch offers for
them, in the same run.

    python -m benchmarks.bench_dtypes [--quick] [--dtypes bfloat16,float16,int32,int64]
                                      [--json out.json]

torch.sparse's CSR kernels (MKL) refuse these dtypes on the CPU; its COO ``sparse.mm`` /
``mv`` take them, so COO is the torch baseline here, with dense ``torch.mm`` in the same
dtype where the matrix fits.  scorch stores half values and computes in float32 (each call
reads float32 copies of the half operands), and computes integers as integers (int16,
int8 and uint8 in int32, from int32 copies); the
``/f32`` column is the same product on float32 tensors (for the half types, the cost of
the copies).  For each matrix and dtype: SpMV, SpMM with K = 64, SDDMM with K = 64 (torch
has no SDDMM in these dtypes: against dense only).  Prints medians and ratios (< 1: scorch
is faster) and their geometric means; "check" is whether scorch's result equals the
product of the same operands computed in a wider float (float32 for the half types,
rounded once; float64 for the integers, whose small values keep it exact, then wrapped
into the dtype through int64).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import warnings

import numpy as np
import torch

import scorch

from .common import geomean, shared_matrices, time_rounds

DENSE_LIMIT = 200e6   # bytes of the dense half matrix: larger ones have no dense baseline
QUICK = ("bcsstk13", "cryg2500", "wiki-Vote", "email-Enron")
DTYPES = (torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int16, torch.int8,
          torch.uint8)   # what --dtypes takes


def cases(m, dtype, K=64):
    """(kernel, {candidate: fn}, check): check() compares scorch's result with torch's."""
    n, k = m.shape
    g = torch.Generator().manual_seed(0)
    coo = m.tocoo()
    idx = torch.from_numpy(np.stack([coo.row, coo.col]).astype(np.int64))
    vals = torch.from_numpy(coo.data)
    integer = not dtype.is_floating_point
    if integer:   # (small integers: 1 or 2 for the matrix, -3..3 for the dense operands)
        vals = vals.round()

    def rand(*shape):
        r = torch.rand(*shape, generator=g)
        return (r * 7).floor() - 3 if integer else r

    t_coo = torch.sparse_coo_tensor(idx, vals.to(dtype), (n, k)).coalesce()
    A = scorch.to_sparse(torch.sparse_coo_tensor(idx, vals, (n, k)), "csr")
    Ah = A.to(dtype)
    dense = (t_coo.to_dense() if n * k * dtype.itemsize <= DENSE_LIMIT else None)
    x = rand(k)
    X = rand(k, K)
    U, V = rand(n, K), rand(k, K)
    xh, Xh, Uh, Vh = (t.to(dtype) for t in (x, X, U, V))
    out = []
    spmv = {"scorch": lambda: Ah @ xh, "f32": lambda: A @ x,
            "torch": lambda: torch.mv(t_coo, xh)}
    spmm = {"scorch": lambda: Ah @ Xh, "f32": lambda: A @ X,
            "torch": lambda: torch.sparse.mm(t_coo, Xh)}
    sddmm = {"scorch": lambda: torch.einsum("ij,ik,jk->ij", Ah, Uh, Vh),
             "f32": lambda: torch.einsum("ij,ik,jk->ij", A, U, V)}
    if dense is not None:
        spmv["dense"] = lambda: torch.mv(dense, xh)
        spmm["dense"] = lambda: torch.mm(dense, Xh)
        sddmm["dense"] = lambda: dense * (Uh @ Vh.T)
    # The reference: the product of the same operands in a wider float, rounded once.
    wide = torch.float64 if integer else torch.float32
    aw = Ah.to(wide)
    back = (lambda t: t.to(torch.int64).to(dtype)) if integer else (lambda t: t.to(dtype))
    out.append(("spmv", spmv, lambda: (Ah @ xh, back(aw @ xh.to(wide)))))
    out.append((f"spmm K={K}", spmm, lambda: (Ah @ Xh, back(aw @ Xh.to(wide)))))
    out.append((f"sddmm K={K}", sddmm,   # (the values: both keep A's pattern)
                lambda: (torch.einsum("ij,ik,jk->ij", Ah, Uh, Vh).values(),
                         back(torch.einsum("ij,ik,jk->ij", aw, Uh.to(wide), Vh.to(wide))
                              .values()))))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_dtypes", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="four matrices, fewer repetitions")
    ap.add_argument("--dtypes", default="bfloat16,float16,int32,int64",
                    help="comma list of value dtypes (default: %(default)s)")
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    dtypes = []
    for name in args.dtypes.split(","):
        dt = getattr(torch, name.strip(), None)
        if dt not in DTYPES:
            ap.error(f"--dtypes: {name!r} is not one of "
                     f"{', '.join(str(d).split('.')[1] for d in DTYPES)}")
        dtypes.append(dt)
    warnings.simplefilter("ignore", UserWarning)   # torch's sparse beta notices
    repeat, budget = (5, 0.3) if args.quick else (9, 1.0)
    print(f"threads {torch.get_num_threads()}  torch {torch.__version__}")
    print(f"{'matrix':<20} {'kernel':<11} {'dtype':<9} {'scorch ms':>9} {'torch ms':>9} "
          f"{'/torch':>7} {'/f32':>6} {'/dense':>7} check")
    rows = []
    rng = random.Random(0)
    for name, m in shared_matrices(QUICK if args.quick else None):
        for dtype in dtypes:
            for kernel, fns, check in cases(m, dtype):
                t = time_rounds(fns, repeat, budget * len(fns), rng)
                got, ref = check()
                ok = bool(torch.equal(got, ref))
                r = {"matrix": name, "kernel": kernel, "dtype": str(dtype).split(".")[1],
                     "ms": {k: v * 1e3 for k, v in t.items()}, "check": ok}
                for base in ("torch", "f32", "dense"):
                    r["/" + base] = t["scorch"] / t[base] if base in t else math.nan
                rows.append(r)
                print(f"{name:<20} {kernel:<11} {r['dtype']:<9} {t['scorch'] * 1e3:9.3f} "
                      + (f"{t['torch'] * 1e3:9.3f} " if "torch" in t else f"{'-':>9} ")
                      + " ".join(f"{r[c]:{w}.2f}" if math.isfinite(r[c]) else f"{'-':>{w}}"
                                 for c, w in (("/torch", 7), ("/f32", 6), ("/dense", 7)))
                      + (" ok" if ok else " MISMATCH"), flush=True)
    print("\nsummary: geometric mean of scorch / baseline (< 1: scorch faster)")
    print(f"{'kernel':<11} {'dtype':<9} {'n':>3} {'/torch':>7} {'/f32':>6} {'/dense':>7} "
          "worst vs torch")
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        for dt in (str(d).split(".")[1] for d in dtypes):
            sel = [r for r in rows if r["kernel"] == kernel and r["dtype"] == dt]
            if not sel:
                continue
            worst = max(sel, key=lambda r: r["/torch"] if math.isfinite(r["/torch"]) else -1)
            w = (f"{worst['/torch']:.2f} ({worst['matrix']})"
                 if math.isfinite(worst["/torch"]) else "-")
            g = {c: geomean([r[c] for r in sel]) for c in ("/torch", "/f32", "/dense")}
            print(f"{kernel:<11} {dt:<9} {len(sel):>3} " + " ".join(
                f"{g[c]:{wd}.2f}" if math.isfinite(g[c]) else f"{'-':>{wd}}"
                for c, wd in (("/torch", 7), ("/f32", 6), ("/dense", 7))) + f" {w}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {args.json}")
    if not all(r["check"] for r in rows):
        raise SystemExit("a scorch result differs from torch's")


if __name__ == "__main__":
    main()
