"""The cost of reaching a scorch kernel from PyTorch, warm (kernels already compiled).

    python -m benchmarks.bench_dispatch [--n 64] [--k 16] [--repeat 2000] [--threads N]
                                        [--quick]

1. Per-call overhead.  torch.mm(A, X) on a tiny CSR matrix, where the kernel itself costs
   next to nothing, so the numbers are the overhead of each route:
     torch.sparse.mm            torch's own CSR kernel (the reference)
     scorch.enabled() torch.mm  the same torch call with scorch registered on SparseCsrCPU
     SparseTensor @ X           scorch's SparseTensor through __torch_function__
     torch.mm(SparseTensor, X)  the same through torch.mm
     F.linear(X', SparseTensor) the same through F.linear (X' = X^T, contiguous)
     SparseTensor @ X (grad)    A @ X with autograd recording (values require grad)
     torch.sparse.mm (grad)     torch's own, with A requiring grad (its C++ autograd node)
     torch.einsum               torch.einsum("ij,jk->ik", SparseTensor, X); torch has no
                                sparse einsum, so its own einsum on the dense A is shown
                                too.  torch.einsum reaches any tensor subclass through
                                torch.overrides.handle_torch_function (Python), ~5 us
                                before scorch's code runs
     scorch.einsum              the compiler's Python API directly
     scorch.kernel              a reused compiled kernel
   The routes run in turn, round after round, so a busy machine slows them alike; each
   figure is the median over rounds of the mean per call within a round.  Ratios are
   route / torch.sparse.mm (< 1: faster).
2. Dense ops untouched.  A plain dense torch.mm(X, Y) on small tensors, timed in fresh
   subprocesses without scorch imported, with scorch imported, and with scorch.enable()
   active (the three alternate; each process reports its fastest round, the least
   disturbed by other load; ratios of the medians over processes to the first: ~1.0
   means scorch costs a dense op nothing).
3. The next ATen op.  A 512x512 dense torch.mm timed right after a scorch SpMM and right
   after a torch.sparse.mm of the same product (parallel-sized), alternating: a ratio above
   1 would mean scorch's kernel leaves the machine slower for torch (e.g. OpenMP threads
   still spinning or a second thread pool).
Only ratios measured in the same run mean anything on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F


def _rounds(routes, repeat, rounds, between=None, best=False):
    """{name: median (``best``: minimum) over rounds of the per-call time}; routes
    alternate within a round.  ``between(name, entering)`` is called around each route
    (scorch.enable / disable)."""
    times = {name: [] for name, _ in routes}
    for name, fn in routes:                      # warm-up: kernels compiled, caches filled
        if between:
            between(name, True)
        for _ in range(20):
            fn()
        if between:
            between(name, False)
    for _ in range(rounds):
        for name, fn in routes:
            if between:
                between(name, True)
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn()
            times[name].append((time.perf_counter() - t0) / repeat)
            if between:
                between(name, False)
    pick = min if best else statistics.median
    return {name: pick(ts) for name, ts in times.items()}


def _sparse(n, m, density, g):
    x = torch.rand(n, m, generator=g)
    return torch.where(torch.rand(n, m, generator=g) < density, x, torch.zeros(()))


def overhead(args):
    import scorch

    g = torch.Generator().manual_seed(0)
    n, k = args.n, args.k
    x = _sparse(n, n, args.density, g)
    X = torch.rand(n, k, generator=g)
    Xt = X.t().contiguous()
    A_t = x.to_sparse_csr()
    A_tg = x.to_sparse_csr().requires_grad_()
    A = scorch.to_sparse(x, "csr")
    A_g = A.with_values(A.values().clone().requires_grad_())
    kern = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense")
    enabled = "scorch.enabled() torch.mm"

    def toggle(name, entering):
        if name == enabled:
            (scorch.enable if entering else scorch.disable)()

    routes = [("torch.sparse.mm", lambda: torch.sparse.mm(A_t, X)),
              (enabled, lambda: torch.mm(A_t, X)),
              ("SparseTensor @ X", lambda: A @ X),
              ("torch.mm(SparseTensor, X)", lambda: torch.mm(A, X)),
              ("F.linear(X', SparseTensor)", lambda: F.linear(Xt, A)),
              ("SparseTensor @ X (grad)", lambda: A_g @ X),
              ("torch.sparse.mm (grad)", lambda: torch.sparse.mm(A_tg, X)),
              ("torch.einsum(SparseTensor, X)", lambda: torch.einsum("ij,jk->ik", A, X)),
              ("torch.einsum(dense A, X)", lambda: torch.einsum("ij,jk->ik", x, X)),
              ("scorch.einsum", lambda: scorch.einsum("ij,jk->ik", A, X)),
              ("scorch.kernel", lambda: kern(A, X))]
    t = _rounds(routes, args.repeat, args.rounds, toggle)
    print(f"1. warm per-call overhead: A {n}x{n} CSR nnz={A.nnz}, X {n}x{k} float32, "
          f"{torch.get_num_threads()} threads, median of {args.rounds} rounds x "
          f"{args.repeat} calls, routes interleaved")
    ref = t["torch.sparse.mm"]
    for name, _ in routes:
        print(f"  {name:<30} {t[name] * 1e6:9.2f} us   ratio {t[name] / ref:6.2f}")


def _dense_child(mode, repeat, rounds):
    """Runs in a subprocess: per-call time of a small dense torch.mm under ``mode``."""
    if mode != "no scorch":
        import scorch
        if mode == "scorch.enable()":
            scorch.enable()
    g = torch.Generator().manual_seed(1)
    X, Y = torch.rand(64, 32, generator=g), torch.rand(32, 32, generator=g)
    t = _rounds([(mode, lambda: torch.mm(X, Y))], repeat, rounds, best=True)
    assert mode == "no scorch" or "scorch" in sys.modules
    assert mode != "no scorch" or "scorch" not in sys.modules
    print(t[mode])


def dense_untouched(args):
    modes = ["no scorch", "import scorch", "scorch.enable()"]
    times = {m: [] for m in modes}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] +
        [p for p in [os.environ.get("PYTHONPATH")] if p]))
    for _ in range(args.procs):
        for m in modes:
            out = subprocess.run([sys.executable, "-m", "benchmarks.bench_dispatch",
                                  "--dense-child", m, "--repeat", str(args.repeat),
                                  "--rounds", str(args.rounds),
                                  "--threads", str(torch.get_num_threads())],
                                 check=True, capture_output=True, text=True, env=env)
            times[m].append(float(out.stdout.strip().splitlines()[-1]))
    print(f"2. dense torch.mm(X 64x32, Y 32x32) in fresh processes ({args.procs} each, "
          f"alternating, {torch.get_num_threads()} threads), ratio to no scorch")
    ref = statistics.median(times["no scorch"])
    for m in modes:
        print(f"  {m:<28} ratio {statistics.median(times[m]) / ref:6.2f}")


def next_op(args):
    import scorch

    g = torch.Generator().manual_seed(2)
    n, k, d = 2048, 64, 512
    x = _sparse(n, n, 0.005, g)
    A, A_t = scorch.to_sparse(x, "csr"), x.to_sparse_csr()
    X = torch.rand(n, k, generator=g)
    P, Q = torch.rand(d, d, generator=g), torch.rand(d, d, generator=g)
    before = {"scorch SpMM": lambda: A @ X, "torch.sparse.mm": lambda: torch.sparse.mm(A_t, X)}
    after = {name: [] for name in before}
    for fn in before.values():
        fn()
        torch.mm(P, Q)
    for _ in range(args.next_repeat):
        for name, fn in before.items():
            fn()
            t0 = time.perf_counter()
            torch.mm(P, Q)
            after[name].append(time.perf_counter() - t0)
    t = {name: statistics.median(ts) for name, ts in after.items()}
    print(f"3. dense torch.mm {d}x{d} @ {d}x{d} right after a {n}x{n} (nnz={A.nnz}) SpMM "
          f"with X {n}x{k}, alternating, median of {args.next_repeat} each, "
          f"{torch.get_num_threads()} threads")
    print(f"  after scorch / after torch.sparse.mm   ratio "
          f"{t['scorch SpMM'] / t['torch.sparse.mm']:6.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_dispatch",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="rows and columns of A")
    ap.add_argument("--k", type=int, default=16, help="columns of X")
    ap.add_argument("--density", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=2000, help="calls per route per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--procs", type=int, default=3, help="subprocesses per mode in part 2")
    ap.add_argument("--next-repeat", type=int, default=40, help="alternations in part 3")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--quick", action="store_true", help="fewer calls, rounds, processes")
    ap.add_argument("--dense-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)   # torch's "CSR is in beta" notice
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.dense_child:
        return _dense_child(args.dense_child, args.repeat, args.rounds)
    if args.quick:
        args.repeat, args.rounds = min(args.repeat, 200), 3
        args.procs, args.next_repeat = 1, 10
    overhead(args)
    dense_untouched(args)
    next_op(args)


if __name__ == "__main__":
    main()
