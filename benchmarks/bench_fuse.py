"""Sampled products written as PyTorch, ``M * (Q @ K.T)``: scorch.compile's fused kernel
against the same line run eagerly and against what torch offers, in the same run.

    python -m benchmarks.bench_fuse [--quick] [--json out.json]

For each mask (the shared graphs' adjacency, and a random n × n mask at 0.5 % in --quick
and 0.1 % otherwise), with d = 64 float32 features:
  compiled  scorch.compile(lambda Q, K, M: M * (Q @ K.T))(Q, K, M), M a scorch CSR
  eager     M * (Q @ K.T) without scorch.compile: the n × n product, then M's entries
  dense     the same line on a dense mask (what a user without sparse tensors runs)
  sampled   torch.sparse.sampled_addmm(M_csr, Q, K.T, beta=0): torch's SDDMM (it samples
            the product at M's pattern; the others also multiply by M's values)
The eager and dense lines are skipped where the n × n product would pass 1 GB.  Prints
medians and ratios compiled / other (< 1: compiled is faster).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import warnings

import numpy as np
import scipy.sparse as sp
import torch

import scorch

from .common import geomean, shared_matrices, time_rounds

DENSE_LIMIT = 1 << 30   # bytes of the n × n product


def _masks(quick):
    names = ["wiki-Vote", "email-Enron", "p2p-Gnutella31"] if quick else \
        ["wiki-Vote", "email-Enron", "p2p-Gnutella31", "soc-Slashdot0902", "usroads"]
    for name, m in shared_matrices(names):
        yield name, m
    n = 8192 if quick else 16384
    density = 0.005 if quick else 0.001
    yield f"random-{n}-{density:g}", sp.random(n, n, density, format="csr", dtype=np.float32,
                                               random_state=0)


def bench(name, m, d, repeat, budget, rng):
    n, k = m.shape
    g = torch.Generator().manual_seed(0)
    Q, K = torch.randn(n, d, generator=g), torch.randn(k, d, generator=g)
    M = scorch.to_sparse(m, "csr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tM = torch.sparse_csr_tensor(torch.from_numpy(m.indptr).long(),
                                     torch.from_numpy(m.indices).long(),
                                     torch.from_numpy(m.data), size=m.shape)
    fused = scorch.compile(lambda Q, K, M: M * (Q @ K.T))
    KT = K.T.contiguous()
    fns = {"compiled": lambda: fused(Q, K, M),
           "sampled": lambda: torch.sparse.sampled_addmm(tM, Q, KT, beta=0.0)}
    y = fns["compiled"]()
    ref = torch.sparse.sampled_addmm(tM, Q, KT, beta=0.0).values() * tM.values()
    ok = torch.allclose(y.values(), ref, rtol=1e-4, atol=1e-4)
    if n * k * 4 <= DENSE_LIMIT:
        D = torch.from_numpy(m.toarray())
        fns["eager"] = lambda: M * (Q @ K.T)
        fns["dense"] = lambda: D * (Q @ K.T)
    t = time_rounds(fns, repeat, budget, rng, warm=("compiled",))
    row = {"mask": name, "n": n, "nnz": int(m.nnz), "d": d, "ok": bool(ok)}
    for c in ("compiled", "eager", "dense", "sampled"):
        row[f"{c}_ms"] = t[c] * 1e3 if c in t else math.nan
    for c in ("eager", "dense", "sampled"):
        row[f"vs_{c}"] = row["compiled_ms"] / row[f"{c}_ms"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_fuse",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="three graphs, a smaller mask")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    args = ap.parse_args(argv)
    repeat, budget = (5, 1.0) if args.quick else (11, 4.0)
    rng = random.Random(0)
    print(f"threads: {torch.get_num_threads()}  d = 64, float32  "
          "(ratios are compiled / other: < 1 is faster)")
    hdr = (f"{'mask':<22}{'n':>8}{'nnz':>10}{'compiled':>10}{'eager':>10}{'dense':>10}"
           f"{'sampled':>10}{'/eager':>8}{'/dense':>8}{'/sampled':>9}  ok")
    print(hdr + "\n" + " " * 40 + "(median ms)")
    rows = []
    for name, m in _masks(args.quick):
        r = bench(name, m, 64, repeat, budget, rng)
        rows.append(r)
        print(f"{name:<22}{r['n']:>8}{r['nnz']:>10}{r['compiled_ms']:>10.3f}"
              f"{r['eager_ms']:>10.3f}{r['dense_ms']:>10.3f}{r['sampled_ms']:>10.3f}"
              f"{r['vs_eager']:>8.3f}{r['vs_dense']:>8.3f}{r['vs_sampled']:>9.2f}  "
              f"{'ok' if r['ok'] else 'WRONG'}", flush=True)
    print("\ngeometric means, compiled / other: "
          + "   ".join(f"{c} {geomean([r['vs_' + c] for r in rows]):.3f}"
                       for c in ("eager", "dense", "sampled")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
