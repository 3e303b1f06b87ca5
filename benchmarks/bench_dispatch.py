"""The cost of reaching a scorch kernel from PyTorch, warm (kernels already compiled).

    python -m benchmarks.bench_dispatch [--n 64] [--k 16] [--repeat 2000]

torch.mm(A, X) on a tiny CSR matrix, where the kernel itself costs next to nothing, so
the numbers are the overhead of each route:
  torch.sparse.mm          torch's own CSR kernel (the reference)
  scorch.enabled() mm      the same torch call with scorch registered on SparseCsrCPU
  SparseTensor @ X         scorch's SparseTensor through __torch_function__
  SparseTensor @ X (grad)  the same with autograd recording (values require grad)
  scorch.einsum            the compiler's Python API directly
  scorch.kernel            a reused compiled kernel
Medians of per-call times; ratios are route / torch.sparse.mm (< 1: faster).
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

import scorch


def per_call(fn, repeat):
    for _ in range(20):
        fn()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        times.append((time.perf_counter() - t0) / repeat)
    return sorted(times)[len(times) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="rows and columns of A")
    ap.add_argument("--k", type=int, default=16, help="columns of X")
    ap.add_argument("--density", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)   # torch's "CSR is in beta" notice

    g = torch.Generator().manual_seed(0)
    n, k = args.n, args.k
    x = torch.rand(n, n, generator=g)
    x = torch.where(torch.rand(n, n, generator=g) < args.density, x, torch.zeros(()))
    X = torch.rand(n, k, generator=g)
    A_t = x.to_sparse_csr()
    A = scorch.to_sparse(x, "csr")
    A_g = A.with_values(A.values().clone().requires_grad_())
    kern = scorch.kernel("C(i,k) = A(i,j) * B(j,k)", A="csr", B="dense")

    def enabled_mm():
        return torch.mm(A_t, X)

    routes = [("torch.sparse.mm", lambda: torch.sparse.mm(A_t, X))]
    scorch.enable()
    try:
        routes.append(("scorch.enabled() torch.mm", enabled_mm))
        t_enabled = per_call(enabled_mm, args.repeat)
    finally:
        scorch.disable()
    routes += [("SparseTensor @ X", lambda: A @ X),
               ("SparseTensor @ X (grad)", lambda: A_g @ X),
               ("scorch.einsum", lambda: scorch.einsum("ij,jk->ik", A, X)),
               ("scorch.kernel", lambda: kern(A, X))]
    print(f"warm torch.mm(A, X): A {n}x{n} CSR nnz={A.nnz}, X {n}x{k} float32, "
          f"{torch.get_num_threads()} threads, median per call of {args.repeat} calls x5")
    ref = None
    for name, fn in routes:
        t = t_enabled if name.startswith("scorch.enabled") else per_call(fn, args.repeat)
        ref = ref or t
        print(f"  {name:<28} {t * 1e6:9.2f} us   ratio {t / ref:6.2f}")


if __name__ == "__main__":
    main()
