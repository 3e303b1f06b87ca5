"""python -m scorch: the main demo on the bundled Cora graph.

By default: a two-layer GCN trained on Cora with the adjacency as a scorch CSR tensor and
as a torch.sparse CSR tensor, side by side (test accuracy, median time per epoch); see
scorch/_gcn.py.  ``--convert``: the format-conversion demo below.

The conversion demo builds Cora's adjacency matrix and feature matrix as scorch tensors,
converts them through every named format, checks each against the dense result, and times
scorch's conversions against torch's own (medians of several runs, printed as ratios).
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


def positive(text):
    """An argparse type: an int of at least 1."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m scorch",
        description="scorch demo on the bundled Cora graph: a GCN trained with scorch and "
                    "with torch.sparse (default), or the format conversions (--convert).")
    ap.add_argument("--convert", action="store_true",
                    help="run the format-conversion demo instead of the GCN")
    ap.add_argument("--epochs", type=positive, default=200, help="GCN training epochs")
    ap.add_argument("--seed", type=int, default=0, help="GCN initialisation and dropout seed")
    ap.add_argument("--threads", type=positive, default=None,
                    help="threads for torch and scorch")
    ap.add_argument("--repeat", type=positive, default=7,
                    help="conversion timing repetitions (median)")
    args = ap.parse_args(argv)
    if not args.convert:
        import warnings

        from ._gcn import main as gcn_main

        with warnings.catch_warnings():   # torch's "sparse CSR support is in beta" notice
            warnings.simplefilter("ignore", UserWarning)
            gcn_main(["--epochs", str(args.epochs), "--seed", str(args.seed)]
                     + (["--threads", str(args.threads)] if args.threads else []))
        return
    if args.threads:
        torch.set_num_threads(args.threads)

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
