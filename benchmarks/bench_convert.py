"""Conversion times: scorch against torch's own conversions and scipy, in the same run.

    python -m benchmarks.bench_convert [--quick] [--json out.json]

For each matrix: dense -> CSR (where the dense matrix fits), coalesced COO -> CSR,
uncoalesced COO -> CSR (torch: coalesce + to_sparse_csr), CSR -> CSC, CSR -> dense.
Prints medians and ratios scorch / torch and scorch / scipy (< 1: scorch is faster).
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch

import scorch

from .common import geomean, median_time, powerlaw, shared_matrices

DENSE_LIMIT = 400e6  # bytes: skip dense conversions above this


def bench_matrix(name, m, repeat, budget):
    rows = []
    n, k = m.shape
    coo = m.tocoo()
    t_coo = torch.sparse_coo_tensor(
        torch.from_numpy(np.stack([coo.row, coo.col]).astype(np.int64)),
        torch.from_numpy(coo.data), (n, k)).coalesce()
    # An uncoalesced copy: entries shuffled and every 10th duplicated (values halved).
    rng = np.random.default_rng(1)
    perm = rng.permutation(coo.nnz)
    dup = perm[::10]
    r = np.concatenate([coo.row[perm], coo.row[dup]]).astype(np.int64)
    c = np.concatenate([coo.col[perm], coo.col[dup]]).astype(np.int64)
    v = np.concatenate([coo.data[perm], coo.data[dup]])
    t_unc = torch.sparse_coo_tensor(torch.from_numpy(np.stack([r, c])), torch.from_numpy(v),
                                    (n, k))
    sp_unc = __import__("scipy.sparse", fromlist=["coo_array"]).coo_array((v, (r, c)),
                                                                          shape=(n, k))
    t_csr = t_coo.to_sparse_csr()
    A = scorch.to_sparse(t_coo, "csr")

    def case(what, ours, theirs, scipy_fn=None):
        to = median_time(ours, repeat, budget=budget)
        tt = median_time(theirs, repeat, budget=budget) if theirs else math.nan
        ts = median_time(scipy_fn, repeat, budget=budget) if scipy_fn else math.nan
        rows.append({"matrix": name, "conversion": what, "nnz": int(m.nnz),
                     "scorch_ms": to * 1e3, "torch_ms": tt * 1e3, "scipy_ms": ts * 1e3,
                     "vs_torch": to / tt, "vs_scipy": to / ts})

    if n * k * 4 <= DENSE_LIMIT:
        dense = torch.from_numpy(m.toarray())
        case("dense->csr", lambda: scorch.to_sparse(dense, "csr"), dense.to_sparse_csr,
             lambda: __import__("scipy.sparse", fromlist=["csr_array"]).csr_array(
                 dense.numpy()))
        case("csr->dense", A.to_dense, t_csr.to_dense, m.toarray)
    case("coo->csr", lambda: scorch.to_sparse(t_coo, "csr"), t_coo.to_sparse_csr, coo.tocsr)
    case("coo(dup)->csr", lambda: scorch.to_sparse(t_unc, "csr"),
         lambda: t_unc.coalesce().to_sparse_csr(), sp_unc.tocsr)
    case("csr->csc", lambda: A.to_format("csc"), t_csr.to_sparse_csc, m.tocsc)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_convert",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, smaller synthetic")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    args = ap.parse_args(argv)
    repeat, budget = (3, 1.0) if args.quick else (7, 5.0)
    print(f"threads: {torch.get_num_threads()}  (ratios are scorch / other: < 1 is faster)")
    inputs = list(shared_matrices())
    n_syn, nnz_syn = (200_000, 2_000_000) if args.quick else (1_000_000, 10_000_000)
    inputs.append((f"powerlaw-{n_syn // 1000}k-{nnz_syn // 1_000_000}M",
                   powerlaw(n_syn, nnz_syn)))
    rows = []
    hdr = (f"{'matrix':<22}{'conversion':<15}{'nnz':>10}{'scorch ms':>11}{'torch ms':>10}"
           f"{'scipy ms':>10}{'/torch':>8}{'/scipy':>8}")
    print(hdr)
    for name, m in inputs:
        for r in bench_matrix(name, m, repeat, budget):
            rows.append(r)
            print(f"{r['matrix']:<22}{r['conversion']:<15}{r['nnz']:>10}{r['scorch_ms']:>11.3f}"
                  f"{r['torch_ms']:>10.3f}{r['scipy_ms']:>10.3f}{r['vs_torch']:>8.2f}"
                  f"{r['vs_scipy']:>8.2f}", flush=True)
    print("\ngeometric mean of scorch / torch (and / scipy) per conversion:")
    for conv in dict.fromkeys(r["conversion"] for r in rows):
        sel = [r for r in rows if r["conversion"] == conv]
        worst = max(sel, key=lambda r: r["vs_torch"] if r["vs_torch"] == r["vs_torch"] else 0)
        print(f"  {conv:<15} torch {geomean([r['vs_torch'] for r in sel]):5.2f}   scipy "
              f"{geomean([r['vs_scipy'] for r in sel]):5.2f}   worst vs torch "
              f"{worst['vs_torch']:.2f} ({worst['matrix']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
