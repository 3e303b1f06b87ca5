"""Selections on a csr matrix, warm: A[2:10], A[::2], A[rows], A[i] and the coordinates of
the stored entries (dim_coords), on a 60x40 matrix of ~100 entries and a 10^4 x 10^4 one
of 10^5; then scorch's repeat (NumPy's, serial) against torch.repeat_interleave, which
opens an OpenMP parallel region on every call at grain size 1.

    python -m benchmarks.bench_indexing [--threads 2] [--rounds 7]

Each figure is the median over rounds of the mean per call within a round (the rounds
alternate the candidates, so a busy machine slows them alike), in microseconds.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch


def _per_call(fn, repeat):
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat * 1e6


def _rounds(routes, rounds):
    times = {name: [] for name, _, _ in routes}
    for _, fn, _ in routes:
        fn()
    for _ in range(rounds):
        for name, fn, repeat in routes:
            times[name].append(_per_call(fn, repeat))
    return {name: statistics.median(t) for name, t in times.items()}


def _csr(n, m, nnz, g):
    import scorch

    i, j = torch.randint(0, n, (nnz,), generator=g), torch.randint(0, m, (nnz,), generator=g)
    x = torch.sparse_coo_tensor(torch.stack([i, j]), torch.rand(nnz, generator=g),
                                (n, m)).coalesce()
    return scorch.to_sparse(x.to_sparse_csr())


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_indexing",
                                description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    from scorch._torch_ops import dim_coords, repeated

    g = torch.Generator().manual_seed(0)
    for label, A, repeat in [("60x40, 100 nnz", _csr(60, 40, 100, g), 300),
                             ("10^4 x 10^4, 10^5 nnz", _csr(10**4, 10**4, 10**5, g), 20)]:
        rows = torch.randint(0, A.shape[0], (min(A.shape[0], 5000),), generator=g)
        routes = [("A[2:10]", lambda: A[2:10], repeat * 5),
                  ("A[2:-2]", lambda: A[2:-2], repeat),
                  ("A[::2]", lambda: A[::2], repeat),
                  ("A[rows]", lambda: A[rows], repeat),
                  ("A[3]", lambda: A[3], repeat * 5),
                  ("dim_coords(A)", lambda: dim_coords(A), repeat)]
        print(f"{label} ({args.threads} threads), us per call")
        for name, t in _rounds(routes, args.rounds).items():
            print(f"  {name:16s} {t:10.1f}")
    print(f"repeat: scorch's / torch.repeat_interleave ({args.threads} threads), us per call")
    for n in (8, 1000, 10**5, 10**6):
        v, c = torch.arange(n), torch.randint(0, 3, (n,), generator=g)
        repeat = max(3, 3000 // max(1, n // 100))
        t = _rounds([("scorch", lambda: repeated(v, c), repeat),
                     ("torch", lambda: torch.repeat_interleave(v, c), repeat)], args.rounds)
        print(f"  n = {n:8d} {t['scorch']:10.1f} {t['torch']:10.1f}")


if __name__ == "__main__":
    main()
