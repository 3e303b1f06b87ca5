"""scorch's ahead-of-time kernels: which products are built into the package, and how.

    python tools/aot.py record      # with torch and scorch installed: rewrites
                                    # tools/aot_signatures.json

``record`` runs the products users run most (SpMV, SpMM also through a transpose and as
F.linear with the sparse operand either side, SDDMM, SpGEMM, add, mul, sums; with float
values, each one's gradients too; the GCN demo's training steps) over csr, csc and coo
operands, float32/float64/int32/int64 values, int32/int64 indices and four sizes (2x3, a
matrix of a few entries as in examples; 40x30; 2708^2; 30000^2), and writes down every
kernel the compiler was asked for: the expression, each operand's format, sizes, dtype
and index width (the scheduler picks a kernel's loop order from them, so a product at
sizes far from these may be given a kernel the table lacks), the output format and
schedule.

``generate`` (called by setup.py once scorch._C is built; it needs NumPy only) asks the
compiler for each recorded kernel's C source, generic in every size, for both settings of
the gather probe (a host whose gathers are fast writes SpMV otherwise), drops duplicates,
and writes one C file per kernel plus the table scorch._C looks kernels up in
(``sc_compiler_load_aot``: key → function, with this host's ISA hash, so that the table
is refused on a host it was not built for).
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIGNATURES = os.path.join(HERE, "aot_signatures.json")


# ---- recording (needs torch) ----

def _summary(desc):
    """A JSON-able description of one operand description (tuple, or dense tensor)."""
    import numpy as np

    if isinstance(desc, tuple):
        shape, fmt, pos, crd, vals, index = desc[:6]
        return {"shape": list(shape), "fmt": _jsonable(fmt),
                "pos": [None if p is None else len(p) for p in pos],
                "crd": [None if c is None else len(c) for c in crd],
                "vals": len(vals), "dtype": str(np.asarray(vals).dtype), "index": index}
    # a contiguous dense torch tensor
    return {"shape": list(desc.shape), "dense": True,
            "dtype": str(desc.dtype).replace("torch.", "")}


def _jsonable(x):
    if isinstance(x, (tuple, list)):
        return [_jsonable(v) for v in x]
    return x


def _workloads():
    """Run the representative products (yields nothing; the compile hook records)."""
    import torch

    import scorch

    g = torch.Generator().manual_seed(0)
    sizes = [(2, 3, 0.5), (40, 30, 0.1), (2708, 2708, 0.0015), (30000, 30000, 0.0003)]
    for rows, cols, density in sizes:
        for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            for index in (torch.int32, torch.int64):
                nnz = max(1, int(rows * cols * density))
                r = torch.randint(0, rows, (nnz,), generator=g)
                c = torch.randint(0, cols, (nnz,), generator=g)
                v = torch.rand(nnz, generator=g, dtype=torch.float64).mul(4).add(1)
                v = v.to(dtype)
                coo = torch.sparse_coo_tensor(torch.stack([r, c]), v, (rows, cols)).coalesce()
                sq = torch.sparse_coo_tensor(torch.stack([r % cols, c]), v,
                                             (cols, cols)).coalesce()
                for fmt in ("csr", "csc", "coo"):
                    A = scorch.to_sparse(coo, fmt, index_dtype=index)
                    S = scorch.to_sparse(sq, fmt, index_dtype=index)
                    _products(A, S, g)
    from scorch import _gcn

    _gcn.main(["--epochs", "3"])


def _products(A, S, g):
    """Every product README.md lists as built in, over A (rows x cols) and S (cols x cols):
    forward, and for float values the backward through the sparse operand and the dense
    ones, from a loss that sums the result and, for a dense result, one that weights it
    (a gradient that is not a broadcast one)."""
    import torch
    import torch.nn.functional as F

    import scorch

    rows, cols = A.shape
    dtype = A.dtype

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64).mul(4).to(dtype)

    def run(fn, sparse, *dense):
        out = fn(sparse, *dense)
        if not dtype.is_floating_point:   # (integers have no gradients)
            return
        dense_out = not isinstance(out, scorch.SparseTensor)
        for w in [None] + ([rand(*out.shape)] if dense_out else []):
            ops = [sparse.detach().requires_grad_()] + [d.detach().requires_grad_()
                                                          for d in dense]
            out = fn(*ops)
            (out.sum() if w is None else (out * w).sum()).backward()

    run(lambda a, x: a @ x, A, rand(cols))
    for K in (16, 64):
        run(lambda a, x: a @ x, A, rand(cols, K))
        run(lambda a, y: a.t() @ y, A, rand(rows, K))
        run(lambda a, y: y.t() @ a, A, rand(rows, K))
        run(lambda a, y, x: scorch.einsum("ij,ik,jk->ij", a, y, x), A, rand(rows, K),
            rand(cols, K))
    for batch in (2, 8, 64):   # (from 16 rows and enough work, F.linear runs as an SpMM)
        run(lambda a, x: F.linear(x, a), A, rand(batch, cols))
    run(lambda a, w: F.linear(a, w), A, rand(16, cols))
    run(lambda s: s @ s, S)
    run(lambda a: a @ a.t(), A)
    run(lambda a: a + a, A)
    run(lambda a: a * a, A)
    if rows * cols <= 1 << 24:   # (a dense operand of A's shape: not of 30000 x 30000)
        run(lambda a, d: a + d, A, rand(rows, cols))
        run(lambda a, d: a * d, A, rand(rows, cols))
    run(lambda a: a * 2, A)
    run(lambda a: a.sum(0), A)
    run(lambda a: a.sum(1), A)


def record(path=SIGNATURES):
    from scorch import _C, _compiler

    seen = {}
    prepared = {}
    real_prepare, real_compile = _C.prepare, _C.compile

    def prepare(desc, *args):
        cap = real_prepare(desc, *args)
        prepared[id(cap)] = (cap, _summary(desc))
        return cap

    def compile_(lang, expr, descs, fmt, sched, sizes=True, later=False):
        ops = [prepared[id(d)][1] if type(d).__name__ == "PyCapsule" else _summary(d)
               for d in descs]
        sig = {"lang": lang, "expr": expr, "ops": ops, "out": _jsonable(fmt), "sched": sched}
        seen.setdefault(json.dumps(sig, sort_keys=True), sig)
        return real_compile(lang, expr, descs, fmt, sched, sizes, later)

    _C.prepare, _C.compile = prepare, compile_
    try:
        _compiler._KERNELS.clear()
        _workloads()
    finally:
        _C.prepare, _C.compile = real_prepare, real_compile
    sigs = [seen[k] for k in sorted(seen)]
    with open(path, "w") as f:
        json.dump(sigs, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{len(sigs)} signatures -> {path}")


# ---- generating (NumPy and scorch._C only) ----

def _desc(C, op):
    import numpy as np

    if op.get("dense"):
        n = len(op["shape"])
        size = int(np.prod(op["shape"])) if op["shape"] else 1
        # (the compiler reads sizes, never values: zeros the OS maps lazily)
        data = np.zeros(size, dtype=op["dtype"])
        fmt = C.parse_format("dense", n)
        return (tuple(op["shape"]), fmt, [None] * n, [None] * n, data, "int32")
    it = np.int32 if op["index"] == "int32" else np.int64
    pos = [None if p is None else np.zeros(p, dtype=it) for p in op["pos"]]
    crd = [None if c is None else np.zeros(c, dtype=it) for c in op["crd"]]
    for p, c in zip(pos, crd):   # (lengths that agree: pos ends at its crd's length)
        if p is not None and c is not None and len(p):
            p[-1] = len(c)
    vals = np.zeros(op["vals"], dtype=op["dtype"])
    return (tuple(op["shape"]), _tuple(op["fmt"]), pos, crd, vals, op["index"])


def _tuple(x):
    return tuple(_tuple(v) for v in x) if isinstance(x, list) else x


def generate(C, outdir, path=SIGNATURES, log=print):
    """Write <outdir>/k_<key>.c for every distinct kernel and <outdir>/table.c; returns
    the list of C files.  C is the built scorch._C module (its include dir set)."""
    with open(path) as f:
        sigs = json.load(f)
    os.makedirs(outdir, exist_ok=True)
    by_text = {}    # C text (symbol blanked) -> symbol written
    table = []      # (key hex, text hash hex, symbol)
    keys = set()
    files = []
    failed = 0
    for sig in sigs:
        try:
            descs = [_desc(C, op) for op in sig["ops"]]
        except (TypeError, ValueError, KeyError):
            failed += 1
            continue
        out = _tuple(sig["out"]) if sig["out"] is not None else None
        for gathers in (0, 1):
            try:
                key, sym, text, text_hash = C.source(sig["lang"], sig["expr"], descs, out,
                                                     sig["sched"], False, gathers)
            except Exception:   # (a kernel this build's compiler no longer takes)
                failed += 1
                break
            if key in keys:
                continue
            keys.add(key)
            blank = text.replace(sym.encode(), b"@")
            first = by_text.get(blank)
            if first is None:
                first = by_text[blank] = sym
                fn = os.path.join(outdir, f"k_{key}.c")
                _write(fn, text)
                files.append(fn)
            table.append((key, text_hash, first))
    table.sort()
    isa = C.host_isa()
    lines = ['/* scorch ahead-of-time kernels: generated by tools/aot.py, do not edit */',
             '#include "scorch_rt.h"', "#include <stddef.h>", ""]
    for sym in sorted({s for _, _, s in table}):
        lines.append(f"int {sym}(const sc_tensor *const *ops, sc_tensor *out, sc_rt_env *env);")
    lines += ["", "typedef struct { uint64_t key[2], text[2]; sc_rt_kernel fn; } scorch_aot_kernel;",
              f"const uint64_t scorch_aot_isa[2] = {{{_words(isa)}}};",
              f"const int32_t scorch_aot_version = {C.RT_VERSION};",
              f"const size_t scorch_aot_count = {len(table)};",
              "const scorch_aot_kernel scorch_aot_table[] = {"]
    for key, text_hash, sym in table:
        lines.append(f"    {{{{{_words(key)}}}, {{{_words(text_hash)}}}, {sym}}},")
    if not table:
        lines.append("    {{0, 0}, {0, 0}, NULL},")
    lines += ["};", "",
              "/* not a Python module: scorch._C loads this file with dlopen */",
              "void *PyInit__aot(void);",
              "void *PyInit__aot(void) { return NULL; }", ""]
    tf = os.path.join(outdir, "table.c")
    _write(tf, "\n".join(lines).encode())
    log(f"scorch ahead-of-time kernels: {len(sigs)} signatures, {len(table)} keys, "
        f"{len(files)} kernels" + (f", {failed} skipped" if failed else ""))
    return files + [tf]


def _write(path, data):
    """Write data unless the file holds it already (its object then stays up to date)."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    with open(path, "wb") as f:
        f.write(data)


def _words(hex32):
    """'{0x..., 0x...}' body of a 32-hex-digit key, in sc_jit_key's word order."""
    # sc_jit_key_hex writes w[0] then w[1], each as 16 hex digits (big-endian digits)
    return f"0x{hex32[:16]}ull, 0x{hex32[16:]}ull"


if __name__ == "__main__":
    if sys.argv[1:] == ["record"]:
        record()
    else:
        sys.exit(__doc__)
