"""Time from call to kernel, and the cost of a warm call.

    python -m benchmarks.bench_compile [--json out.json]

For new expressions (a fresh kernel cache, the built-in kernels off): the compiler's own
stages (parse, lower, schedule, IR, codegen) and the C compiler, per kernel; then the same
kernels in a second process, which loads them from the disk cache without compiling; then
a third process with a fresh cache and the built-in (ahead-of-time) kernels on; each
process also times each expression's first call, from call to result.  Last, the
warm-call overhead of scorch.einsum and of a reused scorch.kernel on tiny inputs against
torch.sparse.mm on the same data (ratios scorch / torch, < 1 is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

EXPRS = [
    ("SpMV", "ij,j->i", ["csr", (64,)]),
    ("SpMM", "ij,jk->ik", ["csr", (64, 16)]),
    ("SDDMM", "ij,ik,jk->ij", ["csr", (64, 8), (64, 8)]),
    ("SpGEMM", "ij,jk->ik", ["csr", "csr"]),
    ("add", "ij,ij->ij", ["csr", "coo"]),
    ("MTTKRP", "ijk,jr,kr->ir", ["csf3", (8, 4), (8, 4)]),
]


def _operands(spec):
    import torch

    import scorch

    g = torch.Generator().manual_seed(0)
    ops = []
    for s in spec:
        if s == "csf3":
            x = torch.rand(8, 8, 8, generator=g)
            ops.append(scorch.to_sparse(x * (x > 0.7), "csf"))
        elif isinstance(s, str):
            x = torch.rand(64, 64, generator=g)
            ops.append(scorch.to_sparse(x * (x > 0.9), s))
        else:
            ops.append(torch.rand(s, generator=g))
    return ops


def compile_times():
    """[(name, front-end us, jit us, built in, first call us)] for EXPRS in this
    process."""
    import scorch
    from scorch import _C
    from scorch._compiler import _LANG_EINSUM, _compile

    rows = []
    for name, expr, spec in EXPRS:
        ops = _operands(spec)
        t0 = time.perf_counter()
        scorch.einsum(expr, *ops)
        first = (time.perf_counter() - t0) * 1e6
        entry = _compile(_LANG_EINSUM, expr, ops, None, None)[0]
        front, jit, ahead = _C.kernel_times(entry[0])
        rows.append((name, front, jit, ahead, first))
    return rows, _C.jit_stats()


def warm_overhead(repeat=2000):
    import torch

    import scorch

    A = scorch.to_sparse(torch.tensor([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 0, 0, 5],
                                       [0, 6, 0, 0]]), "csr")
    X = torch.rand(4, 3)
    At = A.to_torch()
    k = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense")

    def med(fn):
        for _ in range(50):
            fn()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn()
            ts.append((time.perf_counter() - t0) / repeat)
        return statistics.median(ts)

    t_torch = med(lambda: torch.sparse.mm(At, X))
    t_einsum = med(lambda: scorch.einsum("ij,jk->ik", A, X))
    t_kernel = med(lambda: k(A, X))
    return t_torch, t_einsum, t_kernel


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_compile",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures as JSON to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rows, stats = compile_times()
        print(json.dumps({"rows": rows, "stats": stats}))
        return
    runs = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as cache2:
        for c, aot in ((cache, "0"), (cache, "0"), (cache2, "1")):
            env = dict(os.environ, SCORCH_CACHE_DIR=c, SCORCH_AOT=aot)
            r = subprocess.run([sys.executable, "-m", "benchmarks.bench_compile", "--child"],
                               env=env, capture_output=True, text=True, check=True)
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    cold, warm, built = runs
    print("new expressions (fresh cache), microseconds:")
    print(f"  {'kernel':<8}{'compiler stages':>16}{'C compiler':>12}{'2nd process load':>18}")
    for (name, front, jit, *_), (_, _, load, *_) in zip(cold["rows"], warm["rows"]):
        print(f"  {name:<8}{front:>16.0f}{jit:>12.0f}{load:>18.0f}")
    print(f"  first process: {cold['stats']['compiles']} compiles; second process: "
          f"{warm['stats']['compiles']} compiles, {warm['stats']['disk_hits']} disk hits")
    print("\nfirst call, from call to result, milliseconds: compiled / loaded from disk / "
          "built-in kernels on (fresh cache)")
    for (name, *_, f0), (*_, f1), (_, _, _, ahead, f2) in zip(cold["rows"], warm["rows"],
                                                              built["rows"]):
        how = "built in" if ahead else "compiled"
        print(f"  {name:<8}{f0 / 1e3:9.2f}{f1 / 1e3:9.2f}{f2 / 1e3:9.2f}  ({how})")
    print(f"  built-in kernels on: {built['stats']['compiles']} compiles in the call "
          "or in the background")
    t_torch, t_einsum, t_kernel = warm_overhead()
    print("\nwarm call on a 4x4 CSR @ 4x3 (median), microseconds:")
    print(f"  torch.sparse.mm {t_torch * 1e6:7.2f}")
    print(f"  scorch.einsum   {t_einsum * 1e6:7.2f}   ratio {t_einsum / t_torch:5.2f}")
    print(f"  scorch.kernel   {t_kernel * 1e6:7.2f}   ratio {t_kernel / t_torch:5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cold": cold, "warm": warm, "warm_call_s": {
                "torch": t_torch, "einsum": t_einsum, "kernel": t_kernel}}, f, indent=1)


if __name__ == "__main__":
    main()
