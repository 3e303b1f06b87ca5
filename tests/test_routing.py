"""torch calls on SparseTensors routed through __torch_function__: every routed op against
the same op on the dense tensors, float32 and float64, csr / coo / csc operands; the
refusals (class and message); and that dense-only calls never reach scorch."""
import math

import pytest
import torch
import torch.nn.functional as F

import scorch
from conftest import make_dense, seed_of

DT = [torch.float32, torch.float64]
FMTS = ["csr", "coo", "csc"]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                           atol=1e-10)


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def close(got, ref, sparse=None):
    if sparse is not None:
        assert isinstance(got, scorch.SparseTensor) == sparse, type(got)
    if not isinstance(got, scorch.SparseTensor):
        assert type(got) is torch.Tensor
    g = dense_of(got)
    assert g.shape == ref.shape and g.dtype == ref.dtype
    torch.testing.assert_close(g, ref, **tol(ref.dtype))


def sp(shape, fmt, dtype, seed, kind="empty_rows"):
    x = make_dense(shape, dtype, seed, kind)
    return scorch.to_sparse(x, fmt), x


def dn(shape, dtype, seed):
    return make_dense(shape, dtype, seed, "full")


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", FMTS)
def test_matmul_family(fmt, dtype):
    s = seed_of("mm", fmt, dtype)
    A, a = sp((9, 7), fmt, dtype, s)
    X, x = dn((7, 4), dtype, s + 1), dn((7,), dtype, s + 2)
    close(torch.mm(A, X), a @ X, sparse=False)
    close(A.mm(X), a @ X)
    close(A @ X, a @ X)
    close(torch.matmul(A, X), a @ X)
    close(A @ x, a @ x)
    close(torch.mv(A, x), a @ x)
    Y = dn((3, 9), dtype, s + 3)
    close(Y @ A, Y @ a, sparse=False)          # dense @ sparse
    close(dn((9,), dtype, s + 4) @ A, dn((9,), dtype, s + 4) @ a)
    inp = dn((9, 4), dtype, s + 5)
    close(torch.addmm(inp, A, X), torch.addmm(inp, a, X))
    close(torch.addmm(inp, A, X, beta=0.5, alpha=-2.0),
          torch.addmm(inp, a, X, beta=0.5, alpha=-2.0))
    bias = dn((4,), dtype, s + 6)
    close(torch.addmm(bias, A, X), torch.addmm(bias, a, X))


def test_matmul_operator_keeps_the_torch_function_protocol():
    # A @ X takes a short cut to the router; modes and disabled torch functions must still
    # see what the protocol gives them.
    from torch.overrides import TorchFunctionMode

    A, a = sp((5, 4), "csr", torch.float32, seed_of("mm_protocol"))
    X = dn((4, 3), torch.float32, 1)
    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    Y = dn((3, 5), torch.float32, 2)
    with Record():
        AX = A @ X
        assert seen[0] in (torch.Tensor.__matmul__, torch.Tensor.matmul)
        del seen[:]
        YA = Y @ A
        assert seen[0] in (torch.Tensor.__matmul__, torch.Tensor.matmul)
    close(AX, a @ X)
    close(YA, Y @ a, sparse=False)
    with torch._C.DisableTorchFunctionSubclass():      # as inside a handler: aten refuses
        with pytest.raises(NotImplementedError, match="aten.mm"):
            A @ X


@pytest.mark.parametrize("dtype", DT)
def test_batched_matmul(dtype):
    s = seed_of("bmm", dtype)
    A, a = sp((3, 5, 6), "csf", dtype, s, "random")
    B = dn((3, 6, 2), dtype, s + 1)
    close(torch.bmm(A, B), torch.bmm(a, B))
    close(A @ B, a @ B)
    W = dn((6, 4), dtype, s + 2)
    close(A @ W, a @ W)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csr", "csc"), ("coo", "csr")])
def test_sparse_times_sparse(fa, fb, dtype):
    s = seed_of("spgemm", fa, fb, dtype)
    A, a = sp((8, 9), fa, dtype, s)
    B, b = sp((9, 6), fb, dtype, s + 1, "random")
    C = A @ B
    close(C, a @ b)
    # every operand sparse: a sparse product, in the first operand format whose rows
    # (or columns) it can assemble
    assert isinstance(C, scorch.SparseTensor)
    assert C.format.name == ("csr" if "csr" in (fa, fb) else C.format.name)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "csc", "dcsr"])
def test_product_with_a_transposed_view_stays_sparse(fmt, dtype):
    """A @ A.t() multiplies a csr by a csc view: the product is a SparseTensor in A's
    format (it was a dense n × n: a tall 200000 × 3 matrix asked for 160 GB), as
    scorch.einsum("ij,kj->ik", A, A) gives; A.t() @ A too."""
    s = seed_of("aat", fmt, dtype)
    A, a = sp((9, 7), fmt, dtype, s)
    for got, want in ((A @ A.t(), a @ a.t()), (A.t() @ A, a.t() @ a)):
        assert isinstance(got, scorch.SparseTensor)
        close(got, want)
    assert (A @ A.t()).format == A.format
    i = torch.tensor([[0, 99_999, 199_999], [0, 1, 2]])
    T = scorch.to_sparse(torch.sparse_coo_tensor(i, torch.ones(3, dtype=dtype),
                                                 (200_000, 3)), fmt)
    P = T @ T.t()
    assert isinstance(P, scorch.SparseTensor) and P.shape == (200_000, 200_000)
    v = P.values()            # (dcsr · dcsc takes every nonempty row-column pair)
    assert P.nnz <= 9 and (v != 0).sum() == 3 and v.sum() == 3


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", FMTS)
def test_einsum_and_linear(fmt, dtype):
    s = seed_of("einsum", fmt, dtype)
    A, a = sp((8, 6), fmt, dtype, s)
    X, Y = dn((8, 3), dtype, s + 1), dn((6, 3), dtype, s + 2)
    S = torch.einsum("ij,ik,jk->ij", A, X, Y)
    close(S, torch.einsum("ij,ik,jk->ij", a, X, Y), sparse=True)
    assert S.format == A.format
    close(torch.einsum("ij,jk", A, Y), a @ Y)           # implicit output
    close(torch.einsum("ij,jk->ik", [A, Y]), a @ Y)     # list form
    inp = dn((5, 6), dtype, s + 3)
    b = dn((8,), dtype, s + 4)
    close(F.linear(inp, A, b), F.linear(inp, a, b), sparse=False)
    close(F.linear(inp, A), F.linear(inp, a))
    close(F.linear(dn((2, 5, 6), dtype, s + 5), A), F.linear(dn((2, 5, 6), dtype, s + 5), a))
    close(F.linear(dn((6,), dtype, s + 6), A, b), F.linear(dn((6,), dtype, s + 6), a, b))


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", FMTS)
def test_reductions(fmt, dtype):
    A, a = sp((7, 5), fmt, dtype, seed_of("sum", fmt, dtype))
    close(A.sum(), a.sum())
    close(torch.sum(A), a.sum())
    for d in (0, 1, -1):
        close(A.sum(d), a.sum(d), sparse=False)
        close(torch.sum(A, d, keepdim=True), a.sum(d, keepdim=True))
        close(A.mean(d), a.mean(d))
        close(torch.mean(A, dim=d, keepdim=True), a.mean(d, keepdim=True))
    close(A.sum((0, 1)), a.sum((0, 1)))
    close(A.mean(), a.mean())
    close(A.sum(dtype=torch.float64), a.sum(dtype=torch.float64))


def test_reductions_3d():
    A, a = sp((3, 4, 5), "csf", torch.float64, seed_of("sum3"), "random")
    for d in (0, 1, 2, (0, 2), (1, 2)):
        close(A.sum(d), a.sum(d))
        close(A.mean(d, keepdim=True), a.mean(d, keepdim=True))


def dense_softmax(a, dim, log=False):
    """torch.sparse.softmax semantics on a dense tensor whose zeros are not stored."""
    ref = torch.sparse.softmax(a.to_sparse(), dim) if not log else \
        torch.sparse.log_softmax(a.to_sparse(), dim)
    return ref.to_dense()


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(fmt, dtype, dim):
    A, a = sp((7, 6), fmt, dtype, seed_of("softmax", fmt, dtype, dim))
    for fn in (lambda t: torch.softmax(t, dim), lambda t: t.softmax(dim),
               lambda t: F.softmax(t, dim=dim), lambda t: torch.sparse.softmax(t, dim)):
        S = fn(A)
        assert isinstance(S, scorch.SparseTensor) and S.format == A.format
        assert S.nnz == A.nnz
        close(S, dense_softmax(a, dim))
    L = torch.log_softmax(A, dim)
    assert L.format == A.format
    close(L, dense_softmax(a, dim, log=True))
    close(F.log_softmax(A, dim=dim), dense_softmax(a, dim, log=True))
    # empty rows stay empty, rows with entries sum to 1
    if dim in (1, -1):
        rows = S.to_dense().sum(1)
        has = (a != 0).any(1)
        torch.testing.assert_close(rows[has], torch.ones_like(rows[has]))
        assert (rows[~has] == 0).all()


def test_softmax_3d_and_dtype():
    A, a = sp((3, 4, 5), "csf", torch.float64, seed_of("softmax3"), "random")
    for d in (0, 1, 2):
        close(torch.softmax(A, d), dense_softmax(a, d))
    B, b = sp((5, 4), "csr", torch.float32, seed_of("softmax_dt"))
    close(torch.softmax(B, 1, dtype=torch.float64), dense_softmax(b.double(), 1))


def test_softmax_of_a_hypersparse_tensor_is_sized_by_its_entries():
    """2^40 rows, 3 entries: the maxima and sums are kept per slice holding entries (it
    allocated one per row: 4 TB), along either dimension and for log_softmax; and a
    3-D batch's softmax over dim 0 as the dense one."""
    rows = 2 ** 40
    A = scorch.from_components(
        (rows, 4), "dcsr", pos=[torch.tensor([0, 2]), torch.tensor([0, 1, 3])],
        crd=[torch.tensor([rows - 5, rows - 1]), torch.tensor([0, 2, 3])],
        values=torch.tensor([1., 2., 3.]))
    want = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(torch.softmax(A, 1).values(),
                               torch.cat([want[:1].softmax(0), want[1:].softmax(0)]))
    torch.testing.assert_close(torch.log_softmax(A, 1).values(),
                               torch.cat([want[:1].log_softmax(0), want[1:].log_softmax(0)]))
    torch.testing.assert_close(torch.softmax(A.t(), 0).values(),
                               torch.cat([want[:1].softmax(0), want[1:].softmax(0)]))
    C, c = sp((4, 30, 30), "csf", torch.float64, seed_of("softmax-dim0"), "random")
    close(torch.softmax(C, 0), dense_softmax(c, 0))


@pytest.mark.parametrize("case", ["csr-1", "csc-0", "dcsr-1", "csr-int64-1", "ddc-2",
                                  "csf-2", "csr-0x5-1", "csr-5x0-1", "csr-1x1-1",
                                  "csr-nnz0-1"])
def test_softmax_over_the_innermost_level(case):
    """Softmax along the dimension the innermost (compressed) level stores reduces each
    segment of its positions in place of per-entry slice keys: the same values as the
    dense masked softmax, for softmax and log_softmax, in every shape; gradients twice."""
    name, *rest = case.split("-")
    dim = int(rest[-1])
    shape = {"0x5": (0, 5), "5x0": (5, 0), "1x1": (1, 1)}.get(rest[0], (7, 9))
    if name in ("ddc", "csf"):
        shape = (3, 5, 6)
    kind = {"nnz0": "zeros", "0x5": "random", "5x0": "random"}.get(rest[0], "empty_rows")
    A, a = sp(shape, name, torch.float64, seed_of("softmax-seg", case), kind)
    if rest[0] == "int64":
        A = scorch.to_sparse(a, "csr", index_dtype=torch.int64)
    for log in (False, True):
        fn = torch.log_softmax if log else torch.softmax
        S = fn(A, dim)
        assert isinstance(S, scorch.SparseTensor) and S.format == A.format
        close(S, dense_softmax(a, dim, log))
    if A.nnz:
        v = A.values().detach().clone().requires_grad_()
        f = lambda v: torch.softmax(A.with_values(v), dim).values()
        assert torch.autograd.gradcheck(f, (v,))
        assert torch.autograd.gradgradcheck(f, (v,))


def test_softmax_over_segments_keeps_the_edge_values():
    """Large values shift by their row's maximum (no overflow in float32), a row of
    -inf gives NaN and a NaN spreads over its row: each row's values as the dense
    softmax of its stored values gives them (torch.sparse.log_softmax gives 0, not
    log 1/2, for two entries of 1e30)."""
    rows = [[1e30, 1e30], [-math.inf, -math.inf], [1.0, math.nan], [], [3.0, -2.0, 0.5]]
    pos = torch.tensor([0] + [len(r) for r in rows]).cumsum(0)
    A = scorch.from_components((5, 3), "csr", pos=[None, pos],
                               crd=[None, torch.cat([torch.arange(len(r)) for r in rows])],
                               values=torch.tensor([x for r in rows for x in r]))
    for fn in (torch.softmax, torch.log_softmax):
        want = torch.cat([fn(torch.tensor(r), 0) for r in rows])
        torch.testing.assert_close(fn(A, 1).values(), want, equal_nan=True)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csr", "coo"), ("csc", "csr"),
                                   ("coo", "coo")])
def test_elementwise_sparse_sparse(fa, fb, dtype):
    s = seed_of("ew", fa, fb, dtype)
    A, a = sp((6, 8), fa, dtype, s)
    B, b = sp((6, 8), fb, dtype, s + 1, "random")
    for got, ref in [(A + B, a + b), (A - B, a - b), (A * B, a * b),
                     (torch.add(A, B, alpha=2.0), torch.add(a, b, alpha=2.0)),
                     (torch.sub(A, B), a - b), (torch.mul(A, B), a * b)]:
        close(got, ref, sparse=True)
    assert (A + B).format == A.format and (A * B).format == A.format


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", FMTS)
def test_elementwise_sparse_dense(fmt, dtype):
    s = seed_of("ewd", fmt, dtype)
    A, a = sp((6, 8), fmt, dtype, s)
    D = dn((6, 8), dtype, s + 1)
    for got, ref in [(A * D, a * D), (D * A, D * a), (torch.mul(A, D), a * D),
                     (A * D[0], a * D[0]), (A * D[:, :1], a * D[:, :1]),
                     (A * D[0, :1], a * D[0, :1])]:
        close(got, ref, sparse=True)
        assert got.nnz == A.nnz
    close(A + D, a + D, sparse=False)
    close(D - A, D - a, sparse=False)
    close(A - D, a - D, sparse=False)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", FMTS)
def test_value_maps(fmt, dtype):
    A, a = sp((6, 7), fmt, dtype, seed_of("maps", fmt, dtype))
    P = A.abs()
    p = a.abs()
    deg = torch.arange(1.0, 7.0, dtype=dtype)                   # a divisor without zeros
    col, full = deg.repeat(2)[:7] + 0.5, torch.rand(6, 7, dtype=dtype) + 0.25
    cases = [(A * 2, a * 2), (2.5 * A, 2.5 * a), (A / 4, a / 4), (-A, -a), (abs(A), a.abs()),
             (A.relu(), a.relu()), (torch.relu(A), a.relu()), (F.relu(A), a.relu()),
             (P.sqrt(), p.sqrt()), (torch.sqrt(P), p.sqrt()), (P ** 1.5, p ** 1.5),
             (A ** 2, a ** 2), (torch.pow(A, 3), a ** 3), (A.tanh(), a.tanh()),
             (torch.sin(A), a.sin()), (F.leaky_relu(A, 0.1), F.leaky_relu(a, 0.1)),
             (A * torch.tensor(3.0, dtype=dtype), a * 3), (A + 0, a), (A.square(), a * a),
             (A / deg[:, None], a / deg[:, None]), (A / col, a / col),
             (torch.div(A, full), a / full), (A.clamp(-2, 3), a.clamp(-2, 3)),
             (torch.clip(A, max=1), a.clip(max=1)), (A.clamp_min(-1), a.clamp_min(-1)),
             (torch.clamp_max(A, 0), a.clamp_max(0)), (A.nan_to_num(), a.nan_to_num()),
             (torch.clamp(A, torch.tensor(-1.0), torch.tensor(2.0)), a.clamp(-1, 2))]
    for got, ref in cases:
        close(got, ref, sparse=True)
        assert got.format == A.format and got.nnz == A.nnz


@pytest.mark.parametrize("fmt", FMTS + ["dcsr"])
def test_transpose_is_a_view(fmt):
    A, a = sp((5, 8), fmt, torch.float64, seed_of("t", fmt))
    for T in (A.t(), torch.t(A), A.T, A.mT, A.transpose(0, 1), A.permute(1, 0),
              torch.permute(A, (1, 0))):
        assert isinstance(T, scorch.SparseTensor) and T.shape == (8, 5)
        assert T.values() is A.values()                  # no copy
        assert all(x is y for x, y in zip(T._crd, A._crd))
        close(T, a.t())
    assert A.t().t().format == A.format
    X = dn((5, 3), torch.float64, 2)
    close(A.t() @ X, a.t() @ X)


def test_permute_3d():
    A, a = sp((3, 4, 5), "csf", torch.float64, seed_of("perm3"), "random")
    for perm in [(2, 0, 1), (1, 2, 0), (0, 2, 1)]:
        close(A.permute(*perm), a.permute(*perm))
    close(A.transpose(0, 2), a.transpose(0, 2))


def test_structure_ops_take_torchs_keywords():
    """The keyword names and aliases torch accepts: axis for cat / concat / concatenate /
    stack, dim0 / dim1 and axis0 / axis1, dims for permute; an out= tensor refused."""
    A, a = sp((3, 4), "csr", torch.float64, seed_of("keywords"), "random")
    idx = torch.tensor([2, 0])
    cases = [
        (lambda t: torch.cat([t, t], axis=1), True),
        (lambda t: torch.concat([t, t], axis=0), True),
        (lambda t: torch.concatenate([t, t], axis=-1), True),
        (lambda t: torch.stack([t, t], axis=1), True),
        (lambda t: torch.stack([t, t], dim=2), True),
        (lambda t: t.transpose(dim0=0, dim1=1), True),
        (lambda t: torch.transpose(t, dim0=1, dim1=0), True),
        (lambda t: torch.swapaxes(t, axis0=0, axis1=1), True),
        (lambda t: t.swapaxes(axis0=-1, axis1=0), True),
        (lambda t: torch.swapdims(t, dim0=0, dim1=1), True),
        (lambda t: t.swapdims(dim0=0, dim1=-1), True),
        (lambda t: t.permute(dims=(1, 0)), True),
        (lambda t: torch.permute(t, dims=[1, 0]), True),
        (lambda t: t.permute([1, 0]), True),
        (lambda t: torch.index_select(t, dim=1, index=idx), True),
        (lambda t: t.narrow(dim=1, start=1, length=2), True),
        (lambda t: t.select(dim=1, index=2), True),
        (lambda t: t.unsqueeze(dim=1), True),
        (lambda t: t.unsqueeze(0).squeeze(dim=0), True),
        (lambda t: t.sum(dim=1, keepdim=True), False),
        (lambda t: t.amax(dim=0, keepdim=True), False),
        (lambda t: t.diagonal(offset=1, dim1=1, dim2=0), False),
    ]
    for f, sparse in cases:
        close(f(A), f(a), sparse=sparse)
    with pytest.raises(NotImplementedError, match=r"torch.index_select\(out=\)"):
        torch.index_select(A, 0, idx, out=torch.empty(0))
    with pytest.raises(NotImplementedError, match=r"torch.stack\(out=\)"):
        torch.stack([A, A], axis=1, out=torch.empty(0))
    for bad in [(0, 0), (0,), (0, 1, 1)]:          # (torch's RuntimeError)
        with pytest.raises(RuntimeError):
            a.permute(bad)
        with pytest.raises(RuntimeError, match="is not a permutation"):
            A.permute(bad)


@pytest.mark.parametrize("fmt", FMTS)
def test_dtype_detach_clone_grad_flags(fmt):
    A, a = sp((5, 6), fmt, torch.float32, seed_of("to", fmt))
    B = A.to(torch.float64)
    assert isinstance(B, scorch.SparseTensor) and B.dtype == torch.float64
    close(B, a.double())
    assert A.to(torch.float32) is A
    close(A.double(), a.double())
    close(B.float(), a)
    C = A.clone()
    assert torch.clone(A).values().data_ptr() != A.values().data_ptr()
    C.requires_grad_()
    assert C.requires_grad and C.values().requires_grad and not A.values().requires_grad
    D = C.detach()
    assert isinstance(D, scorch.SparseTensor) and not D.requires_grad
    assert not D.values().requires_grad
    close(D, a)


def test_zero_size_and_empty():
    A, a = sp((0, 4), "csr", torch.float64, 1, "random")
    close(A @ dn((4, 3), torch.float64, 2), a @ dn((4, 3), torch.float64, 2))
    close(A.sum(1), a.sum(1))
    Z = scorch.to_sparse(torch.zeros(4, 5, dtype=torch.float64), "csr")
    close(torch.softmax(Z, 1), torch.zeros(4, 5, dtype=torch.float64))
    close(Z + Z, torch.zeros(4, 5, dtype=torch.float64))


def test_inputs_not_mutated():
    A, a = sp((6, 6), "csr", torch.float64, seed_of("mut"))
    before = [t.clone() for t in A._pos + A._crd if t is not None] + [A.values().clone()]
    X = dn((6, 6), torch.float64, 3)
    x0 = X.clone()
    for op in (lambda: A @ X, lambda: A * X, lambda: A + A, lambda: torch.softmax(A, 1),
               lambda: A.relu(), lambda: A.t(), lambda: torch.addmm(X, A, X)):
        op()
    after = [t for t in A._pos + A._crd if t is not None] + [A.values()]
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    assert torch.equal(X, x0)


# ---- refusals ---------------------------------------------------------------------------

def refusal(fmt):
    return rf"not supported on SparseTensor \(formats: {fmt}\).*\.to_dense\(\)"


@pytest.mark.parametrize("op,what", [
    (lambda A: torch.exp(A), "torch.exp"),
    (lambda A: A.exp(), "torch.exp"),
    (lambda A: torch.cos(A), "torch.cos"),
    (lambda A: torch.sigmoid(A), "torch.sigmoid"),
    (lambda A: A + 1, "torch.add"),
    (lambda A: 1 + A, "torch.add"),
    (lambda A: A - 2.5, "torch.sub"),
    (lambda A: A ** -1, "torch.pow"),
    (lambda A: A ** 0, "torch.pow"),
    (lambda A: A / torch.arange(6.0), "the divisor has zeros"),
    (lambda A: A / torch.zeros(2, 5, 6), "the divisor has zeros"),   # (more dimensions: a zero)
    (lambda A: 1 / A, "torch.div"),
    (lambda A: torch.smm(A, torch.ones(6, 2)), "a sparse result of a product"),
    (lambda A: torch.sspaddmm(A, A, torch.ones(6, 6)), "torch.sspaddmm is not"),
    (lambda A: A / 0, "torch.div"),
    (lambda A: torch.div(A, 0, rounding_mode="floor"), "torch.div"),
    (lambda A: A + torch.ones(6), "torch.add"),
    (lambda A: A[:1] * torch.ones(5, 6), "torch.mul"),
    (lambda A: A.exp_(), "exp_"),
    (lambda A: A.add_(torch.ones(5, 6)), "add_"),
    (lambda A: A.tril_(), "tril_"),
    (lambda A: torch.mm(A, torch.ones(6, 3).to_sparse()), "torch.mm"),
    (lambda A: torch.mv(A, torch.ones(6), out=torch.zeros(5)), "torch.mv(out=)"),
    (lambda A: torch.mm(A, torch.ones(6, 3), out=torch.zeros(5, 3)), "torch.mm"),
    (lambda A: torch.matmul(A, torch.ones(6), out=torch.zeros(5)), "torch.matmul(out=)"),
    (lambda A: A.to("meta"), "Tensor.to"),
    (lambda A: F.hardtanh(A, min_val=0.5, max_val=2.0), "F.hardtanh"),
    (lambda A: F.softplus(A), "F.softplus"),
    (lambda A: A.clamp(min=1), "torch.clamp"),
    (lambda A: torch.clamp(A, max=-0.5), "torch.clamp"),
    (lambda A: A.clamp(min=torch.zeros(6)), "torch.clamp"),
])
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_refusals(fmt, op, what):
    x = make_dense((5, 6), torch.float32, seed_of("refuse"))
    A = scorch.to_sparse(x, fmt)
    with pytest.raises(NotImplementedError, match=refusal(fmt)) as info:
        op(A)
    assert what in str(info.value)
    assert torch.equal(A.to_dense(), x)


@pytest.mark.parametrize("op, what", [
    (lambda A: torch.fliplr(A), "torch.fliplr (through aten.flip"),
    (lambda A: A.topk(1), "torch.Tensor.topk (through aten.topk"),
    (lambda A: torch.roll(A, 1), "torch.roll (through aten.roll"),
    (lambda A: A.add_(1), "torch.Tensor.add_ (through torch.add)"),
])
def test_refusal_names_the_function_called(op, what):
    """A function scorch does not handle decomposes to aten ops, which refuse: the error
    names the function the user called, then the op it reached."""
    x = make_dense((5, 6), torch.float32, seed_of("refuse-name"))
    A = scorch.to_sparse(x, "csr")
    with pytest.raises(NotImplementedError, match=refusal("csr")) as info:
        op(A)
    assert what in str(info.value), info.value
    assert torch.equal(A.to_dense(), x)


def test_refusal_names_formats_passed_by_keyword():
    """An aten op given the SparseTensor by keyword (SDPA's CPU kernel's attn_mask, which
    nn.MultiheadAttention reached before SDPA took sparse masks) names its format too (it
    said "formats: ")."""
    q = torch.ones(1, 1, 5, 4)
    M = scorch.to_sparse(torch.eye(5), "csr")
    with pytest.raises(NotImplementedError, match="scaled_dot_product_flash") as info:
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, 0.0, False,
                                                                   attn_mask=M)
    assert "(formats: csr)" in str(info.value)


def test_batched_product_refuses_out():
    """torch.bmm(out=) over a sparse batch is refused like mm's, and out is left alone
    (it used to be ignored: the result came back and out kept its old values)."""
    x = make_dense((2, 3, 4), torch.float32, seed_of("bmm-out"))
    A = scorch.to_sparse(x, "csf")
    out = torch.full((2, 3, 2), 7.0)
    with pytest.raises(NotImplementedError, match=refusal("csf")) as info:
        torch.bmm(A, torch.ones(2, 4, 2), out=out)
    assert "torch.bmm(out=)" in str(info.value)
    assert torch.equal(out, torch.full((2, 3, 2), 7.0))


def _junk():
    """Allocate and fill memory, so that a freed block read by mistake holds garbage."""
    return [torch.full((50000,), 7.0) for _ in range(20)]


def test_arrays_moved_to_shared_memory_are_read_at_their_new_place():
    """share_memory_ (and Module.share_memory, the step before torch.multiprocessing) move
    the index and value arrays into shared memory in place, freeing the old blocks: every
    SparseTensor sharing them (a view prepared before, a with_values twin) reads them at
    their new place.  multiprocessing's pickler (queues, spawn, DataLoader workers) sends
    arrays already shared as they are."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's tensor reductions)

    x = make_dense((300, 200), torch.float32, seed_of("shm"), density=0.05)
    X, G = torch.randn(200, 16), torch.randn(300, 16)
    for move in ("share_memory_", "module", "shared then pickled"):
        A = scorch.to_sparse(x, "csr")
        T, W = A.t(), A.with_values(A.values() * 2)
        for _ in range(2):                      # prepared, and remembered by the hot route
            A @ X, T @ G, W @ X
        if move == "share_memory_":
            assert A.share_memory_() is A
        elif move == "module":
            m = torch.nn.Module()
            m.register_buffer("adj", A)
            m.share_memory()
        else:
            A.share_memory_()
            B = ForkingPickler.loads(ForkingPickler.dumps(A))
            torch.testing.assert_close(B @ X, x @ X)
            with torch.no_grad():                                  # one memory
                A.values()[0] += 1
                assert B.values()[0] == A.values()[0]
                A.values()[0] -= 1
        assert A.values().is_shared() and all(p.is_shared() for p in A._pos if p is not None)
        junk = _junk()
        tol = dict(rtol=1e-5, atol=1e-4)   # (float32 sums in another order than MKL's,
        torch.testing.assert_close(A @ X, x @ X, **tol)   # some cancelling: a stale or
        torch.testing.assert_close(T @ G, x.t() @ G, **tol)   # freed array is far off)
        torch.testing.assert_close(W @ X, 2 * x @ X, **tol)
        del junk


@pytest.mark.parametrize("fmt", ["csc", "coo"])
@pytest.mark.parametrize("write", ["fused SGD", "fused Adam", "vector_to_parameters",
                                   "another process"])
def test_values_written_without_a_version_bump_are_read_fresh(fmt, write):
    """A csc or coo operand reaches its kernels through a converted copy kept while its
    values' version is unchanged.  Three writes leave the version alone: a fused
    optimizer step, vector_to_parameters (it swaps .data) and another process writing
    shared memory; the kept copy then gave the old values' products (off by 15-150)."""
    x = make_dense((9, 7), torch.float32, seed_of("fresh", fmt, write))
    X = torch.randn(7, 3, generator=torch.Generator().manual_seed(1))
    A = scorch.to_sparse(x, fmt)
    if write == "another process":
        import multiprocessing as mp
        A.share_memory_()
        A @ X                                          # the copy made
        ctx = mp.get_context("fork")
        child = ctx.Process(target=_times_ten, args=(A.values(),))
        child.start()
        child.join()
        assert child.exitcode == 0
        torch.testing.assert_close(A @ X, 10 * x @ X)
        return
    p = torch.nn.Parameter(A.values().clone())
    W = A.with_values(p)                               # built once, trained in place
    for step in range(3):
        y = W @ X
        torch.testing.assert_close(y, W.to_dense() @ X)
        if write == "vector_to_parameters":
            torch.nn.utils.vector_to_parameters(p.detach() * 2 + 1, [p])
            continue
        opt = (torch.optim.SGD([p], lr=0.5, fused=True) if write == "fused SGD"
               else torch.optim.Adam([p], lr=0.5, fused=True))
        p.grad = None
        y.pow(2).sum().backward()
        before = p.detach().clone()
        opt.step()
        assert not torch.equal(p.detach(), before)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_sent_to_a_child_process_being_started(method):
    """A SparseTensor among a spawned (or forkserver) child's arguments: its arrays go as
    shared-memory copies whose descriptors the launch passes later; the copies were freed
    first ("bad value(s) in fds_to_keep", or a child dying unheard).  The child sends it
    its product back through a queue."""
    import multiprocessing as mp
    ctx = mp.get_context(method)
    A = scorch.to_sparse(make_dense((6, 5), torch.float32, seed_of("spawn")), "csr")
    q = ctx.Queue()
    child = ctx.Process(target=_product_sum_into, args=(A, q))
    child.start()
    got = q.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert got == ("csr", (A.to_dense() @ torch.arange(5.0)).tolist())


def _product_sum_into(A, q):
    q.put((str(A.format), (A @ torch.arange(5.0)).tolist()))


@pytest.mark.parametrize("workers", [0, 1])
def test_dataloader_batches_sparse_items_in_workers_too(workers):
    """DataLoader's default collate stacks SparseTensor items as torch.stack does; inside
    a worker torch's collate stacked into a shared tensor with out=, which scorch refused
    naming an out= the user never wrote."""
    from torch.utils.data import DataLoader
    items = [scorch.to_sparse(make_dense((4, 3), torch.float32, seed_of("dl", i)), "csr")
             for i in range(4)]
    loader = DataLoader(items, batch_size=2, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    batches = list(loader)
    assert len(batches) == 2
    for k, b in enumerate(batches):
        assert isinstance(b, scorch.SparseTensor) and b.shape == (2, 4, 3)
        torch.testing.assert_close(b.to_dense(), torch.stack(
            [t.to_dense() for t in items[2 * k:2 * k + 2]]))


def _times_ten(values):
    with torch.no_grad():
        values.mul_(10)


def test_pickling_for_processes_leaves_the_sender_alone():
    """A queue pickles on its feeder thread while the program goes on with the tensor:
    the sender's arrays are not moved (a kernel in another thread may be reading them);
    the receiver gets shared-memory copies."""
    import threading
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's tensor reductions)

    x = make_dense((300, 200), torch.float32, seed_of("shm-send"), density=0.05)
    X = torch.randn(200, 16)
    A = scorch.to_sparse(x, "csr")
    ptrs = [t.data_ptr() for t in (A.values(), A._pos[1], A._crd[1])]
    stop, bad = False, []

    def compute():
        while not stop:
            if not torch.allclose(A @ X, x @ X, atol=1e-4):
                bad.append(1)

    th = threading.Thread(target=compute)
    th.start()
    try:
        sent = [ForkingPickler.dumps(A) for _ in range(20)]
    finally:
        stop = True
        th.join()
    assert not bad
    assert [t.data_ptr() for t in (A.values(), A._pos[1], A._crd[1])] == ptrs
    assert not A.values().is_shared()
    B = ForkingPickler.loads(sent[-1])
    assert B.values().is_shared() and B._crd[1].is_shared()
    torch.testing.assert_close(B @ X, x @ X)


def test_storage_level_exports_are_refused():
    """DLPack export would read the storage a SparseTensor's wrapper does not have (a
    segfault, or garbage through numpy): refused with the operation named."""
    import numpy as np

    x = make_dense((5, 6), torch.float32, seed_of("exports"))
    A = scorch.to_sparse(x, "csr")
    from torch.utils import dlpack

    for export in (lambda: np.from_dlpack(A), lambda: torch.from_dlpack(A),
                   lambda: dlpack.to_dlpack(A), lambda: torch.to_dlpack(A)):
        with pytest.raises(NotImplementedError, match="DLPack export"):
            export()
    for write in (lambda: A.apply_(lambda v: 2 * v), lambda: A.map_(A, lambda a, b: a)):
        with pytest.raises(NotImplementedError, match="apply_"):
            write()
    torch.testing.assert_close(A @ torch.ones(6), x @ torch.ones(6))   # still usable
    # torch's own to_dlpack, behind the guard, still exports a plain tensor
    back = torch.from_dlpack(dlpack.to_dlpack(x))
    assert torch.equal(back, x) and back.data_ptr() == x.data_ptr()


def test_refusal_names_both_formats():
    A = scorch.to_sparse(make_dense((4, 5), torch.float32, 1), "csr")
    B = scorch.to_sparse(make_dense((1, 5), torch.float32, 2), "coo")
    with pytest.raises(NotImplementedError, match=refusal("coo, csr")):
        A + B                                     # (a broadcast sparse addition)
    with pytest.raises(RuntimeError, match="do not broadcast"):   # torch's error type
        A + scorch.to_sparse(make_dense((4, 4), torch.float32, 2), "coo")
    with pytest.raises(RuntimeError, match="do not broadcast"):
        A * torch.ones(4)


def test_errors_from_the_compiler_and_torch_checks():
    A = scorch.to_sparse(make_dense((4, 5), torch.float64, 1), "csr")
    with pytest.raises(RuntimeError, match="cannot be multiplied"):   # torch's error type
        A @ torch.ones(4, 3, dtype=torch.float64)
    with pytest.raises(IndexError, match="out of range"):
        A.sum(2)
    with pytest.raises(IndexError, match="out of range"):
        torch.softmax(A, 2)
    with pytest.raises(TypeError, match="int8 or uint8 values, not torch.bool"):
        A.to(torch.bool)
    with pytest.raises(RuntimeError, match="t\\(\\) expects"):
        scorch.to_sparse(make_dense((2, 3, 4), torch.float64, 1), "csf").t()


@pytest.mark.parametrize("log", [False, True])
def test_softmax_sums_duplicates_first(log):
    """A COO with repeated coordinates: softmax over its summed entries, as
    torch.sparse.softmax coalesces first (it was refused); gradients into every
    duplicate, as into the sum they make."""
    idx = torch.tensor([[0, 0, 1, 1, 2], [1, 1, 0, 2, 2]])
    vals = torch.tensor([1.0, 2.0, 3.0, -1.0, 0.5], dtype=torch.float64)
    A = scorch.from_components((3, 3), "coo", pos=[torch.tensor([0, 5]), None],
                               crd=[idx[0], idx[1]], values=vals.clone()).requires_grad_()
    T = torch.sparse_coo_tensor(idx, vals.clone(), (3, 3)).requires_grad_()
    f = torch.log_softmax if log else torch.softmax
    g = torch.sparse.log_softmax if log else torch.sparse.softmax
    S, want = f(A, 1), g(T, 1)
    assert isinstance(S, scorch.SparseTensor) and S.nnz == 4
    torch.testing.assert_close(S.to_dense(), want.to_dense())
    w = torch.arange(9.0, dtype=torch.float64).reshape(3, 3)
    (S.to_dense() * w).sum().backward()
    (want.to_dense() * w).sum().backward()
    torch.testing.assert_close(A.grad.values(), T.grad.coalesce().values()[[0, 0, 1, 2, 3]])
    torch.testing.assert_close((A @ torch.eye(3, dtype=torch.float64)), A.detach().to_dense())


def test_dense_only_calls_never_enter_scorch(monkeypatch):
    from scorch import _torch_ops

    calls = []
    for key, fn in list(_torch_ops.HANDLERS.items()):
        monkeypatch.setitem(_torch_ops.HANDLERS, key,
                            lambda *a, _fn=fn, **k: calls.append(1) or _fn(*a, **k))
    x = torch.randn(4, 4)
    _ = (x @ x, torch.mm(x, x), x + 1, torch.softmax(x, 1), x.sum(), F.linear(x, x),
         torch.einsum("ij,jk->ik", x, x), x.t(), x * 2)
    assert calls == []
    A = scorch.to_sparse(x, "csr")
    _ = torch.mm(A, x)           # (A @ x reaches its kernel without the table's lookup)
    assert calls


def test_dropout_acts_on_values():
    A, a = sp((20, 30), "csr", torch.float64, seed_of("dropout"), "full")
    torch.manual_seed(0)
    D = F.dropout(A, 0.5, training=True)
    assert isinstance(D, scorch.SparseTensor) and D.nnz == A.nnz
    kept = D.values() != 0
    torch.testing.assert_close(D.values()[kept], 2 * A.values()[kept])
    assert 0.3 < kept.double().mean() < 0.7
    assert F.dropout(A, 0.5, training=False).values() is A.values()


# ---- scorch.enable(): kernels behind torch's own sparse tensors ---------------------------

def _dispatch_cases(dtype):
    x = make_dense((6, 5), dtype, seed_of("dispatch", dtype))
    X = dn((5, 3), dtype, 1)
    return x, X, [
        (lambda A: torch.mm(A, X), x @ X),
        (lambda A: A @ X, x @ X),
        (lambda A: torch.mv(A, X[:, 0]), x @ X[:, 0]),
        (lambda A: torch.addmm(dn((6, 3), dtype, 2), A, X, beta=0.5, alpha=2.0),
         torch.addmm(dn((6, 3), dtype, 2), x, X, beta=0.5, alpha=2.0)),
        (lambda A: torch.sparse.mm(A, X), x @ X),
    ]


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_enable_routes_torch_sparse(layout, dtype):
    from scorch import _dispatch

    x, X, cases = _dispatch_cases(dtype)
    conv = {"csr": x.to_sparse_csr, "csc": x.to_sparse_csc, "coo": x.to_sparse}[layout]
    A = conv()
    assert not scorch.is_enabled()
    before = _dispatch.calls
    for op, ref in cases:                                   # off by default: torch's kernels
        torch.testing.assert_close(op(A), ref, **tol(dtype))
    assert _dispatch.calls == before
    with scorch.enabled():
        assert scorch.is_enabled()
        for op, ref in cases:
            n = _dispatch.calls
            torch.testing.assert_close(op(A), ref, **tol(dtype))
            assert _dispatch.calls > n
        Xg = X.clone().requires_grad_()
        (A @ Xg).sum().backward()                            # torch's formula, our kernels
        torch.testing.assert_close(Xg.grad, x.t() @ torch.ones(6, 3, dtype=dtype),
                                   **tol(dtype))
    assert not scorch.is_enabled()
    n = _dispatch.calls
    torch.testing.assert_close(torch.mm(A, X), x @ X, **tol(dtype))
    assert _dispatch.calls == n


def test_enable_sparse_result_and_refusals():
    x = make_dense((5, 5), torch.float32, seed_of("dispatch_sp"))
    A = x.to_sparse_csr()
    scorch.enable()
    try:
        scorch.enable()                                      # idempotent
        C = torch.mm(A, A)
        assert C.layout is torch.sparse_csr
        torch.testing.assert_close(C.to_dense(), x @ x)
        with pytest.raises(NotImplementedError, match="scorch.disable"):
            torch.mm(x.to(torch.complex64).to_sparse_csr(), torch.ones(5, 2, dtype=torch.complex64))
    finally:
        scorch.disable()
    scorch.disable()                                         # idempotent
    assert not scorch.is_enabled()


@pytest.mark.parametrize("a", ["csr", "csc", "coo"])
@pytest.mark.parametrize("b", ["csr", "csc", "coo"])
def test_enable_sparse_product_layout_is_atens(a, b):
    """A sparse @ sparse product comes back in the layout ATen gives it: CSR for any two
    compressed operands (csc @ csr too), COO for COO @ COO; scorch also computes the mixed
    COO / compressed pairs ATen refuses, in the first operand's layout."""
    x = make_dense((5, 4), torch.float32, seed_of("dispatch_layout", 1))
    y = make_dense((4, 6), torch.float32, seed_of("dispatch_layout", 2))
    conv = {"csr": torch.Tensor.to_sparse_csr, "csc": torch.Tensor.to_sparse_csc,
            "coo": torch.Tensor.to_sparse}
    A, B = conv[a](x), conv[b](y)
    with scorch.enabled():
        C = torch.mm(A, B)
    torch.testing.assert_close(C.to_dense(), x @ y)
    if "coo" not in (a, b):
        assert C.layout is torch.mm(A, B).layout is torch.sparse_csr
    else:
        assert C.layout is A.layout


def test_enable_reuses_the_view_of_a_torch_csr_until_it_changes():
    from scorch import _dispatch

    x = make_dense((6, 5), torch.float32, seed_of("dispatch_view"))
    X = dn((5, 3), torch.float32, 1)
    A = x.to_sparse_csr()
    with scorch.enabled():
        torch.testing.assert_close(torch.mm(A, X), x @ X)
        view = _dispatch._VIEWS[id(A)][2]
        torch.testing.assert_close(torch.mm(A, X), x @ X)
        assert _dispatch._VIEWS[id(A)][2] is view            # warm: the same SparseTensor
        A.values().mul_(2)                                   # in place: seen
        torch.testing.assert_close(torch.mm(A, X), 2 * x @ X)
        view = _dispatch._VIEWS[id(A)][2]
        y = x.flip(0)                                        # same nnz, other pattern
        A.copy_(y.to_sparse_csr())                           # a new version
        torch.testing.assert_close(torch.mm(A, X), y @ X)
        assert _dispatch._VIEWS[id(A)][2] is not view
        key = id(A)
        del A, view
        assert key not in _dispatch._VIEWS                   # gone with the tensor


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_enable_sees_writes_to_the_tensor_a_torch_csc_was_built_over(layout):
    """torch.sparse_csc_tensor(ccol, row, w).values() shares w's memory but not its
    version counter: an optimizer step on w is seen by torch's kernel, so scorch keeps no
    converted copy (the csr one a csc product reads) of such a view."""
    x = make_dense((30, 20), torch.float32, seed_of("csc-over-w", layout))
    s = x.to_sparse_csc() if layout == "csc" else x.to_sparse_csr()
    w = s.values().clone()
    ctor, idx = ((torch.sparse_csc_tensor, (s.ccol_indices(), s.row_indices()))
                 if layout == "csc" else (torch.sparse_csr_tensor,
                                          (s.crow_indices(), s.col_indices())))
    C = ctor(*idx, w, s.shape)
    X, Y = dn((20, 3), torch.float32, 1), dn((30, 2), torch.float32, 2)
    with scorch.enabled():
        for k in (1, 2, 3):
            torch.testing.assert_close(torch.mm(C, X), k * x @ X)
            torch.testing.assert_close(torch.mv(C, X[:, 0]), k * x @ X[:, 0])
            torch.testing.assert_close(torch.mm(C.t(), Y), k * x.t() @ Y)
            w.mul_((k + 1) / k)                             # w's version, not C's


_LAYOUTS = {"csr": lambda t: t.to_sparse_csr(), "csc": lambda t: t.to_sparse_csc(),
            "coo": lambda t: t.to_sparse(), "dense": lambda t: t}


@pytest.mark.parametrize("inp", list(_LAYOUTS))
@pytest.mark.parametrize("mats", [("csr", "csr"), ("csc", "csc"), ("csr", "csc"),
                                  ("coo", "coo"), ("csc", "dense"), ("dense", "csr")])
def test_enabled_addmm_gives_the_inputs_layout(inp, mats):
    """torch's addmm gives its input's layout; CSC + CSC @ CSC raised inside torch.  A
    sparse input with a dense product is refused, unless beta=0 leaves the product."""
    x, y, z = (make_dense((5, 5), torch.float32, seed_of("en-addmm", k), density=0.4)
               for k in range(3))
    i, a, b = _LAYOUTS[inp](x), _LAYOUTS[mats[0]](y), _LAYOUTS[mats[1]](z)
    for kw in ({}, dict(beta=0.5, alpha=2.0), dict(beta=0)):
        want = kw.get("alpha", 1) * (y @ z) + kw.get("beta", 1) * x
        if inp != "dense" and "dense" in mats and kw.get("beta", 1) != 0:
            with scorch.enabled(), pytest.raises(NotImplementedError, match="dense product"):
                torch.addmm(i, a, b, **kw)
            continue
        with scorch.enabled():
            r = torch.addmm(i, a, b, **kw)
        dense = inp == "dense" or "dense" in mats   # (a dense product at beta=0: itself)
        assert r.layout is (torch.strided if dense else i.layout)
        torch.testing.assert_close(r.to_dense() if r.layout is not torch.strided else r, want)


def test_enabled_takes_blocked_and_unsorted_compressed_tensors():
    w = torch.tensor([[1., 2, 0, 0], [3, 4, 0, 0], [0, 0, 0, 5], [0, 0, 6, 0],
                      [0, 7, 0, 0], [0, 0, 0, 0]])
    X, Y = torch.randn(4, 3), torch.randn(2, 6)
    for block in ((2, 2), (3, 1), (1, 2)):
        for t in (w.to_sparse_bsr(block), w.to_sparse_bsc(block)):
            with scorch.enabled():
                torch.testing.assert_close(torch.mm(t, X), w @ X)
                torch.testing.assert_close(torch.mm(Y, t), Y @ w)
    # a row's columns out of order (torch's own SpGEMM leaves them so): converted
    U = torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([2, 0, 1]),
                                torch.tensor([1., 2., 3.]), (2, 3))
    with pytest.raises(ValueError, match="not strictly increasing"):
        scorch.from_components((2, 3), "csr", pos=[None, U.crow_indices()],
                               crd=[None, U.col_indices()], values=U.values())
    with scorch.enabled():
        torch.testing.assert_close(torch.mm(U, X[:3]), U.to_dense() @ X[:3])


def test_einsum_names_a_torch_sparse_operand():
    A = scorch.to_sparse(torch.eye(3), "csr")
    for T in (torch.eye(3).to_sparse_csr(), torch.eye(3).to_sparse()):
        for call in (scorch.einsum, torch.einsum):
            with pytest.raises(TypeError, match="convert it with scorch.to_sparse"):
                call("ij,jk->ik", A, T)


def test_torch_keyword_names_reach_the_handlers():
    """torch passes a caller's keywords as written; scorch's handlers name parameters their
    own way, so torch's names are translated (F.linear(input=...) raised a TypeError)."""
    x = make_dense((3, 2), torch.float32, seed_of("kw"), "random")
    A = scorch.to_sparse(x, "csr")
    X = dn((4, 2), torch.float32, 1)
    calls = [
        (lambda a: F.linear(input=X, weight=a), False),
        (lambda a: F.linear(input=a, weight=X), False),
        (lambda a: F.gelu(input=a), True),
        (lambda a: torch.relu(input=a), True),
        (lambda a: torch.softmax(input=a, dim=1), None),
        (lambda a: torch.mm(input=a, mat2=X.T), False),
        (lambda a: a.mm(mat2=X.T), False),
        (lambda a: torch.mv(input=a, vec=X[0]), False),
        (lambda a: torch.add(input=a, other=a, alpha=2), True),
        (lambda a: torch.sum(input=a, dim=1), False),
        (lambda a: a.transpose(dim0=0, dim1=1), True),
        (lambda a: torch.dropout(a, 0.0, train=True), True),
        (lambda a: F.normalize(a, p="fro", dim=1), True),
        (lambda a: torch.sum(a, axis=0), False),
        (lambda a: a.sum(axis=1, keepdims=True), False),
    ]
    for call, sparse in calls:
        got = call(A)
        if sparse is None:   # (softmax over stored entries: torch.sparse's meaning)
            want = torch.sparse.softmax(x.to_sparse(), 1).to_dense()
        else:
            want = call(x)
        assert isinstance(got, scorch.SparseTensor) == (sparse is not False)
        torch.testing.assert_close(got.to_dense() if isinstance(got, scorch.SparseTensor)
                                   else got, want)
    with pytest.raises(NotImplementedError, match="zero-preserving"):
        torch.sigmoid(input=A)


def _linear_matches_dense(y, xd, wd, bd, g):
    """y, F.linear over scorch operands, against F.linear over the dense leaves xd, wd, bd:
    the values, then one backward of the same random gradient through both; returns the
    tolerance used, for the gradients the caller compares."""
    ref = F.linear(xd, wd, bd)
    tol = dict(rtol=1e-5, atol=1e-4) if y.dtype == torch.float32 else {}
    torch.testing.assert_close(y, ref, **tol)
    gy = torch.randn(ref.shape, generator=g, dtype=y.dtype)
    y.backward(gy)
    ref.backward(gy)
    return tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(40, 30), (3, 20, 30), (16, 30), (15, 30)])
@pytest.mark.parametrize("spmm_from", ["always", "default"])
def test_linear_sparse_weight_batched(shape, dtype, spmm_from, monkeypatch):
    """From 16 batch rows and enough work F.linear runs as an SpMM on x^T: same values,
    gradients to x, to the weight's values (its pattern) and to the bias, on both sides of
    the switch; the result is contiguous, as nn.Linear's (`y.view(n, -1)` follows linear
    layers; the SpMM's transposed view broke it), with or without a bias or autograd."""
    from scorch import _torch_ops
    if spmm_from == "always":
        monkeypatch.setattr(_torch_ops, "_LINEAR_SPMM_MIN_WORK", 0)
    g = torch.Generator().manual_seed(sum(shape))
    w = torch.randn(25, 30, generator=g, dtype=dtype)
    w = w * (torch.rand(25, 30, generator=g) < 0.2)
    W = scorch.to_sparse(w, "csr")
    Wv = W.values().clone().requires_grad_()
    Wg = W.with_values(Wv)
    x = torch.randn(*shape, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(25, generator=g, dtype=dtype, requires_grad=True)
    y = F.linear(x, Wg, b)
    assert not isinstance(y, scorch.SparseTensor) and y.shape == (*shape[:-1], 25)
    assert y.is_contiguous()
    with torch.no_grad():
        for bias in (b, None):
            r = F.linear(x, W, bias)
            assert r.is_contiguous()
            torch.testing.assert_close(r.view(-1), F.linear(x, w, bias).view(-1),
                                       **(dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else {}))
    xd, wd, bd = (t.detach().clone().requires_grad_() for t in (x, w, b))
    tol = _linear_matches_dense(y, xd, wd, bd, g)
    torch.testing.assert_close(x.grad, xd.grad, **tol)
    torch.testing.assert_close(b.grad, bd.grad, **tol)
    mask = w != 0
    torch.testing.assert_close(Wv.grad, wd.grad[mask], **tol)


def test_linear_spmm_route_biases_broadcast_as_torch():
    """On the SpMM route (16+ rows) a bias of the output's full shape, of its trailing
    shape, or 0-D broadcasts as torch's (the one-pass add took the flattened rows), and
    a 0-D bias does not promote the result (torch's rule for 0-D operands)."""
    g = torch.Generator().manual_seed(8)
    w = torch.randn(64, 64, generator=g)
    w[torch.rand(64, 64, generator=g) < 0.5] = 0
    W = scorch.to_sparse(w, "csr")
    x = torch.randn(4, 8, 64, generator=g)
    for b in (torch.randn(4, 8, 64, generator=g), torch.randn(8, 64, generator=g),
              torch.randn(1, 8, 64, generator=g), torch.randn(64, generator=g),
              torch.tensor(0.5)):
        y = F.linear(x, W, b)
        assert y.is_contiguous()
        torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
    b64 = torch.tensor(0.5, dtype=torch.float64)
    assert F.linear(torch.randn(32, 64), W, b64).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
@pytest.mark.parametrize("density", [0.3, 0.01])
def test_linear_sparse_input(fmt, dtype, density, monkeypatch):
    """F.linear with a sparse input and a dense weight runs x W^T, whose schedule copies W
    into W^T's layout (an SpMM) where the copy costs less than the product, and reads W's
    rows below that.  Both: the values of F.linear on dense, and gradients to the weight,
    the bias and the input's values (its pattern); the weight itself untouched."""
    from scorch import _torch_ops
    seen = []
    real = _torch_ops._contract
    monkeypatch.setattr(_torch_ops, "_contract", lambda e, o: seen.append(e) or real(e, o))
    g = torch.Generator().manual_seed(int(density * 100))
    x = torch.randn(40, 30, generator=g, dtype=dtype)
    x = x * (torch.rand(40, 30, generator=g) < density)
    X = scorch.to_sparse(x, fmt)
    Xv = X.values().clone().requires_grad_()
    Xg = X.with_values(Xv)
    w = torch.randn(25, 30, generator=g, dtype=dtype, requires_grad=True)
    w0 = w.detach().clone()
    b = torch.randn(25, generator=g, dtype=dtype, requires_grad=True)
    y = F.linear(Xg, w, b)
    assert seen == ["aj,kj->ak"]
    text = scorch.explain("aj,kj->ak", X, w.detach())
    relaid = "  transposed before running to dd (1,0)" in text
    assert relaid == (X.nnz * 25 > 25 * 30)      # the copy against the product's work
    assert not relaid or "schedule: order(a,j,k)" in text
    xd, wd, bd = (t.detach().clone().requires_grad_() for t in (x, w, b))
    tol = _linear_matches_dense(y, xd, wd, bd, g)
    torch.testing.assert_close(w.grad, wd.grad, **tol)
    torch.testing.assert_close(b.grad, bd.grad, **tol)
    torch.testing.assert_close(X.with_values(Xv.grad).to_dense(), xd.grad * (x != 0), **tol)
    assert torch.equal(w.detach(), w0)
    with torch.no_grad():
        torch.testing.assert_close(F.linear(X, w), x @ w0.t(), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mm_with_column_major_dense(dtype):
    """A @ X.t() (a column-major view): the schedule reads a row-major copy of X (its
    register tiles run along X's rows); same result and gradients as dense, X itself
    untouched."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(20, 30, generator=g, dtype=dtype) * (torch.rand(20, 30, generator=g) < 0.3)
    A = scorch.to_sparse(a, "csr")
    Y = torch.randn(40, 30, generator=g, dtype=dtype, requires_grad=True)
    before = Y.detach().clone()
    out = torch.mm(A, Y.t())
    ref = a @ Y.detach().t()
    assert "  transposed before running to dense = dd (0,1)" in scorch.explain(torch.mm, A, Y.t())
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(A @ Y.t(), ref)
    out.sum().backward()
    torch.testing.assert_close(Y.grad, (a.sum(0, keepdim=True).expand(40, 30)))
    assert torch.equal(Y.detach(), before)


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_adjoint_copy_flag_and_negated_views(fmt):
    """A.H / A.mH / A.adjoint() are the transpose (real values); A.to(dtype, copy=True)
    converts; a contiguous operand with torch's negative-view bit computes with its
    negated values; a refusal over a list of operands names their formats."""
    x = make_dense((5, 6), torch.float64, seed_of("adjoint", fmt))
    A = scorch.to_sparse(x, fmt)
    for T in (A.H, A.mH, A.adjoint()):
        assert isinstance(T, scorch.SparseTensor)
        torch.testing.assert_close(T.to_dense(), x.t())
    B = A.to(torch.float32, copy=True)
    assert B.dtype == torch.float32 and torch.equal(B.to_dense(), x.float())
    C = A.to(torch.float64, copy=True)                        # same dtype: still a copy
    C.values().mul_(2)
    assert C is not A and torch.equal(A.to_dense(), x) and torch.equal(C.to_dense(), 2 * x)
    X = torch._neg_view(torch.rand(6, 3, dtype=torch.float64))
    assert X.is_neg() and X.is_contiguous()
    torch.testing.assert_close(A @ X, x @ X.resolve_neg())
    Xt = torch._neg_view(torch.rand(3, 6, dtype=torch.float64)).t()   # strided too
    assert Xt.is_neg() and not Xt.is_contiguous()
    torch.testing.assert_close(A @ Xt, x @ Xt.resolve_neg())
    with pytest.raises(NotImplementedError, match=rf"aten.*\(formats: {fmt}\)"):
        torch.dstack([A, A])


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_sparse_sum_and_type(fmt):
    """torch.sparse.sum sums as torch's does (it raised a COO-layout error): sparse where
    dimensions remain, storing the kept coordinates torch's stores (ported code reads
    .values() / .indices() of it; it was dense), integers kept in their dtype there, a
    0-D dense sum over every dimension; A.type names and converts the dtype as A.to
    does (it was refused)."""
    x = make_dense((5, 6), torch.float32, seed_of("sparse-sum", fmt))
    x[2] = 0
    x[3, 1] = -x[3].sum() + x[3, 1]   # (row 3 sums to 0: still stored)
    A = scorch.to_sparse(x, fmt)
    torch.testing.assert_close(torch.sparse.sum(A), x.sum())
    for dim in (0, 1, -1):
        got, want = torch.sparse.sum(A, dim), torch.sparse.sum(x.to_sparse(), dim)
        assert isinstance(got, scorch.SparseTensor)
        assert torch.equal(got.indices(), want.indices())
        torch.testing.assert_close(got.values(), want.values())
    torch.testing.assert_close(torch.sparse.sum(A, [0, 1]), x.sum())
    xi = (x * 10).to(torch.int32)
    got = torch.sparse.sum(scorch.to_sparse(xi, fmt), 1)
    assert got.dtype == torch.int32 and torch.equal(got.to_dense(), xi.sum(1, dtype=torch.int32))
    Ag = scorch.to_sparse(x, fmt).requires_grad_()
    (torch.sparse.sum(Ag, 0).to_dense() * torch.arange(6.0)).sum().backward()
    torch.testing.assert_close(Ag.grad.to_dense(), (x != 0) * torch.arange(6.0))
    torch.testing.assert_close(torch.sparse.sum(A, dtype=torch.float64), x.double().sum())
    assert A.type() == "torch.FloatTensor"
    for to in (torch.float64, "torch.DoubleTensor"):
        B = A.type(to)
        assert isinstance(B, scorch.SparseTensor) and B.dtype == torch.float64
        assert torch.equal(B.to_dense(), x.double())
    with pytest.raises(TypeError, match="int8 or uint8 values, not torch.bool"):
        A.type(torch.bool)


# ---- torch.sparse.sampled_addmm / torch.sparse.addmm ---------------------------------------

@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
@pytest.mark.parametrize("alpha,beta", [(1, 1), (2.0, 0.5), (1, 0)])
def test_sampled_addmm_is_an_sddmm_with_gradients(fmt, dtype, alpha, beta):
    """alpha * (U @ V) at A's stored entries + beta * A, in A's format, against the dense
    formula; gradients of U, V and A's values against dense autograd."""
    x = make_dense((7, 9), dtype, seed_of("sampled", fmt, dtype))
    U0, V0 = dn((7, 4), dtype, 1), dn((4, 9), dtype, 2)
    w = dn((7, 9), dtype, 3)
    A = scorch.to_sparse(x, fmt).requires_grad_()
    U, V = U0.clone().requires_grad_(), V0.clone().requires_grad_()
    S = torch.sparse.sampled_addmm(A, U, V, beta=beta, alpha=alpha)
    assert isinstance(S, scorch.SparseTensor) and S.format == A.format
    (S.to_dense() * w).sum().backward()

    xd, Ud, Vd = x.clone().requires_grad_(), U0.clone().requires_grad_(), \
        V0.clone().requires_grad_()
    mask = (x != 0).to(dtype)
    ref = alpha * (Ud @ Vd) * mask + beta * xd
    (ref * w).sum().backward()
    torch.testing.assert_close(S.to_dense(), ref.detach(), **tol(dtype))
    torch.testing.assert_close(U.grad, Ud.grad, **tol(dtype))
    torch.testing.assert_close(V.grad, Vd.grad, **tol(dtype))
    if beta == 0:
        assert A.grad is None          # (the result does not depend on A's values)
    else:
        torch.testing.assert_close(A.grad.to_dense(), xd.grad * mask, **tol(dtype))
    # the same as torch's own on a CSR copy
    t = torch.sparse.sampled_addmm(x.to_sparse_csr(), U0, V0, beta=beta, alpha=alpha)
    torch.testing.assert_close(S.to_dense(), t.to_dense(), **tol(dtype))


def test_sampled_addmm_coalesces_duplicates_and_checks_shapes():
    D = scorch.from_components(
        (2, 3), "coo", pos=[torch.tensor([0, 3]), None],
        crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 2])],
        values=torch.tensor([1.0, 2.0, 3.0]))
    U, V = dn((2, 4), torch.float32, 1), dn((4, 3), torch.float32, 2)
    S = torch.sparse.sampled_addmm(D, U, V)
    mask = torch.tensor([[0, 1, 0], [0, 0, 1.0]])
    torch.testing.assert_close(S.to_dense(), (U @ V) * mask + D.to_dense())
    with pytest.raises(RuntimeError, match="mat1 \\(m, k\\)"):
        torch.sparse.sampled_addmm(D, U, V.t())
    with pytest.raises(NotImplementedError, match="out="):
        torch.sparse.sampled_addmm(D, U, V, out=torch.empty(0))
    A = scorch.to_sparse(U @ V, "csr")
    with pytest.raises(NotImplementedError, match="mat1 and mat2 dense"):
        torch.sparse.sampled_addmm(D, A, V.t())


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_multi_head_scores_on_one_mask_stay_sparse(fmt):
    """torch.einsum("ij,hik,hjk->hij", M, Q, K): each head's scores on the mask's pattern
    come back sparse (dense levels over the heads, then the mask's), not as H dense
    n x n matrices; softmax and the product with V follow, gradients as dense autograd's."""
    H, n, d = 3, 7, 4
    m = make_dense((n, n), torch.float64, seed_of("heads", fmt))
    Q, K, V = (dn((H, n, d), torch.float64, s) for s in (1, 2, 3))
    M = scorch.to_sparse(m, fmt).requires_grad_()
    Qs, Ks = Q.clone().requires_grad_(), K.clone().requires_grad_()
    S = torch.einsum("ij,hik,hjk->hij", M, Qs, Ks)
    assert isinstance(S, scorch.SparseTensor) and S.format.levels[0] == "dense"
    assert S.nnz == H * M.nnz
    out = torch.einsum("hij,hjd->hid", torch.softmax(S, -1), V)
    Md, Qd, Kd = (t.clone().requires_grad_() for t in (m, Q, K))
    scores = Md * torch.einsum("hik,hjk->hij", Qd, Kd)
    want = torch.where(m != 0, scores, float("-inf")).softmax(-1).nan_to_num(0.0) @ V
    _same_attention(out, want, (Qs, Ks), (Qd, Kd))
    torch.testing.assert_close(M.grad.to_dense(), Md.grad * (m != 0))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_multi_head_scores_with_the_heads_last_stay_sparse(fmt):
    """torch.einsum("ij,ihk,jhk->ijh", M, Q, K), PyG's layout (edges first, heads last):
    the heads' index after the mask's came back as a dense n x n x H tensor (244 MB at
    n = 4000, 4 heads).  Now sparse as the heads-first scores are (a dense level over the
    heads, then the mask's levels); softmax over the neighbours, the product with V and
    the gradients as dense masked attention."""
    H, n, d = 3, 7, 4
    m = make_dense((n, n), torch.float64, seed_of("heads-last", fmt))
    Q, K, V = (dn((n, H, d), torch.float64, s) for s in (1, 2, 3))
    M = scorch.to_sparse(m, fmt).requires_grad_()
    Qs, Ks = Q.clone().requires_grad_(), K.clone().requires_grad_()
    S = torch.einsum("ij,ihk,jhk->ijh", M, Qs, Ks)
    assert isinstance(S, scorch.SparseTensor) and S.shape == (n, n, H)
    assert S.format.levels[0] == "dense" and S.nnz == H * M.nnz
    out = torch.einsum("ijh,jhd->ihd", torch.softmax(S, 1), V)
    Md, Qd, Kd = (t.clone().requires_grad_() for t in (m, Q, K))
    scores = Md[..., None] * torch.einsum("ihk,jhk->ijh", Qd, Kd)
    keep = (m != 0)[..., None]
    want = torch.einsum("ijh,jhd->ihd", torch.where(keep, scores, float("-inf"))
                        .softmax(1).nan_to_num(0.0), V)
    _same_attention(out, want, (Qs, Ks), (Qd, Kd))
    torch.testing.assert_close(M.grad.to_dense(), Md.grad * (m != 0))


def test_outer_product_of_a_sparse_vector_stays_sparse():
    """A sparse vector's outer product with a dense one (either side) holds the vector's
    pattern in each row or column: sparse, its entries the vector's times the dense
    length; with a second sparse vector the pattern is theirs (rule 5)."""
    x = torch.tensor([0.0, 2.0, 0.0, -1.0, 3.0], dtype=torch.float64)
    y = torch.tensor([1.0, 0.0, 4.0], dtype=torch.float64)
    v = scorch.to_sparse(x, "csf")
    for expr, ops, want in (("i,j->ij", (v, y), torch.outer(x, y)),
                            ("j,i->ji", (y, v), torch.outer(y, x)),
                            ("i,j->ij", (v, scorch.to_sparse(y, "csf")), torch.outer(x, y))):
        r = torch.einsum(expr, *ops)
        assert isinstance(r, scorch.SparseTensor), expr
        torch.testing.assert_close(r.to_dense(), want)
    assert torch.einsum("i,j->ij", v, y).nnz == 3 * 3


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
@pytest.mark.parametrize("shape", [(3, 5, 6), (2, 3, 5, 6), (3, 1, 6), (1, 5, 1)])
def test_a_mask_times_more_dimensions_broadcasts(fmt, shape):
    """A 2-D mask times (h, n, n) scores, `M * (Q @ K.mT)`: torch broadcasts the mask over
    the heads, and so does scorch (each head's slice holds the mask's pattern: sparse,
    dense levels over the heads), either side, with gradients into both; it was refused
    as "a 3-D operand would broadcast the 2-D sparse operand"."""
    m = make_dense((5, 6), torch.float64, seed_of("mask-heads", fmt))
    M = scorch.to_sparse(m, fmt).requires_grad_()
    D = dn(shape, torch.float64, 4).requires_grad_()
    for r in (M * D, D * M):
        assert isinstance(r, scorch.SparseTensor) and r.shape == torch.broadcast_shapes(
            (5, 6), shape)
        torch.testing.assert_close(r.to_dense(), m * D)
    w = dn(r.shape, torch.float64, 5)
    (r.to_dense() * w).sum().backward()
    Md, Dd = m.clone().requires_grad_(), D.detach().clone().requires_grad_()
    ((Md * Dd) * w).sum().backward()
    torch.testing.assert_close(D.grad, Dd.grad)
    torch.testing.assert_close(M.grad.to_dense(), Md.grad * (m != 0))


@pytest.mark.parametrize("fmt", ["csr", "coo", "dense"])
@pytest.mark.parametrize("shape", [(3, 5, 6), (2, 3, 1, 6)])
def test_a_mask_divided_by_more_dimensions(fmt, shape):
    """M / D with D of more dimensions broadcasts as M * D does (each slice holds M's
    pattern, divided exactly as dense), with gradients into both; a D with a zero is
    refused (the implicit zeros would be nan)."""
    m = make_dense((5, 6), torch.float64, seed_of("mask-div", fmt))
    M = scorch.to_sparse(m, fmt).requires_grad_()
    D = (dn(shape, torch.float64, 6).abs() + 0.5).requires_grad_()
    r = M / D
    assert isinstance(r, scorch.SparseTensor) and r.shape == torch.broadcast_shapes(
        (5, 6), shape)
    assert torch.equal(r.to_dense(), m / D)
    w = dn(r.shape, torch.float64, 7)
    (r.to_dense() * w).sum().backward()
    Md, Dd = m.clone().requires_grad_(), D.detach().clone().requires_grad_()
    ((Md / Dd) * w).sum().backward()
    torch.testing.assert_close(D.grad, Dd.grad)
    stored = torch.ones_like(M.detach()).to_dense() != 0   # (format dense: every place)
    torch.testing.assert_close(M.grad.to_dense(), Md.grad * stored)
    with pytest.raises(NotImplementedError, match="divisor has zeros"):
        M / torch.zeros(shape, dtype=torch.float64)


def test_a_mask_times_more_dimensions_edge_cases():
    """An all-dense mask stays a SparseTensor (as the same-rank product); shapes that do
    not broadcast, or would stretch the mask's dimension of 1, are named in full."""
    m = torch.randn(5, 5, dtype=torch.float64)
    r = scorch.to_sparse(m, "dd") * torch.ones(3, 5, 5, dtype=torch.float64)
    assert isinstance(r, scorch.SparseTensor)
    torch.testing.assert_close(r.to_dense(), m.expand(3, 5, 5))
    with pytest.raises(RuntimeError, match=r"\(6, 6\) and \(2, 6, 7\) do not broadcast"):
        scorch.to_sparse(torch.ones(6, 6), "csr") * torch.ones(2, 6, 7)
    with pytest.raises(NotImplementedError, match=r"\(1, 6\) and \(3, 6, 6\) would stretch"):
        scorch.to_sparse(torch.ones(1, 6), "csr") * torch.ones(3, 6, 6)


def _same_attention(out, want, ours, dense):
    """out as want, and after a backward of each weighted along the last dimension, the
    gradients of ours (Q, K) as those of dense."""
    torch.testing.assert_close(out, want)
    w = torch.arange(float(out.shape[-1]), dtype=out.dtype)
    (out * w).sum().backward()
    (want * w).sum().backward()
    for a, b in zip(ours, dense):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("fmt", ["ddc", "csf", "coo"])
def test_multi_head_scores_on_a_batch_of_masks_stay_sparse(fmt):
    """torch.einsum("bij,bhik,bhjk->bhij", M, Q, K), a batch of masks and heads in
    torch's (B, H, n, n) layout: the heads' index sits between the mask's, and the
    scores came back as a dense tensor (whose softmax then counted the zeros).  Now
    sparse (the heads a dense level first, then the mask's levels); softmax, the product
    with V and the gradients as dense masked attention."""
    B, H, n, d = 2, 3, 5, 4
    m = make_dense((B, n, n), torch.float64, seed_of("heads-batch", fmt))
    M = scorch.to_sparse(m, fmt)
    Q, K, V = (dn((B, H, n, d), torch.float64, s) for s in (1, 2, 3))
    Qs, Ks = Q.clone().requires_grad_(), K.clone().requires_grad_()
    S = torch.einsum("bij,bhik,bhjk->bhij", M, Qs, Ks)
    assert isinstance(S, scorch.SparseTensor) and S.nnz == H * M.nnz
    out = torch.einsum("bhij,bhjd->bhid", torch.softmax(S, -1), V)
    Qd, Kd = Q.clone().requires_grad_(), K.clone().requires_grad_()
    mask = (m != 0)[:, None]
    scores = m[:, None] * torch.einsum("bhik,bhjk->bhij", Qd, Kd)
    want = torch.where(mask, scores, float("-inf")).softmax(-1).nan_to_num(0.0) @ V
    _same_attention(out, want, (Qs, Ks), (Qd, Kd))


def test_multi_head_gradients_keep_the_heads_outermost():
    """The gradients of Q and K through the multi-head scores read the scores' ddc (a
    pattern new at every step) in its own order, heads outermost: the scheduler took
    order i,j,h (and j,i,h) over a copy whose dense levels spanned the n x n grid,
    built at every backward (74 ms against 4-7 ms at n = 4096, 8 heads)."""
    H, n, d = 4, 512, 16
    m = (torch.rand(n, n, generator=torch.Generator().manual_seed(5)) < 0.02).double()
    M = scorch.to_sparse(m, "csr")
    Q, K = dn((H, n, d), torch.float64, 1), dn((H, n, d), torch.float64, 2)
    S = torch.einsum("ij,hik,hjk->hij", M, Q, K)
    for expr, other in (("hij,ij,hjk->hik", K), ("hij,ij,hik->hjk", Q)):
        text = scorch.explain(expr, S, M, other).split("generated C")[0]
        assert "loop order: h i j k" in text and "transposed before" not in text, text
        want = torch.einsum(expr, S.to_dense(), m, other)
        torch.testing.assert_close(scorch.einsum(expr, S, M, other), want)


@pytest.mark.parametrize("fmt", ["csf", "coo", "ddc"])
def test_batched_sampled_addmm(fmt):
    """A batch (b, m, n) with batches of mat1 and mat2, as torch's batched CSR takes
    (multi-head attention scores); gradients into both and into the values."""
    D = make_dense((3, 6, 5), torch.float64, seed_of("batched-sampled", fmt))
    Q, K = dn((3, 6, 4), torch.float64, 1), dn((3, 4, 5), torch.float64, 2)
    B = scorch.to_sparse(D, fmt).requires_grad_()
    Qs, Ks = Q.clone().requires_grad_(), K.clone().requires_grad_()
    S = torch.sparse.sampled_addmm(B, Qs, Ks, beta=0.5, alpha=2.0)
    assert S.format == B.format
    torch.testing.assert_close(S.to_dense(), (2.0 * (Q @ K) + 0.5 * D) * (D != 0))
    Dd, Qd, Kd = (t.clone().requires_grad_() for t in (D, Q, K))
    ((2.0 * (Qd @ Kd) + 0.5 * Dd) * (D != 0)).sum().backward()
    S.sum().backward()
    torch.testing.assert_close(Qs.grad, Qd.grad)
    torch.testing.assert_close(Ks.grad, Kd.grad)
    torch.testing.assert_close(B.grad.to_dense(), Dd.grad * (D != 0))
    with pytest.raises(RuntimeError, match="a batch of each"):
        torch.sparse.sampled_addmm(B, Q[:2], K[:2])


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_torch_sparse_addmm(fmt):
    x = make_dense((6, 5), torch.float64, seed_of("sparse_addmm", fmt))
    M, X = dn((6, 3), torch.float64, 1), dn((5, 3), torch.float64, 2)
    A = scorch.to_sparse(x, fmt)
    torch.testing.assert_close(torch.sparse.addmm(M, A, X, beta=0.5, alpha=2.0),
                               torch.addmm(M, x, X, beta=0.5, alpha=2.0))


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_division_by_a_dense_tensor_has_gradients(fmt):
    """A / deg[:, None] (row normalisation): values and the divisor both get gradients."""
    x = make_dense((6, 5), torch.float64, seed_of("div_grad", fmt))
    A = scorch.to_sparse(x, fmt).requires_grad_()
    d = (torch.arange(6.0, dtype=torch.float64) + 1).requires_grad_()
    w = dn((6, 5), torch.float64, 3)
    ((A / d[:, None]).to_dense() * w).sum().backward()
    xd, dd = x.clone().requires_grad_(), d.detach().clone().requires_grad_()
    ((xd / dd[:, None]) * w).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * (x != 0))
    # (the dense gradient of d also sums over the implicit zeros, whose share is 0)
    torch.testing.assert_close(d.grad, dd.grad)


def test_fuzz_found_elementwise_cases():
    """A one-element dense operand of more dims promotes the dtype as torch's does; a
    divisor with a nan is refused as one with a zero is (0/nan is nan)."""
    x = make_dense((3, 4), torch.float32, seed_of("elementwise_fuzz"))
    A = scorch.to_sparse(x, "csr")
    d = torch.tensor([[2.0]], dtype=torch.float64)
    for got, ref in ((A * d, x * d), (A / d, x / d)):
        assert got.dtype == ref.dtype == torch.float64
        assert torch.equal(got.to_dense(), ref)
    for bad in (float("nan"), torch.tensor([1.0, float("nan"), 1.0, 1.0])):
        with pytest.raises(NotImplementedError, match="nan"):
            A / bad


@pytest.mark.parametrize("fmt", ["dense", "dd", "csr"])
def test_elementwise_products_keep_an_all_dense_format(fmt):
    """A * D and A * B on a SparseTensor in an all-dense format stay SparseTensors in it
    (the compiler's all-dense output is a plain tensor), with gradients."""
    x = make_dense((3, 4), torch.float64, seed_of("dense_fmt_mul", fmt))
    A = scorch.to_sparse(x, fmt).requires_grad_()
    D = dn((3, 4), torch.float64, 1).requires_grad_()
    for r, ref in ((A * D, x * D), (A * A, x * x), (D[0] * A, x * D[0])):
        assert isinstance(r, scorch.SparseTensor) and r.format == A.format
        torch.testing.assert_close(r.to_dense(), ref)
    (A * D).to_dense().sum().backward()
    stored = torch.zeros_like(x)
    stored[tuple(A.indices())] = 1
    torch.testing.assert_close(A.grad.to_dense(), D.detach() * stored)
    torch.testing.assert_close(D.grad, x)


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_products_refuse_a_contracted_dimension_of_one(fmt):
    """torch's products do not stretch a dimension of 1 (einsum does): a size-1 inner
    dimension or bmm batch against a larger one is torch's RuntimeError, not a product."""
    A = scorch.to_sparse(make_dense((4, 5), torch.float64, 3), fmt)
    A3 = scorch.to_sparse(make_dense((3, 4, 5), torch.float64, 4), "csf")
    one = torch.ones(1, 2, dtype=torch.float64)
    calls = [lambda: A @ one, lambda: torch.mm(A, one), lambda: torch.mv(A, one[0, :1]),
             lambda: torch.mm(one.t(), A), lambda: torch.addmm(torch.zeros(4, 2).double(), A, one),
             lambda: A @ scorch.to_sparse(one, "csr"),
             lambda: torch.bmm(A3, torch.ones(1, 5, 2, dtype=torch.float64)),
             lambda: torch.baddbmm(torch.zeros(3, 4, 2).double(), A3,
                                   torch.ones(1, 5, 2, dtype=torch.float64)),
             lambda: torch.bmm(torch.ones(1, 2, 4, dtype=torch.float64), A3)]
    for call in calls:
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            call()
    with pytest.raises(RuntimeError, match="in_features"):
        F.linear(torch.ones(3, 1, dtype=torch.float64), A)
    with torch.enable_grad():
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            A @ one.requires_grad_()
    # matmul broadcasts a dense batch of 1, as torch's does
    torch.testing.assert_close(A3 @ torch.ones(1, 5, 2, dtype=torch.float64),
                               A3.to_dense() @ torch.ones(1, 5, 2, dtype=torch.float64))


@pytest.mark.parametrize("fmt", ["csr", "coo"])
@pytest.mark.parametrize("dtype", DT)
def test_zero_preserving_unary_functions_under_every_name(fmt, dtype):
    """Every zero-preserving unary function scorch maps over the stored values, under
    each name torch gives it (torch.X, Tensor.X, torch.special.X, and the aliases: fix,
    arcsin, ...), keeps the pattern and matches the dense result."""
    from scorch._torch_ops import _UNARY
    x = make_dense((5, 6), dtype, seed_of("unary", fmt, dtype)) * 0.9   # (atanh's domain)
    A = scorch.to_sparse(x, fmt)
    seen = 0
    for name in _UNARY:
        for owner in (torch, torch.Tensor, torch.special):
            f = getattr(owner, name, None)
            if f is None:
                continue
            r = f(A)
            assert isinstance(r, scorch.SparseTensor) and r.format == A.format, (owner, name)
            torch.testing.assert_close(r.to_dense(), f(x), equal_nan=True,
                                       msg=f"{owner.__name__}.{name}")
            seen += 1
    assert seen >= 60


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_splits_unbind_and_iteration(fmt):
    """split / chunk / tensor_split / h-, vsplit / unbind and iteration give the pieces
    torch gives (as SparseTensors, sizes and errors from torch's own rules), and the
    gradients of the pieces reach the whole tensor's values."""
    x = make_dense((5, 7), torch.float64, seed_of("split", fmt))
    A = scorch.to_sparse(x, fmt)
    for f, args in [(torch.split, (2,)), (torch.split, ([1, 4],)), (torch.split, (3, 1)),
                    (torch.chunk, (3,)), (torch.chunk, (4, 1)), (torch.tensor_split, (3,)),
                    (torch.tensor_split, ([1, 5], 1)), (torch.hsplit, (7,)),
                    (torch.vsplit, ([2],)), (torch.Tensor.split, (4, -1))]:
        got, want = f(A, *args), f(x, *args)
        assert len(got) == len(want), (f, args)
        for g, w in zip(got, want):
            assert isinstance(g, scorch.SparseTensor)
            close(g, w)
    for d in (0, 1, -1):
        got, want = torch.unbind(A, d), x.unbind(d)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w)
    rows = list(A)
    assert len(rows) == 5 and all(isinstance(r, scorch.SparseTensor) for r in rows)
    for r, w in zip(rows, x):
        close(r, w)
    with pytest.raises(RuntimeError, match="split_with_sizes"):
        torch.split(A, [1, 2])
    for f, args, src in [(torch.tensor_split, ([4, 2], 1), x), (torch.tensor_split, ([5, 5, 1], 1), x),
                         (torch.tensor_split, ([-1, 2],), x), (torch.tensor_split, (3, 1), x[:, :0]),
                         (torch.chunk, (2, 1), x[:, :0])]:
        got, want = f(scorch.to_sparse(src, fmt), *args), f(src, *args)
        assert len(got) == len(want), (f, args)
        for g, w in zip(got, want):
            close(g, w)
    B = A.detach().clone().requires_grad_()
    X = dn((7, 3), torch.float64, 2)
    sum((p @ X).pow(2).sum() for p in B.split(2)).backward()
    C = A.detach().clone().requires_grad_()
    (C @ X).pow(2).sum().backward()
    torch.testing.assert_close(B.grad.to_dense(), C.grad.to_dense())
    batch = scorch.to_sparse(make_dense((3, 4, 5), torch.float64, seed_of("split3")), "ddc")
    for b, w in zip(batch, batch.to_dense()):
        assert isinstance(b, scorch.SparseTensor) and b.dim() == 2
        close(b, w)


@pytest.mark.parametrize("fmt", ["csr", "coo"])
@pytest.mark.parametrize("dtype", DT + [torch.int64])
def test_rounding_division_and_remainder_by_a_scalar(fmt, dtype):
    """A // s, A % s, fmod, div(rounding_mode=) by a nonzero scalar keep the implicit
    zeros (each maps 0 to 0) and stay sparse; a zero divisor, a tensor divisor and a
    sparse divisor are refused by name.  A 0-D tensor exponent reads as its number."""
    x = make_dense((4, 6), torch.float64, seed_of("floordiv", fmt, dtype)) * 7
    x = x.to(dtype)
    A = scorch.to_sparse(x, fmt)
    ops = [lambda t: t // 2, lambda t: t % 3, lambda t: torch.fmod(t, -2),
           lambda t: torch.remainder(t, -3), lambda t: torch.floor_divide(t, 4),
           lambda t: torch.div(t, 2, rounding_mode="floor"),
           lambda t: torch.div(t, -2, rounding_mode="trunc"),
           lambda t: t ** torch.tensor(2)]
    for f in ops:
        r = f(A)
        assert isinstance(r, scorch.SparseTensor) and r.format == A.format
        close(r, f(x))
    for bad in (lambda: A // 0, lambda: A % 0.0, lambda: A // torch.ones(4, 6),
                lambda: torch.fmod(A, A)):
        with pytest.raises(NotImplementedError, match="torch"):
            bad()


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_a_dense_tensor_adds_a_sparse_one_in_place(fmt):
    """x.add_(A), x.sub_(A, alpha=), x += A, x -= A write A's entries (duplicates summed)
    into the dense x, as the dense A would; gradients reach A's values.  A SparseTensor
    written in place, a dtype the result cannot be cast to and a broadcast are refused."""
    x = make_dense((4, 5), torch.float32, seed_of("iadd", fmt))
    A = scorch.to_sparse(x, fmt)
    if fmt == "coo":   # (a repeated coordinate)
        A = scorch.from_components((4, 5), "coo", pos=[torch.tensor([0, 2]), None],
                                   crd=[torch.tensor([1, 1]), torch.tensor([3, 3])],
                                   values=torch.tensor([2.0, 5.0]))
        x = A.to_dense()
    y = torch.ones(4, 5)
    y0 = y
    y.add_(A)
    y.sub_(A, alpha=3)
    y += A
    y -= A
    assert y is y0
    torch.testing.assert_close(y, 1 - 2 * x)
    z = torch.zeros(4, 5, dtype=torch.float64)
    z += A
    torch.testing.assert_close(z, x.double())
    v = A.values().detach().clone().requires_grad_()
    w = torch.zeros(4, 5)
    w.add_(A.with_values(v))
    w.pow(2).sum().backward()
    torch.testing.assert_close(v.grad, 2 * x[tuple(A.indices())] if fmt != "coo"
                               else torch.tensor([14.0, 14.0]))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.ones(4, 5, dtype=torch.int64).add_(A)
    with pytest.raises(NotImplementedError, match="broadcasting"):
        torch.ones(2, 4, 5).add_(A)
    with pytest.raises(NotImplementedError, match="in place, the result must keep"):
        A.add_(torch.ones(4, 5))


def test_more_dimensions_with_leading_ones_and_wrapping_integer_duplicates():
    """M / D and M * D where D has leading dimensions of 1 and 8 dimensions in all (the
    einsum over a leading 1 failed to compile); an integer coo whose repeated entries
    wrap when summed is summed first, then scaled, as its dense tensor is."""
    x = torch.zeros(2, 3, 4, 5, 6, 7)
    x.view(-1)[7] = 1.0
    x.view(-1)[1000] = 2.0
    C = scorch.to_sparse(x, "csf")
    D = torch.rand(1, 2, 2, 3, 4, 5, 6, 7, generator=torch.Generator().manual_seed(0)) + 1
    torch.testing.assert_close((C / D).to_dense(), x / D)
    torch.testing.assert_close((C * D).to_dense(), x * D)
    A = scorch.from_components((1, 2), "coo", pos=[torch.tensor([0, 2]), None],
                               crd=[torch.tensor([0, 0]), torch.tensor([1, 1])],
                               values=torch.tensor([-56, -85], dtype=torch.int8))
    d = A.to_dense()
    assert d[0, 1] == 115
    import numpy as np
    for f in (lambda t: t / -1.5, lambda t: t * 1.5, lambda t: t * 2,
              lambda t: t / torch.tensor([[2.0, 4.0]]), lambda t: t * np.float32(0.5),
              lambda t: t * torch.tensor([[0.5, 0.5]]), lambda t: torch.tensor([[0.5, 1.5]]) * t,
              lambda t: t * torch.full((2, 1, 2), 0.5)):
        assert torch.equal(f(A).to_dense(), f(d))
