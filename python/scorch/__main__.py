"""python -m scorch: the main demo on the bundled Cora graph.

Builds Cora's adjacency matrix and feature matrix as scorch tensors, converts them through
every named format, checks each against the dense result, and times scorch's conversions
against torch's own (medians of several runs, printed as ratios).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import scorch
from scorch import datasets


def _median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m scorch",
        description="scorch demo: sparse formats and conversions on the bundled Cora graph.")
    ap.add_argument("--repeat", type=int, default=7, help="timing repetitions (median)")
    args = ap.parse_args(argv)

    data = datasets.cora()
    n = data["num_nodes"]
    A = scorch.from_edge_index(data["edge_index"], n)
    X = scorch.to_sparse(data["features"], "csr")
    print(f"Cora: {n} nodes, adjacency {A.format} nnz={A.nnz}, features {tuple(X.shape)} "
          f"{X.format} nnz={X.nnz} ({100 * X.nnz / X.numel():.2f}% dense)")
    dense_a = A.to_dense()
    print("\nformat conversions of the adjacency, checked against the dense matrix:")
    for fmt in ("csr", "csc", "coo", "dcsr", "dcsc", "dense"):
        B = A.to_format(fmt)
        ok = torch.equal(B.to_dense(), dense_a)
        print(f"  {fmt:>5}: levels {B.format.text:<24} stored {B.nnz:>8}  "
              f"{'ok' if ok else 'MISMATCH'}")
        if not ok:
            raise SystemExit(f"{fmt} conversion does not match the dense matrix")

    r = args.repeat
    feats = data["features"]
    coo = A.to_torch(torch.sparse_coo)
    csr_t = A.to_torch(torch.sparse_csr)
    rows = [
        ("dense -> csr (features)", lambda: scorch.to_sparse(feats, "csr"),
         lambda: feats.to_sparse_csr()),
        ("coo -> csr (adjacency)", lambda: scorch.to_sparse(coo, "csr"),
         lambda: coo.to_sparse_csr()),
        ("csr -> csc (adjacency)", lambda: A.to_format("csc"),
         lambda: csr_t.to_sparse_csc()),
        ("csr -> dense (features)", lambda: X.to_dense(), None),
    ]
    print(f"\nconversion times, median of {r} (ratio = scorch / torch; < 1: scorch faster):")
    for name, ours, theirs in rows:
        t_ours = _median_time(ours, r)
        if theirs is None:
            print(f"  {name:<26} scorch {t_ours * 1e3:8.3f} ms")
            continue
        t_theirs = _median_time(theirs, r)
        print(f"  {name:<26} scorch {t_ours * 1e3:8.3f} ms   torch {t_theirs * 1e3:8.3f} ms"
              f"   ratio {t_ours / t_theirs:5.2f}")


if __name__ == "__main__":
    main()
