"""Multi-head attention over a sparse mask, ``F.scaled_dot_product_attention(q, k, v,
attn_mask=M)`` with M a scorch CSR, against what a PyTorch user runs today, same run.

    python -m benchmarks.bench_attention [--quick] [--json out.json]

q, k, v are (1, 8, n, 64) float32; the masks are n × n: random at 0.5 % and 2 %, and a
local window (each position attends the 64 on either side), n = 4096 (2048 in --quick).
  scorch      SDPA with the sparse mask: an SDDMM over M's entries, a sparse softmax and an
              SpMM (the n × n scores are never formed)
  dense       torch's SDPA with the same mask as a dense bool tensor
  pipeline    the same three steps written out with torch.einsum / torch.softmax on
              scorch tensors (what the SDPA route costs over its own kernels)
  sparse_mm   torch.sparse: sampled_addmm per head, torch.sparse.softmax, torch.sparse.mm
              per head, on torch's CSR (one head's cost times 8)
Each is timed forward, and forward + backward of the output's sum (q, k, v requiring
grad; torch.sparse's sampled_addmm has no backward through CSR, so no backward there).
Prints medians and ratios scorch / other (< 1: scorch is faster); checks scorch's
output against the dense SDPA.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import warnings

import torch
import torch.nn.functional as F

import scorch

from .common import geomean, time_rounds

HEADS, D = 8, 64


def _masks(n):
    g = torch.Generator().manual_seed(0)
    for density in (0.005, 0.02):
        yield f"random-{density:g}", (torch.rand(n, n, generator=g) < density) | torch.eye(
            n, dtype=torch.bool)
    i = torch.arange(n)
    yield "window-64", (i[:, None] - i[None, :]).abs() <= 64


def bench(name, pattern, repeat, budget, rng):
    n = pattern.shape[0]
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, HEADS, n, D, generator=g) for _ in range(3))
    M = scorch.to_sparse(pattern.float(), "csr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tM = pattern.float().to_sparse_csr()
    s = 1 / math.sqrt(D)

    def pipeline(q, k, v):
        S = torch.einsum("ij,bhik,bhjk->bhij", M, q * s, k)
        return torch.einsum("bhij,bhjz->bhiz", torch.softmax(S, -1), v)

    def sparse_mm():   # one head: torch.sparse has no batched CSR softmax
        S = torch.sparse.sampled_addmm(tM, q[0, 0] * s, k[0, 0].T, beta=0.0)
        P = torch.sparse.softmax(S.to_sparse_coo(), 1)
        return torch.sparse.mm(P, v[0, 0])

    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def backward(fn):
        def run():
            fn(qg, kg, vg).sum().backward()
        return run

    ours = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=M)   # noqa
    dense = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=pattern)  # noqa
    y = ours(q, k, v)
    ok = torch.allclose(y, dense(q, k, v), atol=1e-4, rtol=1e-4)
    fwd = time_rounds({"scorch": lambda: ours(q, k, v), "dense": lambda: dense(q, k, v),
                       "pipeline": lambda: pipeline(q, k, v), "sparse_mm": sparse_mm},
                      repeat, budget, rng, warm=("scorch",))
    fwd["sparse_mm"] *= HEADS
    bwd = time_rounds({"scorch": backward(ours), "dense": backward(dense),
                       "pipeline": backward(pipeline)}, repeat, budget, rng)
    row = {"mask": name, "n": n, "nnz": int(pattern.sum()), "ok": bool(ok)}
    for c, t in fwd.items():
        row[f"fwd_{c}_ms"] = t * 1e3
    for c, t in bwd.items():
        row[f"fwdbwd_{c}_ms"] = t * 1e3
    for c in ("dense", "pipeline", "sparse_mm"):
        row[f"fwd_vs_{c}"] = fwd["scorch"] / fwd[c]
    for c in ("dense", "pipeline"):
        row[f"fwdbwd_vs_{c}"] = bwd["scorch"] / bwd[c]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_attention",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 2048, fewer repeats")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    args = ap.parse_args(argv)
    n = 2048 if args.quick else 4096
    repeat, budget = (5, 2.0) if args.quick else (9, 6.0)
    rng = random.Random(0)
    print(f"threads: {torch.get_num_threads()}  q, k, v (1, {HEADS}, {n}, {D}) float32  "
          "(ratios are scorch / other: < 1 is faster)")
    print(f"{'mask':<14}{'nnz':>10}{'scorch':>9}{'dense':>9}{'pipe':>9}{'t.sparse':>9}"
          f"{'/dense':>8}{'/pipe':>7}{'/t.sp':>7} | {'scorch':>8}{'dense':>8}{'pipe':>8}"
          f"{'/dense':>8}{'/pipe':>7}  ok")
    print(" " * 24 + "forward (median ms)" + " " * 27 + "forward + backward")
    rows = []
    for name, pattern in _masks(n):
        r = bench(name, pattern, repeat, budget, rng)
        rows.append(r)
        print(f"{name:<14}{r['nnz']:>10}{r['fwd_scorch_ms']:>9.2f}{r['fwd_dense_ms']:>9.2f}"
              f"{r['fwd_pipeline_ms']:>9.2f}{r['fwd_sparse_mm_ms']:>9.2f}"
              f"{r['fwd_vs_dense']:>8.3f}{r['fwd_vs_pipeline']:>7.2f}"
              f"{r['fwd_vs_sparse_mm']:>7.2f} | {r['fwdbwd_scorch_ms']:>8.1f}"
              f"{r['fwdbwd_dense_ms']:>8.1f}{r['fwdbwd_pipeline_ms']:>8.1f}"
              f"{r['fwdbwd_vs_dense']:>8.3f}{r['fwdbwd_vs_pipeline']:>7.2f}  "
              f"{'ok' if r['ok'] else 'WRONG'}", flush=True)
    print("\ngeometric means, scorch / other: forward "
          + "  ".join(f"{c} {geomean([r['fwd_vs_' + c] for r in rows]):.3f}"
                      for c in ("dense", "pipeline", "sparse_mm"))
          + ";  forward + backward "
          + "  ".join(f"{c} {geomean([r['fwdbwd_vs_' + c] for r in rows]):.3f}"
                      for c in ("dense", "pipeline")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
