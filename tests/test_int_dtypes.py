"""Integer values: int32 and int64 stored and computed as they are (no float on the way),
int16, int8 and uint8 stored as they are and computed in int32, the result narrowed once;
with torch's integer semantics: sums, differences and products wrap on overflow (two's
complement), sums of every integer dtype but int64 reduce into int64, true division and
float scalars promote to float, and the reductions whose result is floating (mean, norms,
softmax) refuse integers as torch does.

Every result is compared with torch's own dense integer op: equal, dtype included.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

import scorch
from conftest import SHAPES_2D, coo_pair_with_duplicates, make_dense, seed_of

INTS = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)
FORMATS = ("csr", "csc", "coo", "dcsr", "dense")


def _ids(dt):
    return str(dt).split(".")[1]


def same(got, want):
    """got (dense or SparseTensor) equals want, dtype included."""
    if isinstance(got, scorch.SparseTensor):
        got = got.to_dense()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", (torch.int8, torch.int32), ids=_ids)
def test_einsum_summing_an_index_of_one_operand_gives_int64(dtype):
    """torch.einsum sums an index only one operand has (and the output has not) through
    torch.sum first, which gives int64; the result is then int64 ("ij,jk->ij")."""
    x = torch.full((2, 3), 100 if dtype is torch.int8 else 2**30, dtype=dtype)
    y = torch.full((3, 4), 100, dtype=dtype)
    for fmt in ("csr", "coo"):
        X = scorch.to_sparse(x, fmt)
        for expr in ("ij,jk->", "ij,jk->ij", "ij,jk->j", "ij,jk->ik", "ij,ij->i"):
            other = x if expr.startswith("ij,ij") else y
            for _ in range(2):                  # (the second call: the remembered route)
                same(scorch.einsum(expr, X, other), torch.einsum(expr, x, other))
    X = scorch.to_sparse(x, "csr")
    assert scorch.einsum("ij,jk->", X, y.float()).dtype == torch.float32


@pytest.mark.parametrize("fmt", ("csr", "coo"))
def test_einsum_summing_an_index_the_others_broadcast_gives_int64(fmt):
    """An index every other operand holds at extent 1 is summed alone too (it kept int8
    and wrapped: 3 x 100 gave 44); held at full extent by two operands, it is not."""
    a = torch.full((2, 3), 100, dtype=torch.int8)
    for expr, other in (("ij,ij->i", torch.ones(2, 1, dtype=torch.int8)),
                        ("ij,kj->ik", torch.ones(4, 1, dtype=torch.int8)),
                        ("ij,ij->i", torch.ones(2, 3, dtype=torch.int8))):
        for _ in range(2):                  # (the second call: the remembered route)
            same(torch.einsum(expr, scorch.to_sparse(a, fmt), other),
                 torch.einsum(expr, a, other))
    b = torch.full((2, 1), 100, dtype=torch.int8)
    same(torch.einsum("ij,ij->i", scorch.to_sparse(b, fmt), torch.ones(2, 3, dtype=torch.int8)),
         torch.einsum("ij,ij->i", b, torch.ones(2, 3, dtype=torch.int8)))


def test_explain_shows_the_widened_kernel():
    """explain describes the kernel the call runs: an int32 "ij->i" sums in int64, as
    torch.einsum does; "ij->ji" sums nothing and stays int32."""
    A = scorch.to_sparse(torch.tensor([[1, 0, 2], [0, 3, 0]], dtype=torch.int32), "csr")
    assert "operand A: csr = dc (0,1), int64," in scorch.explain("ij->i", A)
    assert "operand A: csr = dc (0,1), int32," in scorch.explain("ij->ji", A)


def test_add_with_alpha_scales_in_the_promoted_dtype():
    a = torch.tensor([[1., 0.], [0., 2.]])
    b = torch.tensor([[100, 0], [0, -100]], dtype=torch.int8)
    A, B = scorch.to_sparse(a, "csr"), scorch.to_sparse(b, "coo")
    for got, want in ((torch.add(A, B, alpha=3), torch.add(a, b, alpha=3)),
                      (torch.sub(A, B, alpha=3), torch.sub(a, b, alpha=3)),
                      (torch.add(A, b, alpha=3), torch.add(a, b, alpha=3)),
                      (torch.rsub(B, A, alpha=3), torch.rsub(b, a, alpha=3))):
        same(got.to_dense() if isinstance(got, scorch.SparseTensor) else got, want)
    i = torch.tensor([[1, 0], [0, 3]])
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(scorch.to_sparse(i, "csr"), scorch.to_sparse(i, "csr"), alpha=0.5)
    # integer add-products truncate a float alpha or beta, as torch's do
    inp, X, I = torch.ones(2, 2, dtype=torch.int64), torch.tensor([[3, 1], [1, 5]]), \
        scorch.to_sparse(i, "csr")
    for kw in (dict(alpha=0.5), dict(beta=0.5), dict(alpha=2.0, beta=3.0)):
        same(torch.addmm(inp, I, X, **kw), torch.addmm(inp, i, X, **kw))


@pytest.mark.parametrize("dtype", INTS, ids=_ids)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sid,shape,kind", SHAPES_2D, ids=[s[0] for s in SHAPES_2D])
def test_convert_and_products(dtype, fmt, sid, shape, kind):
    s = seed_of("int", sid, fmt, _ids(dtype))
    x = make_dense(shape, dtype, s, kind)
    before = x.clone()
    A = scorch.to_sparse(x, fmt)
    assert A.dtype == dtype and A.values().dtype == dtype
    assert A.nnz == int(torch.count_nonzero(x)) or fmt == "dense"
    same(A, x)
    n, m = shape
    X = make_dense((m, 3), dtype, s + 1, "full")
    v = make_dense((m,), dtype, s + 2, "full")
    same(A @ X, x @ X)
    same(torch.mv(A, v), x @ v)
    same(torch.mm(A, X), x @ X)
    W = make_dense((4, m), dtype, s + 3, "full")
    same(F.linear(W, A), W @ x.T)
    U = make_dense((n, 2), dtype, s + 4, "full")
    V = make_dense((m, 2), dtype, s + 5, "full")
    same(torch.einsum("ij,ik,jk->ij", A, U, V), x * (U @ V.T))
    B = scorch.to_sparse(x.T.contiguous(), fmt)
    same(A @ B, x @ x.T)
    same(A + A, x + x)
    same(A - 2 * A, -x)
    same(A * A, x * x)
    same(A * 3, 3 * x)
    same(A.sum(1), x.sum(1))
    same(A.sum(0), x.sum(0))
    same(A.t(), x.T)
    if fmt != "dense":
        same(A.to_format("csc" if fmt != "csc" else "coo"), x)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", INTS[:2], ids=_ids)
@pytest.mark.parametrize("K", (16, 21, 32, 64, 256))
def test_wide_dense_operands(dtype, K):
    """K of whole vectors and one of whole vectors and a partial one (21): the kernels'
    integer vectors (register tiles, dot products, grouped SDDMM rows) and their masked
    moves at a row's end (gcc 12 at -O3 -march=native once summed half of a 64-long int32
    dot written through signed/unsigned casts: values are unsigned in the generated C)."""
    s = seed_of("int-wide", _ids(dtype), K)
    x = make_dense((37, 29), dtype, s, "random")
    A = scorch.to_sparse(x, "csr")
    X, Y = make_dense((29, K), dtype, s + 1, "full"), make_dense((37, K), dtype, s + 2, "full")
    Z = make_dense((K, 37), dtype, s + 3, "full")
    same(A @ X, x @ X)
    same(A.t() @ Y, x.T @ Y)
    same(Z @ A, Z @ x)
    same(torch.einsum("ij,ik,jk->ij", A, Y, X), x * (Y @ X.T))
    same(torch.einsum("ij,ik,jk->ij", scorch.to_sparse(x, "coo"), Y, X), x * (Y @ X.T))


@pytest.mark.parametrize("dtype,vec", [(torch.int32, "sc_vu32"), (torch.int64, "sc_vu64")],
                         ids=["int32", "int64"])
def test_integer_kernels_use_vectors(dtype, vec):
    """SpMM and SDDMM on integers accumulate in vector variables of the values' unsigned
    type, as on floats: left to gcc, scalar-lane tiles of integers were vectorised over
    the nonzeros with gathers (7x the float32 time)."""
    x = make_dense((40, 30), dtype, seed_of("int-vec", _ids(dtype)), "random")
    A = scorch.to_sparse(x, "csr")
    X, Y = make_dense((30, 64), dtype, 1, "full"), make_dense((40, 64), dtype, 2, "full")

    def kernel_body(text):           # the kernel's definition, after the helpers
        return text[text.rindex("sc_kernel_"):]

    mm = kernel_body(scorch.explain(torch.mm, A, X))
    assert f"{vec} acc" in mm and "[64];" not in mm     # no local-array tile
    assert f"{vec} " in kernel_body(scorch.explain("ij,ik,jk->ij", A, Y, X))


def test_int32_products_wrap_as_torch():
    """Products and sums past 2**31 wrap (two's complement), as torch's int32 kernels do;
    the reference is computed in int64 and truncated."""
    big = 2 ** 30 + 12345
    x = torch.tensor([[big, 0, 3], [0, -big, big]], dtype=torch.int64)
    X = torch.tensor([[big, 7], [5, -big], [big, big]], dtype=torch.int64)
    want = (x @ X).to(torch.int32)          # (int64 products of < 2**62 are exact)
    assert not torch.equal(want.to(torch.int64), x @ X)     # something wrapped
    for fmt in ("csr", "csc", "coo"):
        A = scorch.to_sparse(x.to(torch.int32), fmt)
        same(A @ X.to(torch.int32), want)
        same(A + A, (x + x).to(torch.int32))
        same(A * A, (x * x).to(torch.int32))
        same(A @ A.t(), (x @ x.T).to(torch.int32))
        same(torch.einsum("ij,ij->i", A, x.to(torch.int32)), (x * x).sum(1).to(torch.int32))
    # int32 sums reduce in int64 (no wrap), as torch.sum does
    A = scorch.to_sparse(x.to(torch.int32), "csr")
    same(A.sum(1), x.sum(1))
    same(A.sum(), x.sum())


def test_int64_products_wrap():
    big = 2 ** 62 + 3
    x = torch.tensor([[big, 2], [0, big]], dtype=torch.int64)
    X = torch.tensor([[4, 1], [big, 0]], dtype=torch.int64)

    def wrapped(a):   # a Python int as int64 two's complement
        a &= (1 << 64) - 1
        return a - (1 << 64) if a >= 1 << 63 else a

    rows = x.tolist()
    cols = X.T.tolist()
    want = torch.tensor([[wrapped(sum(p * q for p, q in zip(r, c))) for c in cols]
                         for r in rows], dtype=torch.int64)
    A = scorch.to_sparse(x, "csr")
    same(A @ X, want)
    same(x @ X, want)    # (torch wraps the same way)


@pytest.mark.parametrize("dtype", INTS, ids=_ids)
@pytest.mark.parametrize("fmt", ("csr", "coo"))
def test_duplicates_are_summed(dtype, fmt):
    ref = make_dense((6, 5), torch.int64, seed_of("int-dup", fmt), "random")
    t, B = coo_pair_with_duplicates(ref, seed_of("int-dup", fmt), dtype)
    A = scorch.to_sparse(t, fmt)
    assert A.dtype == dtype
    same(A, ref.to(dtype))
    X = make_dense((5, 3), dtype, 11, "full")
    same(B @ X, ref.to(dtype) @ X)
    same(B.sum(0), ref.to(dtype).sum(0))   # (uint8: the duplicates wrap, then sum in int64)


@pytest.mark.parametrize("dtype", INTS, ids=_ids)
def test_maps_and_reductions_follow_torch(dtype):
    x = make_dense((5, 6), dtype, seed_of("int-maps", _ids(dtype)), "random")
    A = scorch.to_sparse(x, "csr")
    same(A.sum(1), x.sum(1))
    assert A.sum(1).dtype == torch.int64 and A.sum().dtype == torch.int64
    same(A.sum(1, dtype=torch.int32), x.sum(1, dtype=torch.int32))
    same(A.sum(dtype=dtype), x.sum(dtype=dtype))
    same(A.sum(dtype=torch.int32), x.sum(dtype=torch.int32))
    same(A.amax(1), x.amax(1))
    same(A.amin(0), x.amin(0))
    same(A.count_nonzero(), x.count_nonzero())
    same(A.count_nonzero(1), x.count_nonzero(1))
    for f in (torch.neg, torch.abs, torch.relu, torch.sign, torch.square,
              lambda t: t ** 2, lambda t: t.clamp(0 if dtype is torch.uint8 else -3, 4)):
        same(f(A), f(x))
    # float results: true division, float scalars, float functions
    for f in (lambda t: t / 2, lambda t: t * 2.5, lambda t: t * torch.tensor(0.5),
              torch.sqrt, torch.sin):
        r = f(A)
        assert isinstance(r, scorch.SparseTensor)
        torch.testing.assert_close(r.to_dense(), f(x), equal_nan=True)
    same(A.mean(dtype=torch.float64), x.mean(dtype=torch.float64))
    for f in (lambda t: t.mean(), lambda t: t.mean(1), torch.linalg.vector_norm,
              lambda t: t.norm(), lambda t: F.normalize(t)):
        with pytest.raises(RuntimeError):
            f(x)
        with pytest.raises(RuntimeError, match="floating point"):
            f(A)
    with pytest.raises(NotImplementedError, match="softmax of torch.u?int"):
        torch.softmax(A, 1)
    torch.testing.assert_close(torch.softmax(A, 1, dtype=torch.float64).to_dense(),
                               torch.sparse.softmax(x.double().to_sparse(), 1).to_dense())


@pytest.mark.parametrize("dtype", INTS, ids=_ids)
def test_one_operand_einsum_sums_as_torch_einsum(dtype):
    """torch.einsum of one integer operand sums an index in int64 (as torch.sum does) and
    keeps the dtype where it sums none; a row of int32 values near 2^30 overflows int32."""
    x = make_dense((5, 6), dtype, seed_of("int-einsum", _ids(dtype)), "random")
    if dtype is torch.int32:
        x[2] = 2**30
    for fmt in ("csr", "coo"):
        A = scorch.to_sparse(x, fmt)
        for expr in ("ij->i", "ij->j", "ij->", "ji->j", "ij->ji", "ij"):
            for _ in range(2):                  # (the second call: the remembered route)
                same(scorch.einsum(expr, A), torch.einsum(expr, x))
                same(torch.einsum(expr, A), torch.einsum(expr, x))
    same(scorch.einsum("ij->i", x), torch.einsum("ij->i", x))     # a dense operand too
    # what is wrong is reported as for any dtype, not by the widening
    with pytest.raises(ValueError, match="not part of one ellipsis"):
        scorch.einsum("ij.->i", A)
    with pytest.raises(TypeError, match="operand 0"):
        scorch.einsum("ij->i", x.tolist())


@pytest.mark.parametrize("dtype", INTS, ids=_ids)
def test_casts_and_interchange(dtype):
    x = make_dense((5, 4), dtype, seed_of("int-to", _ids(dtype)), "random")
    A = scorch.to_sparse(x, "csr")
    same(A.float(), x.float())
    same(A.double(), x.double())
    same(A.int(), x.int())
    same(A.long(), x.long())
    same(A.short(), x.short())
    same(A.char(), x.char())
    same(A.byte(), x.byte())
    same(A.float().to(dtype), x)
    assert A.type() == x.type()
    same(A.type("torch.FloatTensor"), x.float())
    t = A.to_torch()
    assert t.dtype == dtype and torch.equal(t.to_dense(), x)
    s = A.to_scipy()
    assert s.dtype == x.numpy().dtype
    assert np.array_equal(s.toarray(), x.numpy())
    same(scorch.to_sparse(s, "coo"), x)
    same(scorch.to_sparse(x.numpy(), "csc"), x)
    same(scorch.to_sparse(x.to_sparse_csr(), "dcsr"), x)
    same(A.to_format("csr", torch.int64), x)   # int64 indices, either value dtype
    with pytest.raises(RuntimeError, match="floating point"):
        A.requires_grad_()


def test_promotion():
    x = make_dense((5, 4), torch.int64, seed_of("int-mix"), "random")
    X = make_dense((4, 2), torch.int64, 1, "full")
    A32 = scorch.to_sparse(x.int(), "csr")
    same(A32 @ X, x @ X)                              # int32 with int64 -> int64
    same(A32 @ X.int(), (x @ X).int())
    same(A32 + scorch.to_sparse(x, "csr"), x + x)
    r = A32 @ X.float()                               # int with float -> float
    assert r.dtype == torch.float32
    torch.testing.assert_close(r, x.float() @ X.float())


def test_index_notation_constants():
    x = make_dense((4, 3), torch.int32, seed_of("int-const"), "random")
    A = scorch.to_sparse(x, "csr")
    k = scorch.kernel("C(i,j) = 3*A(i,j) - A(i,j)*A(i,j)", A="csr")
    same(k(A), 3 * x - x * x)
    k = scorch.kernel("C(i,j) = 0.5*A(i,j)", A="csr")
    with pytest.raises(ValueError, match="0.5 is not an int32 value"):
        k(A)
    # a float constant must be an integer of the dtype's range (torch would promote)
    k = scorch.kernel("C(i,j) = 3e9*A(i,j)", A="csr")
    with pytest.raises(ValueError, match=r"3000000000.0 is not an int32 value \(at column 9\)"):
        k(A)
    same(k(A.long()), 3000000000 * x.long())
    # an integer constant wraps to the dtype, as torch's Python int with an int32 tensor
    k = scorch.kernel("C(i,j) = 4294967296*A(i,j)", A="csr")
    same(k(A), x * 4294967296)
    same(k(A.long()), 4294967296 * x.long())


# Integer constants past 2^53 (where a double is no longer exact), int64's ends, and one
# whose float32 rounding differs through a double (2^60 + 2^36 + 1: float32's nearest is
# 2^60 + 2^37, a double's is the tie 2^60 + 2^36, then 2^60).
BIG_CONSTANTS = (9007199254740993, 2**63 - 1, -2**63, 2**60 + 2**36 + 1, 2**31 + 3, 4294967299)


@pytest.mark.parametrize("dtype", INTS + (torch.float32, torch.float64), ids=_ids)
@pytest.mark.parametrize("c", BIG_CONSTANTS)
@pytest.mark.parametrize("fmt", ("csr", "dense"))
def test_index_notation_integer_constants_exact(dtype, c, fmt):
    """An integer constant is the Python int torch would take: its exact int64 value,
    wrapped to an integer dtype, rounded once to a float one; the result equals torch's
    x * c and x * c + c * x (int16, int8 and uint8 computed in int32 and narrowed)."""
    x = torch.tensor([[1, 0, -2, 7], [0, 3, 0, -1]]).to(dtype)
    A = scorch.to_sparse(x, fmt) if fmt != "dense" else x
    same(scorch.kernel(f"C(i,j) = {c} * A(i,j)")(A), x * c)
    same(scorch.kernel(f"C(i,j) = A(i,j) * {c} + {c} * A(i,j)")(A), x * c + c * x)


def test_index_notation_integer_constant_errors():
    x = torch.tensor([[1, 0], [0, 3]])
    A = scorch.to_sparse(x, "csr")
    for text, col in (("9223372036854775808", 9), ("-9223372036854775809", 10),
                      ("18446744073709551616", 9), ("123456789012345678901234567890", 9)):
        digits = text.lstrip("-")
        with pytest.raises(ValueError, match=f"integer {digits} is out of the int64 range; "
                                             rf"write {digits}.0 for a float constant "
                                             rf"\(at column {col}\)"):
            scorch.kernel(f"C(i,j) = {text}*A(i,j)", A="csr")(A)
    # the same magnitudes as float constants, where the dtype is a float one
    Af = scorch.to_sparse(x.double(), "csr")
    same(scorch.kernel("C(i,j) = 9223372036854775808.0*A(i,j)")(Af), x.double() * 2.0**63)
    with pytest.raises(ValueError, match="not an int64 value"):
        scorch.kernel("C(i,j) = 9223372036854775808.0*A(i,j)")(A)


def test_enabled_route_takes_torch_integer_sparse():
    """torch's CSR kernels have no integer mm; with scorch.enabled() it computes."""
    x = make_dense((6, 5), torch.int64, seed_of("int-enable"), "random")
    X = make_dense((5, 3), torch.int64, 2, "full")
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.mm(x.to_sparse_csr(), X)
    with scorch.enabled():
        same(torch.mm(x.to_sparse_csr(), X), x @ X)


def test_narrow_integer_products_wrap_as_torch():
    """int16 / int8 / uint8 computed in int32 and narrowed once: the same wrap-around as
    torch's ops in those dtypes (100 * 100 * 3 in int8, sums past 2^16 in int16)."""
    for dt, big in ((torch.int8, 100), (torch.uint8, 200), (torch.int16, 30000)):
        x = torch.full((3, 4), big, dtype=dt)
        x[1, 2] = 0
        A = scorch.to_sparse(x, "csr")
        X = torch.full((4, 2), 3, dtype=dt)
        same(A @ X, x @ X)
        same(A * A, x * x)
        same(A + A, x + x)
        same(A.sum(1), x.sum(1))                   # int64: no wrap
        same(scorch.einsum("ij,ij->i", A, A), (x * x).sum(1, dtype=dt))
        same(A @ scorch.to_sparse(x.T.contiguous(), "csr"), x @ x.T)


def test_narrow_integer_promotion():
    x = make_dense((5, 4), torch.int64, seed_of("int-narrow-mix"), "random")
    X = make_dense((4, 2), torch.int64, 3, "full")
    A8 = scorch.to_sparse(x.to(torch.int8), "csr")
    # int8 with uint8 -> int16 (torch.promote_types; torch's mm would raise)
    same(A8 @ X.to(torch.uint8), x.to(torch.int8).to(torch.int16) @ X.to(torch.uint8).to(torch.int16))
    same(A8 @ X.int(), (x @ X).int())
    r = A8 @ X.float()
    assert r.dtype == torch.float32
    torch.testing.assert_close(r, x.float() @ X.float())


def test_other_value_dtypes_are_refused_by_name():
    for dt in (torch.bool, torch.uint16, torch.complex64):
        with pytest.raises(TypeError, match="int16, int8 or uint8"):
            scorch.to_sparse(torch.ones(2, 2, dtype=dt), "csr")
    A = scorch.to_sparse(torch.eye(2, dtype=torch.int32), "csr")
    with pytest.raises(TypeError, match="int16, int8 or uint8"):
        A.to(torch.bool)
    with pytest.raises(TypeError, match="scipy values, got uint16"):
        scorch.to_sparse(sp.eye(2, dtype=np.uint16, format="csr"), "csr")


def test_einsum_squeezes_an_index_of_one_as_torch():
    """Several operands: torch.einsum squeezes an index of extent 1 (and a 0-D operand has
    none) instead of summing it, so the integer dtype stays."""
    a = torch.full((3, 4), 3, dtype=torch.int32)
    A = scorch.to_sparse(a, "csr")
    for expr, other in (("ij,jk->ij", torch.ones(4, 1, dtype=torch.int32)),
                        ("ij,k->ij", torch.ones(1, dtype=torch.int32)),
                        ("ij,->ij", torch.tensor(2, dtype=torch.int32)),
                        ("ij,jk->ij", torch.ones(4, 2, dtype=torch.int32)),
                        ("ij,k->ij", torch.ones(0, dtype=torch.int32))):
        got, want = scorch.einsum(expr, A, other), torch.einsum(expr, a, other)
        same(got.to_dense() if isinstance(got, scorch.SparseTensor) else got, want)


def test_add_products_truncate_only_integer_results():
    x = torch.tensor([[1, 0, 2], [0, 3, 0]])
    A, Af = scorch.to_sparse(x, "csr"), scorch.to_sparse(x.float(), "csr")
    X = torch.tensor([[1, 2], [3, 4], [5, 6]])
    torch.testing.assert_close(torch.addmm(torch.ones(2, 2), A, X, alpha=0.5),
                               torch.ones(2, 2) + 0.5 * (x @ X).float())
    torch.testing.assert_close(torch.addmm(torch.ones(2, 2, dtype=torch.int64), Af,
                                           X.float(), beta=0.5),
                               0.5 + (x @ X).float())
    same(torch.addmm(torch.ones(2, 2, dtype=torch.int64), A, X, alpha=0.5),
         torch.addmm(torch.ones(2, 2, dtype=torch.int64), x, X, alpha=0.5))
    # sampled_addmm (which torch refuses for integers) truncates them as addmm does: it
    # gave a float32 result for alpha=2.5
    U, V = torch.ones(2, 2, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64)
    same(torch.sparse.sampled_addmm(A, U, V, alpha=2.5, beta=1.5),
         (2 * (U @ V) + x) * (x != 0))
