"""Seeded random differential tests: scorch against dense PyTorch on a fixed sample.

Fuzz campaigns found bugs that the hand-written tests missed: wrong answers and crashes
that only showed up for some combination of an expression, operand formats (permuted
level orders, non-unique levels, dense levels under compressed ones), 0 and 1 extents,
index widths, output formats and schedules, or of a torch op with a format it is rarely
given.  Those campaigns ran their generators over thousands of seeds; this file keeps a
fixed-seed sample of the same generators on every CI run, so that a change that breaks
some rarely written combination fails here rather than in a user's program.

Three families of cases, each a list of seeds split into batches:

* expressions: random einsum and index-notation expressions (``scorch.einsum``,
  ``scorch.kernel``) over random operand formats, shapes (0 and 1 extents too), value
  and index dtypes, dense operand layouts (permuted, strided, broadcast), duplicate
  coordinates and explicit zeros where the format allows them, all-zero operands,
  random output formats and schedules; compared with ``torch.einsum`` (or a broadcast
  evaluation of the index notation) on the dense operands;
* torch ops: the torch surface a SparseTensor routes (``torch.mm``, ``@``,
  ``torch.matmul``, ``torch.addmm``, ``F.linear``, ``torch.einsum``, ``+ - *`` with sparse
  and dense operands, ``sum(dim)``, ``t()``, softmax over stored entries) against the same
  op on the dense tensors (softmax against ``torch.sparse.softmax``, whose semantics
  scorch follows: explicit zeros are entries, empty rows stay empty);
* autograd: a scalar loss through one of those ops, backward, and the gradient of the
  stored values compared with the dense gradient gathered at the stored coordinates
  (a duplicate entry gets the gradient of its coordinate), and the dense operands'
  gradients with theirs.

Values are small integers (as floats), so products and sums are exact in float32 and
float64 and a wrong answer cannot hide in a tolerance (softmax, which is not exact,
aside); bfloat16 and float16 results are compared with the reference rounded once to
their dtype, as scorch computes them in float32 and rounds once. A case
that scorch refuses with NotImplementedError, ValueError or TypeError and a message
counts as a refusal, which is allowed, but every batch must compute at least 60 % of its
cases, so that the sample cannot decay into testing refusals. Any other exception, a
wrong value, dtype, shape or format, an invalid sparse result, or an operand changed by
the call fails the batch; the message lists each failing seed with its expression,
formats and shapes. To rerun one case alone, from the tests directory (conftest first:
it sets the environment the suite runs in): ``python -c "import conftest,
test_random_differential as t; print(t.run_expression_case(SEED))"`` (or ``run_op_case``
/ ``run_grad_case``).
"""
import math
import random
import re
import traceback

import pytest
import torch
import torch.nn.functional as F

import scorch
from scorch import Format

REFUSALS = (NotImplementedError, ValueError, TypeError)
MIN_COMPUTED = 0.6          # the share of each batch's cases that must compute
# (float32 and float64 twice as often as the half types, which scorch computes in float32)
VALUE_DTYPES = (torch.float32, torch.float64) * 2 + (torch.bfloat16, torch.float16)
# The expressions draw integer values too (computed exactly, compared exactly).
EXPRESSION_DTYPES = VALUE_DTYPES + (torch.int32, torch.int64)
INDEX_DTYPES = (torch.int32, torch.int64)
# Extents drawn for an index: small, 0 and 1 included (more weight on the small ones).
SIZES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 9, 10, 11, 12]
# The iteration space of an expression is kept under this many points: fast, and the sums
# of products of the small integer values stay below 2**24, exact in float32 too.
MAX_POINTS = 8000


def tol(dtype):
    """Tolerances for a result of ``dtype`` against a float64 reference.  The integer
    inputs make most results exact; softmax and its gradients are not."""
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5)
    if dtype == torch.bfloat16:   # (against the reference rounded to bfloat16 once: compare)
        return dict(rtol=1.6e-2, atol=1e-5)
    if dtype == torch.float16:   # (two units in the last place, as bfloat16's: a loss
        return dict(rtol=2e-3, atol=1e-5)   # summed in float16 after the op rounds twice)
    return dict(rtol=1e-12, atol=1e-12)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


# ---- formats --------------------------------------------------------------------------

def random_format(rng, n, assemblable=False):
    """A random Format for an n-dimensional tensor: a named one, a COO-like one (a prefix of
    unique d/c levels, then c(nonunique) and singletons, or c(nonunique) last: duplicate
    coordinates in a segment, as in an uncoalesced CSR), or any string of d/c levels,
    sometimes in a permuted level order.  ``assemblable`` keeps to formats a kernel can
    write as an output (dense levels, then compressed ones)."""
    r = rng.random()
    if not assemblable and r < 0.25:
        names = ["coo", "csf", "dense"] + (["csr", "csc", "dcsr", "dcsc"] if n == 2 else [])
        return Format.parse(rng.choice(names), n)
    if not assemblable and r < 0.45:
        p = rng.randrange(0, n)
        levels = "".join(rng.choice("dc") for _ in range(p)) + "c(nonunique)"
        if p < n - 1:
            levels += "s(nonunique)" * (n - p - 2) + rng.choice(["s", "s(nonunique)"])
    elif assemblable:
        nd = rng.randrange(0, n + 1)
        levels = "d" * nd + "c" * (n - nd)
    else:
        levels = "".join(rng.choice("dcc") for _ in range(n))
    order = None
    if n >= 2 and rng.random() < 0.4:
        order = list(range(n))
        rng.shuffle(order)
    return Format(levels, order=order) if order else Format.parse(levels, n)


def allows_duplicates(fmt):
    """True where the format can store one coordinate twice: a non-unique level, and only
    non-unique levels after it."""
    first = next((k for k, u in enumerate(fmt.unique) if not u), None)
    return first is not None and not any(fmt.unique[first:])


# ---- operands -------------------------------------------------------------------------

def small_ints(g, shape, dtype):
    """Nonzero integers in ±1..±3 (as ``dtype``)."""
    mag = torch.randint(1, 4, shape, generator=g)
    sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
    return (mag * sign).to(dtype)


def random_dense(g, shape, density, dtype):
    keep = torch.rand(shape, generator=g) < density
    return torch.where(keep, small_ints(g, shape, dtype), torch.zeros((), dtype=dtype))


def from_entries(shape, fmt, coords, values, index_dtype, dtype):
    """A SparseTensor in ``fmt`` storing the entries (coords[e], values[e]), built level by
    level here (independently of scorch's conversions) and checked by from_components.
    Entries with equal coordinates stay separate where the format allows duplicates
    (``allows_duplicates``) and are summed otherwise; an entry of value 0 is an explicit
    zero."""
    n = len(shape)
    order = fmt.order
    entries = sorted(range(len(coords)), key=lambda e: tuple(coords[e][d] for d in order))
    nodes = [entries]                       # per position of the current level: its entries
    pos, crd = [None] * n, [None] * n
    for k, kind in enumerate(fmt.levels):
        d = order[k]
        new, p_arr, c_arr = [], [0], []
        for group in nodes:
            if kind == "dense":
                new += [[e for e in group if coords[e][d] == c] for c in range(shape[d])]
                continue
            if kind == "singleton":
                assert len(group) == 1, "a singleton level under a position with no entry"
                c_arr.append(coords[group[0]][d])
                new.append(group)
                continue
            if fmt.unique[k]:
                children = {}
                for e in group:
                    children.setdefault(coords[e][d], []).append(e)
                for c in sorted(children):
                    c_arr.append(c)
                    new.append(children[c])
            else:                           # non-unique: one position per entry
                for e in group:
                    c_arr.append(coords[e][d])
                    new.append([e])
            p_arr.append(len(c_arr))
        if kind == "compressed":
            pos[k] = torch.tensor(p_arr, dtype=index_dtype)
        if kind != "dense":
            crd[k] = torch.tensor(c_arr, dtype=index_dtype)
        nodes = new
    vals = torch.tensor([sum(values[e] for e in group) for group in nodes], dtype=dtype)
    return scorch.from_components(tuple(shape), fmt, pos=pos, crd=crd, values=vals)


def random_sparse(g, rng, shape, fmt, dtype, index_dtype, density):
    """(SparseTensor, its dense float64 reference, a word on how it was built).

    Built by scorch.to_sparse from a dense tensor, or entry by entry with explicit zeros
    and, where the format allows, duplicate coordinates (a value split in two parts, a
    zero written as +k and -k)."""
    x = random_dense(g, shape, density, torch.float64)
    if rng.random() < 0.35:
        return scorch.to_sparse(x.to(dtype), fmt, index_dtype=index_dtype), x, "to_sparse"
    coords = [tuple(c) for c in torch.nonzero(x).tolist()]
    values = [float(x[c]) for c in coords]
    explicit_zeros = rng.random() < 0.4 and math.prod(shape) > 0
    dups = (allows_duplicates(fmt) and rng.random() < 0.75
            and math.prod(shape) > 0)
    if explicit_zeros:
        for _ in range(rng.randint(1, 3)):
            c = tuple(rng.randrange(s) for s in shape)
            if c not in coords:
                coords.append(c)
                values.append(0.0)
    if dups:
        for e in range(len(coords)):
            if rng.random() < 0.5:
                part = float(rng.randint(-3, 3))
                values[e] -= part
                coords.append(coords[e])
                values.append(part)
        c = tuple(rng.randrange(s) for s in shape)
        k = float(rng.randint(1, 3))
        coords += [c, c]            # +k and -k: the reference is unchanged
        values += [k, -k]
    how = "entries" + (" +explicit zeros" if explicit_zeros else "") + (" +dups" if dups else "")
    return from_entries(shape, fmt, coords, values, index_dtype, dtype), x, how


def random_dense_operand(g, rng, shape, dtype, density):
    """A dense operand (and its contiguous float64 copy): contiguous, a permuted view, a
    strided slice, or a broadcast (expanded) view."""
    n = len(shape)
    layout = rng.choice(["contig", "contig", "perm", "slice", "expand"])
    if layout == "perm" and n >= 2:
        perm = rng.sample(range(n), n)
        base = random_dense(g, [shape[p] for p in perm], density, dtype)
        x = base.permute([perm.index(d) for d in range(n)])
    elif layout == "slice":
        big = random_dense(g, [2 * s + 1 for s in shape], density, dtype)
        x = big[tuple(slice(1, 1 + 2 * s, 2) for s in shape)]
    elif layout == "expand" and any(s > 1 for s in shape):
        d = max(range(n), key=lambda d: shape[d])
        x = random_dense(g, [1 if e == d else s for e, s in enumerate(shape)], density,
                         dtype).expand(shape)
    else:
        layout = "contig"
        x = random_dense(g, shape, density, dtype)
    assert list(x.shape) == list(shape)
    return x, x.to(torch.float64).contiguous(), layout


def describe(x):
    if isinstance(x, scorch.SparseTensor):
        return f"{x.format!r}[{dtype_name(x.index_dtype)}] {tuple(x.shape)}"
    return f"dense {tuple(x.shape)}"


# ---- checks ---------------------------------------------------------------------------

def snapshot(x):
    """Copies of an operand's arrays and values (and a dense operand's strides)."""
    if isinstance(x, scorch.SparseTensor):
        return ([None if a is None else a.clone() for a in x._pos + x._crd],
                x.values().detach().clone())
    return ([x.stride()], x.detach().clone())


def unchanged(x, snap):
    arrays, vals = snapshot(x)
    if isinstance(x, scorch.SparseTensor):
        same = all((a is None) == (b is None) and (a is None or torch.equal(a, b))
                   for a, b in zip(arrays, snap[0]))
    else:
        same = arrays == snap[0]
    return same and vals.dtype == snap[1].dtype and torch.equal(vals, snap[1])


def check_sparse_result(r):
    """A sparse result's arrays pass scorch's own validation (pos monotone, coordinates in
    range and ordered, one index dtype)."""
    scorch.from_components(tuple(r.shape), r.format, pos=r._pos, crd=r._crd,
                           values=r.values().detach())


def compare(got, ref, dtype, what):
    """got (a SparseTensor or tensor) equals the float64 reference: dtype, shape, values."""
    if isinstance(got, scorch.SparseTensor):
        check_sparse_result(got)
        got = got.to_dense()
    assert isinstance(got, torch.Tensor), f"{what}: result is a {type(got).__name__}"
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    assert tuple(got.shape) == tuple(ref.shape), (
        f"{what}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    ref = ref.detach()
    if dtype in (torch.bfloat16, torch.float16):   # (computed in float32, rounded once)
        ref = ref.to(dtype).to(torch.float64)
    torch.testing.assert_close(got.detach().to(torch.float64), ref, **tol(dtype),
                               msg=lambda m: f"{what}: {m}")


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def stored_coords(A):
    """The coordinates of A's stored values, in storage order ([ndim, nnz], int64), read
    off its level arrays: dense-level padding and duplicates included."""
    fmt = A.format
    prefixes = [()]
    for k, kind in enumerate(fmt.levels):
        pos, crd = A.indices(k)
        if kind == "dense":
            prefixes = [p + (c,) for p in prefixes for c in range(A.shape[fmt.order[k]])]
        elif kind == "compressed":
            pos, crd = pos.tolist(), crd.tolist()
            prefixes = [p + (crd[q],) for i, p in enumerate(prefixes)
                        for q in range(pos[i], pos[i + 1])]
        else:
            prefixes = [p + (c,) for p, c in zip(prefixes, crd.tolist())]
    out = torch.zeros(A.dim(), len(prefixes), dtype=torch.int64)
    for e, p in enumerate(prefixes):
        for k, c in enumerate(p):
            out[fmt.order[k], e] = c
    return out


def dense_of_values(v, coords, shape):
    """The dense tensor whose entries are the values v at coords (duplicates summed), as a
    differentiable function of v."""
    return torch.zeros(tuple(shape), dtype=v.dtype).index_put((*coords,), v, accumulate=True)


class Tally:
    """Outcomes of a batch: failures (with their descriptions), refusals, computed."""

    def __init__(self, family, seeds):
        self.family, self.seeds = family, seeds
        self.failures, self.refused, self.computed = [], [], 0

    def run(self, seed, fn):
        try:
            outcome = fn(seed)
        except AssertionError as e:
            self.failures.append(f"seed {seed}: {e}")
            return
        except Exception as e:   # building the case failed (call_or_refusal wraps the call)
            self.failures.append(f"seed {seed}: {type(e).__name__}: {e}\n"
                                 + "".join(traceback.format_exc(limit=-3)))
            return
        if outcome == "ok":
            self.computed += 1
        else:
            self.refused.append(outcome)

    @classmethod
    def batch(cls, family, seeds, fn):
        """Run fn on every seed, then check the batch."""
        tally = cls(family, seeds)
        for seed in seeds:
            tally.run(seed, fn)
        tally.check()

    def check(self):
        assert not self.failures, (
            f"{len(self.failures)} of {len(self.seeds)} {self.family} cases failed:\n\n"
            + "\n\n".join(self.failures))
        share = self.computed / len(self.seeds)
        assert share >= MIN_COMPUTED, (
            f"only {self.computed} of {len(self.seeds)} {self.family} cases computed; "
            "refused:\n" + "\n".join(self.refused))


def call_or_refusal(fn, operands, what):
    """fn() or, where scorch refuses with a message, None; the operands must be unchanged
    either way."""
    snaps = [snapshot(x) for x in operands]
    try:
        result = fn()
    except REFUSALS as e:
        assert str(e).strip(), f"{what}: {type(e).__name__} without a message"
        result = None
        refusal = f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    except Exception as e:       # anything else is a failure of the case
        raise AssertionError(f"{what}: raised {type(e).__name__}: {e}\n"
                             + traceback.format_exc(limit=-3)) from e
    else:
        refusal = None
    for i, (x, snap) in enumerate(zip(operands, snaps)):
        assert unchanged(x, snap), f"{what}: operand {i} ({describe(x)}) was modified"
    return result, refusal


# ---- random expressions ---------------------------------------------------------------

LETTERS = "ijklmnab"


def random_einsum(rng):
    """(expression, terms): 1-4 operands of order 1-4 over up to 6 indices, now and then a
    repeated index in a term (a diagonal); explicit output (a random subset of the
    indices, in random order, or none: a scalar) or, rarely, the implicit one."""
    nvars = rng.randint(1, 6)
    pool = list(LETTERS[:nvars]) if rng.random() < 0.5 else rng.sample(LETTERS, nvars)
    terms = []
    for _ in range(rng.choice([1, 1, 2, 2, 2, 3, 3, 4])):
        order = rng.randint(1, 4)
        if rng.random() < 0.04 and order >= 2:
            terms.append("".join(rng.choice(pool) for _ in range(order)))
        else:
            terms.append("".join(rng.sample(pool, min(order, len(pool)))))
    joined = "".join(terms)
    used = sorted(set(joined), key=joined.index)
    r = rng.random()
    if r < 0.05:
        return ",".join(terms), terms
    out = "" if r < 0.15 else "".join(rng.sample(used, rng.randint(0, len(used))))
    return ",".join(terms) + "->" + out, terms


def random_index_notation(rng, ints=False):
    """(text, operand names in order of first appearance, {name: indices}, output indices):
    a sum or difference of 1-3 products of 1-3 factors, each factor an access of one of
    up to 4 operands or a literal (an integer one for integer values), with unary minus,
    parentheses and a scale."""
    pool = rng.sample("ijklm", rng.randint(1, 5))
    avail = ["A", "B", "D", "E"][:rng.randint(1, 3)]
    access = {nm: rng.sample(pool, min(rng.randint(1, 3), len(pool))) for nm in avail}

    def factor():
        if rng.random() < 0.15:
            return rng.choice(["2", "-1", "3", "0"] if ints else ["2", "0.5", "3", "-1.5", "0"])
        nm = rng.choice(avail)
        return f"{nm}({','.join(access[nm])})"

    def term():
        t = " * ".join(factor() for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.1 and not t.startswith("-"):
            t = "-" + t
        if rng.random() < 0.1:
            t = "(" + t + ")"
        return t

    rhs = term()
    for _ in range(rng.randint(0, 2)):
        rhs += rng.choice([" + ", " - "]) + term()
    if rng.random() < 0.1:
        rhs = "2 * (" + rhs + ")"
    names = list(dict.fromkeys(re.findall(r"([A-Z])\(", rhs)))
    if not names:                      # literals only: make it read an operand
        rhs += " * A(" + ",".join(access["A"]) + ")"
        names = ["A"]
    used = list(dict.fromkeys(v for nm in names for v in access[nm]))
    out = rng.sample(used, rng.randint(0, len(used)))
    lhs = f"C({','.join(out)})" if (out or rng.random() < 0.5) else "C"
    return f"{lhs} = {rhs}", names, access, out


def expression_case(seed):
    """The random case of a seed: everything but the operand data, as plain values."""
    rng = random.Random(seed)
    case = {"seed": seed, "dtype": rng.choice(EXPRESSION_DTYPES)}
    if rng.random() < 0.2:
        ints = not case["dtype"].is_floating_point
        text, names, access, out = random_index_notation(rng, ints)
        case.update(lang="index", expr=text, names=names, out="".join(out),
                    terms=["".join(access[nm]) for nm in names])
    else:
        expr, terms = random_einsum(rng)
        if "->" in expr:
            out = expr.split("->")[1]
        else:                          # implicit: the indices used once, sorted
            joined = "".join(terms)
            out = "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
        case.update(lang="einsum", expr=expr, terms=terms, out=out)
    variables = sorted(set("".join(case["terms"])))
    dims = {v: rng.choice(SIZES) for v in variables}
    while math.prod(dims.values()) > MAX_POINTS:
        v = rng.choice(variables)
        dims[v] = max(1, dims[v] // 2)
    case["dims"] = dims
    ops = []
    for t, term in enumerate(case["terms"]):
        op = {"shape": [dims[c] for c in term],
              "density": rng.choice([0.0, 0.05, 0.2, 0.5, 0.8, 1.0, rng.random()])}
        if (t > 0 and case["lang"] == "einsum" and case["terms"][t - 1] == term
                and rng.random() < 0.5):
            op["alias"] = t - 1        # the same tensor object passed twice
        elif rng.random() < 0.6:
            op["format"] = random_format(rng, len(term))
            op["index_dtype"] = rng.choice(INDEX_DTYPES)
        ops.append(op)
    case["ops"] = ops
    n_out = len(case["out"])
    r = rng.random()
    if r < 0.45 or n_out == 0:
        case["out_format"] = "dense" if (n_out == 0 and rng.random() < 0.05) else None
    elif r < 0.6:
        case["out_format"] = "dense"
    else:
        case["out_format"] = random_format(rng, n_out, assemblable=rng.random() < 0.7)
    case["schedule"] = None
    if rng.random() < 0.25:
        order = list(variables)
        parts = []
        if rng.random() < 0.8:
            rng.shuffle(order)
            parts.append(f"order({','.join(order)})")
        r = rng.random()
        if r < 0.3:
            parts.append("parallel(none)")
        elif r < 0.5 and order:
            parts.append(f"parallel({order[0] if rng.random() < 0.7 else rng.choice(order)})")
        if rng.random() < 0.15 and case["out"]:
            ws = rng.sample(list(case["out"]), rng.randint(1, len(case["out"])))
            parts.append(f"workspace({','.join(ws)})")
        case["schedule"] = " ".join(parts)
    case["twice"] = rng.random() < 0.1       # call again: a kernel found, not compiled
    return case


def build_operands(case):
    """The operands of a case, their float64 references and a description of each."""
    g = torch.Generator().manual_seed(case["seed"])
    rng = random.Random(case["seed"] * 7 + 1)
    dtype = case["dtype"]
    operands, refs, words = [], [], []
    for op in case["ops"]:
        if "alias" in op:
            operands.append(operands[op["alias"]])
            refs.append(refs[op["alias"]])
            words.append(f"operand {op['alias']} again")
            continue
        if "format" in op:
            x, ref, how = random_sparse(g, rng, op["shape"], op["format"], dtype,
                                        op["index_dtype"], op["density"])
        else:
            x, ref, how = random_dense_operand(g, rng, op["shape"], dtype, op["density"])
        operands.append(x)
        refs.append(ref)
        words.append(f"{describe(x)} {how}, density {op['density']:.2f}")
    return operands, refs, words


def index_notation_reference(case, refs):
    """Evaluate the index notation densely: every access broadcast over all the
    expression's indices, the right-hand side evaluated, the non-output indices summed."""
    variables = sorted(case["dims"])
    dims = case["dims"]
    tensors = dict(zip(case["names"], zip(case["terms"], refs)))

    def access(name):
        idx, t = tensors[name]
        t = torch.einsum(f"{idx}->{''.join(v for v in variables if v in idx)}", t)
        return t.reshape([dims[v] if v in idx else 1 for v in variables])

    rhs = re.sub(r"([A-Z])\([a-z,]*\)", lambda m: f"access('{m.group(1)}')",
                 case["expr"].split("=", 1)[1])
    val = eval(rhs, {"access": access})          # noqa: S307 (our own generated text)
    if not isinstance(val, torch.Tensor):
        val = torch.tensor(float(val), dtype=torch.float64)
    val = val.expand([dims[v] for v in variables])
    return torch.einsum(f"{''.join(variables)}->{case['out']}", val)


def describe_expression_case(case, words):
    lines = [f"{case['lang']} {case['expr']!r}  {dtype_name(case['dtype'])}  "
             f"dims {case['dims']}  out_format {case['out_format']!r}  "
             f"schedule {case['schedule']!r}"]
    lines += [f"  operand {i}: {w}" for i, w in enumerate(words)]
    return "\n".join(lines)


def run_expression_case(seed):
    """Run one random expression; "ok", or a refusal's description; fails (raises
    AssertionError) on a wrong result."""
    case = expression_case(seed)
    operands, refs, words = build_operands(case)
    what = describe_expression_case(case, words)
    of = case["out_format"]

    def call():
        if case["lang"] == "einsum":
            return scorch.einsum(case["expr"], *operands, out_format=of,
                                 schedule=case["schedule"])
        return scorch.kernel(case["expr"], out_format=of, schedule=case["schedule"])(*operands)

    results = []
    for _ in range(2 if case["twice"] else 1):
        r, refusal = call_or_refusal(call, operands, what)
        if refusal:
            return refusal
        results.append(r)
    if case["lang"] == "einsum":
        ref = torch.einsum(case["expr"], *refs)
    else:
        ref = index_notation_reference(case, refs)
    for r in results:
        if isinstance(of, Format):
            if isinstance(r, scorch.SparseTensor):
                assert r.format == of, f"{what}\n  result format {r.format!r}, asked {of!r}"
            else:
                assert all(k == "dense" for k in of.levels), (
                    f"{what}\n  asked {of!r}, got a dense tensor")
        elif of == "dense":
            assert not isinstance(r, scorch.SparseTensor), (
                f"{what}\n  asked dense, got {r.format!r}")
        compare(r, ref, result_dtype(case, refs), what)
    return "ok"


def result_dtype(case, refs):
    """The case's dtype, or what torch.einsum gives for it where that differs: int64 for
    integer operands where one has an index neither another operand nor the output has
    (torch.einsum sums it first, through sum)."""
    d = case["dtype"]
    if case["lang"] != "einsum" or d.is_floating_point:
        return d
    expr = case["expr"]
    ins = expr.split("->")[0].split(",")
    letters = "".join(ins)
    out = expr.split("->")[1] if "->" in expr else \
        "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    lone = any(c not in out and not any(c in t for j, t in enumerate(ins) if j != k)
               for k, s in enumerate(ins) for c in s)
    return torch.int64 if lone else d


EXPRESSION_SEEDS = list(range(200))


@pytest.mark.parametrize("batch", range(8))
def test_random_expressions(batch):
    Tally.batch("expression", EXPRESSION_SEEDS[batch::8], run_expression_case)


# ---- random torch ops on sparse matrices -----------------------------------------------

# Matrix formats for the torch-op cases: the named ones, and custom level strings (a
# dense level under a compressed one, a permuted order, non-unique levels).
MATRIX_FORMATS = ["csr", "csc", "coo", "dcsr", "dcsc", "dense", "cd", "c(nonunique)s",
                  "dc(nonunique)", "cc(nonunique)", Format("cc", order=(1, 0)),
                  Format("cd", order=(1, 0))]


def matrix_case(rng, g):
    """A random sparse matrix: (A, its float64 reference, description, dtype, m, n);
    with duplicate coordinates now and then where its format allows them."""
    m, n = rng.choice(SIZES), rng.choice(SIZES)
    dtype = rng.choice(VALUE_DTYPES)
    fmt = Format.parse(rng.choice(MATRIX_FORMATS), 2)
    A, ref, how = random_sparse(g, rng, (m, n), fmt, dtype, rng.choice(INDEX_DTYPES),
                                rng.choice([0.0, 0.1, 0.3, 0.6, 1.0]))
    return A, ref, f"A: {describe(A)} {dtype_name(dtype)} {how}", dtype, m, n


def dense(g, shape, dtype):
    return random_dense(g, shape, 0.8, dtype)


def op_cases(A, x, dtype, m, n, g, rng):
    """{name: (call, reference, operands)} for the torch ops over A (reference dense x)."""
    K = rng.choice([1, 3, 4])
    other = rng.choice([dtype] * 4 + [torch.float64])   # now and then a promotion
    X, v, Y = dense(g, (n, K), other), dense(g, (n,), dtype), dense(g, (m, K), dtype)
    Z, C, b = dense(g, (K, m), dtype), dense(g, (m, K), dtype), dense(g, (m,), dtype)
    Xin, D = dense(g, (rng.choice([1, 2]), n), dtype), dense(g, (m, n), dtype)
    Q, Kd = dense(g, (m, K), dtype), dense(g, (n, K), dtype)
    alpha, beta = rng.choice([(1, 1), (2.0, 0.5), (1, 0), (-1.5, 3)])
    d = lambda t: t.to(torch.float64)   # noqa: E731
    return {
        "mm": (lambda: torch.mm(A, X), lambda: x @ d(X), [A, X]),
        "matmul": (lambda: torch.matmul(A, X), lambda: x @ d(X), [A, X]),
        "A @ v": (lambda: A @ v, lambda: x @ d(v), [A, v]),
        "Z @ A": (lambda: Z @ A, lambda: d(Z) @ x, [A, Z]),
        "A.t() @ Y": (lambda: A.t() @ Y, lambda: x.t() @ d(Y), [A, Y]),
        "addmm": (lambda: torch.addmm(C, A, X, beta=beta, alpha=alpha),
                  lambda: beta * d(C) + alpha * (x @ d(X)), [A, X, C]),
        "F.linear": (lambda: F.linear(Xin, A, b), lambda: d(Xin) @ x.t() + d(b), [A, Xin, b]),
        "einsum sddmm": (lambda: torch.einsum("ij,ik,jk->ij", A, Q, Kd),
                         lambda: x * (d(Q) @ d(Kd).t()), [A, Q, Kd]),
        "einsum ij,j->i": (lambda: torch.einsum("ij,j->i", A, v), lambda: x @ d(v), [A, v]),
        "A + D": (lambda: A + D, lambda: x + d(D), [A, D]),
        "A - D": (lambda: A - D, lambda: x - d(D), [A, D]),
        "A * D": (lambda: A * D, lambda: x * d(D), [A, D]),
        "D * A": (lambda: D * A, lambda: x * d(D), [A, D]),
        "A * 2 - A / 4": (lambda: A * 2 - A / 4, lambda: x * 1.75, [A]),
        "sum(0)": (lambda: A.sum(0), lambda: x.sum(0), [A]),
        "sum(1)": (lambda: A.sum(1), lambda: x.sum(1), [A]),
        "sum()": (lambda: A.sum(), lambda: x.sum(), [A]),
        "t()": (lambda: A.t(), lambda: x.t(), [A]),
    }


def sparse_pair_cases(A, x, B, y):
    """Ops of two sparse matrices of the same shape, and A @ B.t() (SpGEMM)."""
    return {
        "A + B": (lambda: A + B, lambda: x + y, [A, B]),
        "A - B": (lambda: A - B, lambda: x - y, [A, B]),
        "A * B": (lambda: A * B, lambda: x * y, [A, B]),
        "A @ B.t()": (lambda: A @ B.t(), lambda: x @ y.t(), [A, B]),
        "torch.mm(A, B.t())": (lambda: torch.mm(A, B.t()), lambda: x @ y.t(), [A, B]),
    }


def softmax_reference(A, dim, log):
    """torch.sparse.(log_)softmax over A's stored entries (explicit zeros and dense-level
    padding are entries), as a dense tensor with 0 where nothing is stored."""
    coo = torch.sparse_coo_tensor(stored_coords(A), A.values().detach().to(torch.float64),
                                  tuple(A.shape), check_invariants=True).coalesce()
    fn = torch.sparse.log_softmax if log else torch.sparse.softmax
    return fn(coo, dim).to_dense()


# The softmax spellings scorch routes, by log: (name, function).
SOFTMAXES = {False: [("torch.softmax", torch.softmax), ("torch.sparse.softmax",
                                                         torch.sparse.softmax)],
             True: [("torch.log_softmax", torch.log_softmax),
                    ("torch.sparse.log_softmax", torch.sparse.log_softmax)]}


# Every op the torch-op cases call, taken in turn by seed (so each gets its share).
SINGLE_OPS = sorted(op_cases(None, None, torch.float64, 1, 1, torch.Generator(),
                             random.Random(0)))
PAIR_OPS = sorted(sparse_pair_cases(None, None, None, None))
OP_NAMES = SINGLE_OPS + PAIR_OPS + ["softmax"] * 2


def run_op_case(seed):
    """One torch op on a random sparse matrix; "ok" or a refusal's description."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    name = OP_NAMES[seed % len(OP_NAMES)]
    A, x, what, dtype, m, n = matrix_case(rng, g)
    if name == "softmax":            # over stored entries
        dim, log = rng.choice([0, 1, -1]), rng.random() < 0.3
        spelling, fn = rng.choice(SOFTMAXES[log])
        name = f"{spelling}(A, {dim})"
        cases = {name: (lambda: fn(A, dim), lambda: softmax_reference(A, dim, log), [A])}
    elif name in PAIR_OPS:           # two sparse matrices
        fmt = Format.parse(rng.choice(MATRIX_FORMATS), 2)
        B, y, how = random_sparse(g, rng, (m, n), fmt, dtype, rng.choice(INDEX_DTYPES),
                                  rng.choice([0.0, 0.3, 0.7]))
        what += f"; B: {describe(B)} {how}"
        cases = sparse_pair_cases(A, x, B, y)
    else:
        cases = op_cases(A, x, dtype, m, n, g, rng)
    call, reference, operands = cases[name]
    what = f"{name}  ({what})"
    got, refusal = call_or_refusal(call, operands, what)
    if refusal:
        return refusal
    ref = reference()
    want = dtype
    for o in operands:
        if isinstance(o, torch.Tensor) and o.dtype.is_floating_point:
            want = torch.promote_types(want, o.dtype)
    if name.startswith(("torch.softmax", "torch.log_softmax", "torch.sparse")):
        assert isinstance(got, scorch.SparseTensor) and got.nnz == A.nnz, (
            f"{what}: softmax is not on A's pattern")
    if name == "t()":
        assert got.values() is A.values(), f"{what}: t() copied the values"
    compare(got, ref, want, what)
    return "ok"


OP_SEEDS = list(range(1000, 1120))


@pytest.mark.parametrize("batch", range(4))
def test_random_torch_ops(batch):
    Tally.batch("torch-op", OP_SEEDS[batch::4], run_op_case)


# ---- random autograd ------------------------------------------------------------------

def grad_ops(dtype, m, n, g, rng):
    """{name: (loss of a matrix, dense inputs)}: each loss weights an op's result with a
    random dense W, so that every entry matters, and works on a SparseTensor and on its
    dense equivalent alike."""
    K = rng.choice([1, 3])
    R = lambda *s: dense(g, s, dtype)   # noqa: E731
    return {
        "A @ X": (lambda A, X, W: ((A @ X) * W).sum(), [R(n, K), R(m, K)]),
        "Z @ A": (lambda A, Z, W: ((Z @ A) * W).sum(), [R(K, m), R(K, n)]),
        "A.t() @ Y": (lambda A, Y, W: ((A.t() @ Y) * W).sum(), [R(m, K), R(n, K)]),
        "A @ v": (lambda A, v, w: ((A @ v) * w).sum(), [R(n), R(m)]),
        "F.linear": (lambda A, x, b, W: (F.linear(x, A, b) * W).sum(),
                     [R(2, n), R(m), R(2, m)]),
        "addmm": (lambda A, C, X, W: (torch.addmm(C, A, X, beta=0.5, alpha=2.0) * W).sum(),
                  [R(m, K), R(n, K), R(m, K)]),
        "einsum sddmm": (lambda A, Q, Kd, W: (dense_of(torch.einsum("ij,ik,jk->ij", A, Q, Kd))
                                              * W).sum(), [R(m, K), R(n, K), R(m, n)]),
        "A * D": (lambda A, D, W: (dense_of(A * D) * W).sum(), [R(m, n), R(m, n)]),
        "2 * A - A / 4": (lambda A, W: (dense_of(2 * A - A / 4) * W).sum(), [R(m, n)]),
        "sum(1)": (lambda A, w: (A.sum(1) * w).sum(), [R(m)]),
        "sum(0)": (lambda A, w: (A.sum(0) * w).sum(), [R(n)]),
        "to_dense": (lambda A, W: (dense_of(A) * W).sum(), [R(m, n)]),
    }


GRAD_OPS = sorted(grad_ops(torch.float64, 1, 1, torch.Generator(), random.Random(0)))


def run_grad_case(seed):
    """Backward through one random op (or softmax); the gradients of A's values and of the
    dense inputs against the dense computation.  "ok" or a refusal's description."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    name = (GRAD_OPS + ["softmax"])[seed % (len(GRAD_OPS) + 1)]
    A, _, what, dtype, m, n = matrix_case(rng, g)
    coords = stored_coords(A)
    v = A.values().detach().clone().requires_grad_()
    v64 = A.values().detach().to(torch.float64).requires_grad_()
    if name == "softmax":
        dim = rng.choice([0, 1])
        name = f"torch.softmax(A, {dim})"
        inputs = [dense(g, (m, n), dtype)]

        def loss(M, W):
            return (torch.softmax(M, dim).to_dense() * W).sum()

        def loss_dense(W):       # torch.sparse.softmax over the same stored entries
            coo = torch.sparse_coo_tensor(coords, v64, tuple(A.shape), check_invariants=True)
            return (torch.sparse.softmax(coo.coalesce(), dim).to_dense() * W).sum()
    else:
        loss, inputs = grad_ops(dtype, m, n, g, rng)[name]

        def loss_dense(*ins):
            return loss(dense_of_values(v64, coords, A.shape), *ins)
    # Two ways to ask for the gradient: values that require it (A.with_values(v): v.grad),
    # or a copy of A that requires it (A.grad: a SparseTensor with A's pattern).
    leaf = "A.with_values(v)" if rng.random() < 0.7 else "A.clone().requires_grad_()"
    what = f"grad of {name} through {leaf}  ({what})"
    ins = [t.clone().requires_grad_() for t in inputs]
    ins64 = [t.to(torch.float64).requires_grad_() for t in inputs]
    M = A.with_values(v) if leaf.startswith("A.with") else A.clone().requires_grad_()

    def backward():
        out = loss(M, *ins)
        out.backward()
        return out

    out, refusal = call_or_refusal(backward, [A] + inputs, what)
    if refusal:
        return refusal
    ref = loss_dense(*ins64)
    ref.backward()
    compare(out, ref, dtype, what + ": loss")
    grad = lambda t: torch.zeros_like(t) if t.grad is None else t.grad   # noqa: E731
    if leaf.startswith("A.with_values") or M.grad is None:
        got = grad(v)                           # (zeros where backward never reached A)
    else:
        assert torch.equal(stored_coords(M.grad), coords), (
            f"{what}: A.grad is not on A's pattern")
        got = M.grad.values()
    compare(got, grad(v64), dtype, what + ": gradient of A's values")
    for i, (a, b) in enumerate(zip(ins, ins64)):
        compare(grad(a), grad(b), dtype, what + f": gradient of dense input {i}")
    return "ok"


GRAD_SEEDS = list(range(2000, 2070))


@pytest.mark.parametrize("batch", range(2))
def test_random_autograd(batch):
    Tally.batch("autograd", GRAD_SEEDS[batch::2], run_grad_case)
