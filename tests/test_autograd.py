"""Autograd through generated kernels: torch.autograd.gradcheck (float64) through the values
of sparse operands and through dense operands, gradients of sparse operands as
SparseTensors with the operand's pattern, and gradients against the dense computation."""
import pytest
import torch
import torch.nn.functional as F

import scorch
from conftest import make_dense, seed_of

FMTS = ["csr", "coo", "csc"]


def sp(shape, fmt, seed, kind="empty_rows", dtype=torch.float64):
    return scorch.to_sparse(make_dense(shape, dtype, seed, kind), fmt)


def rnd(shape, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype).requires_grad_()


def dense_of(x):
    return x.to_dense() if isinstance(x, scorch.SparseTensor) else x


def gradcheck(fn, *inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def vals(A, seed):
    """Fresh random values for A's pattern (so that gradcheck moves off integers)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(A.nnz, generator=g, dtype=torch.float64).requires_grad_()


@pytest.mark.parametrize("fmt", FMTS)
def test_gradcheck_spmm(fmt):
    A = sp((6, 5), fmt, seed_of("spmm", fmt))
    v, X = vals(A, 1), rnd((5, 3), 2)
    gradcheck(lambda v, X: dense_of(A.with_values(v) @ X), v, X)
    gradcheck(lambda v, x: torch.mv(A.with_values(v), x), v, rnd((5,), 3))
    gradcheck(lambda v, Y: Y @ A.with_values(v), v, rnd((2, 6), 4))


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_gradcheck_sddmm(fmt):
    A = sp((6, 5), fmt, seed_of("sddmm", fmt))
    gradcheck(lambda v, X, Y: torch.einsum("ij,ik,jk->ij", A.with_values(v), X, Y).values(),
              vals(A, 1), rnd((6, 3), 2), rnd((5, 3), 3))


@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csr", "csc")])
def test_gradcheck_spgemm(fa, fb):
    A = sp((5, 6), fa, seed_of("spgemm", fa))
    B = sp((6, 4), fb, seed_of("spgemm", fb, 2), "random")
    gradcheck(lambda va, vb: dense_of(A.with_values(va) @ B.with_values(vb)),
              vals(A, 1), vals(B, 2))


@pytest.mark.parametrize("fmt", FMTS)
def test_gradcheck_softmax(fmt):
    A = sp((6, 5), fmt, seed_of("softmax", fmt))
    for dim in (0, 1):
        gradcheck(lambda v: torch.softmax(A.with_values(v), dim).values(), vals(A, dim))
        gradcheck(lambda v: torch.log_softmax(A.with_values(v), dim).values(), vals(A, 7))


def test_gradcheck_linear():
    W = sp((4, 6), "csr", seed_of("linear"), "random")
    gradcheck(lambda v, x, b: F.linear(x, W.with_values(v), b), vals(W, 1), rnd((3, 6), 2),
              rnd((4,), 3))
    gradcheck(lambda v, x: F.linear(x, W.with_values(v)), vals(W, 4), rnd((2, 3, 6), 5))


def test_gradcheck_mttkrp():
    T = sp((4, 5, 3), "csf", seed_of("mttkrp"), "random")
    gradcheck(lambda v, B, C: torch.einsum("ijk,jr,kr->ir", T.with_values(v), B, C),
              vals(T, 1), rnd((5, 2), 2), rnd((3, 2), 3))


def test_gradcheck_sparse_attention():
    """softmax(SDDMM(mask, Q, K)) @ V: every step a generated kernel or a segment op."""
    M = sp((7, 7), "csr", seed_of("attn"))
    ones = torch.ones(M.nnz, dtype=torch.float64)

    def attn(Q, K, V):
        S = torch.einsum("ij,ik,jk->ij", M.with_values(ones), Q, K)
        return torch.softmax(S, dim=1) @ V

    gradcheck(attn, rnd((7, 3), 1), rnd((7, 3), 2), rnd((7, 2), 3))


def test_gradcheck_elementwise_and_maps():
    A = sp((5, 6), "csr", seed_of("ew"))
    B = sp((5, 6), "coo", seed_of("ew", 2), "random")
    gradcheck(lambda va, vb: (A.with_values(va) + B.with_values(vb)).values(),
              vals(A, 1), vals(B, 2))
    gradcheck(lambda va, vb: (A.with_values(va) - 2 * B.with_values(vb)).values(),
              vals(A, 3), vals(B, 4))
    gradcheck(lambda va, vb: (A.with_values(va) * B.with_values(vb)).values(),
              vals(A, 5), vals(B, 6))
    gradcheck(lambda va, D: dense_of(A.with_values(va) + D), vals(A, 7), rnd((5, 6), 8))
    gradcheck(lambda va, D: (A.with_values(va) * D).values(), vals(A, 9), rnd((5, 6), 10))
    gradcheck(lambda va, d: (A.with_values(va) * d).values(), vals(A, 11), rnd((6,), 12))
    gradcheck(lambda va: (A.with_values(va).tanh() * 3).values(), vals(A, 13))
    gradcheck(lambda va: A.with_values(va).sum(1), vals(A, 14))
    gradcheck(lambda va: A.with_values(va).mean(0, keepdim=True), vals(A, 15))
    gradcheck(lambda va: A.with_values(va).sum(), vals(A, 16))
    gradcheck(lambda va, X: A.with_values(va).t() @ X, vals(A, 17), rnd((5, 2), 18))
    gradcheck(lambda va, X, Y: torch.addmm(Y, A.with_values(va), X, beta=0.5, alpha=2.0),
              vals(A, 19), rnd((6, 2), 20), rnd((5, 2), 21))


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_requires_grad_gives_sparse_grad(fmt, dtype):
    x = make_dense((7, 5), dtype, seed_of("grad", fmt, dtype), "empty_rows")
    A = scorch.to_sparse(x, fmt).requires_grad_()
    X = make_dense((5, 3), dtype, 3, "full").requires_grad_()
    loss = ((A @ X) ** 2).sum()
    loss.backward()
    G = A.grad
    assert isinstance(G, scorch.SparseTensor) and G.format == A.format
    assert G.nnz == A.nnz and G.dtype == dtype
    assert all(torch.equal(g, a) for g, a in zip(G._crd, A._crd) if a is not None)
    xd = x.clone().requires_grad_()
    Xd = X.detach().clone().requires_grad_()
    ((xd @ Xd) ** 2).sum().backward()
    mask = (x != 0).to(dtype)
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else {}
    torch.testing.assert_close(G.to_dense(), xd.grad * mask, **tol)
    torch.testing.assert_close(X.grad, Xd.grad, **tol)
    A.grad = None
    assert A.grad is None


def test_with_values_grad_reaches_v():
    A = sp((6, 6), "csr", seed_of("wv"))
    v = vals(A, 1)
    (A.with_values(v) @ torch.ones(6, 2, dtype=torch.float64)).sum().backward()
    # d/dv_e of sum over rows/cols of A @ ones = 2 for every stored entry
    torch.testing.assert_close(v.grad, torch.full_like(v, 2.0))


def test_no_grad_takes_the_plain_path():
    A = sp((4, 4), "csr", seed_of("nograd")).requires_grad_()
    with torch.no_grad():
        y = A @ torch.ones(4, 2, dtype=torch.float64)
    assert not y.requires_grad and y.grad_fn is None
    y = A.detach() @ torch.ones(4, 2, dtype=torch.float64)
    assert not y.requires_grad
    z = A @ torch.ones(4, 2, dtype=torch.float64)
    assert z.requires_grad


def test_sparse_output_carries_grad():
    A = sp((5, 5), "csr", seed_of("sout")).requires_grad_()
    B = sp((5, 5), "csr", seed_of("sout", 2), "random").requires_grad_()
    C = A @ B
    assert isinstance(C, scorch.SparseTensor) and C.requires_grad
    C.values().sum().backward()
    ref = torch.ones(5, 5, dtype=torch.float64) @ B.to_dense().t()
    torch.testing.assert_close(A.grad.to_dense(), ref * (A.to_dense() != 0))
    ref_b = A.to_dense().t() @ torch.ones(5, 5, dtype=torch.float64)
    torch.testing.assert_close(B.grad.to_dense(), ref_b * (B.to_dense() != 0))


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsc"])
def test_gradcheck_to_dense(fmt):
    A = sp((5, 4), fmt, seed_of("to_dense", fmt))
    gradcheck(lambda v: A.with_values(v).to_dense(), vals(A, 1))


def test_gradcheck_batched_and_int64_indices():
    T = scorch.to_sparse(make_dense((2, 4, 5), torch.float64, seed_of("bmm")), "csf",
                         index_dtype=torch.int64)
    gradcheck(lambda v, B: torch.bmm(T.with_values(v), B), vals(T, 1), rnd((2, 5, 3), 2))
    A = scorch.to_sparse(make_dense((5, 4), torch.float64, seed_of("i64")), "coo",
                         index_dtype=torch.int64)
    gradcheck(lambda v, X: dense_of(X @ A.with_values(v).t()), vals(A, 3), rnd((2, 4), 4))


def test_mixed_dtypes_give_grads_in_each_operands_dtype():
    A = sp((4, 5), "csr", seed_of("mixed"), dtype=torch.float32).requires_grad_()
    X = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    y = A @ X
    assert y.dtype == torch.float64
    y.sum().backward()
    assert A.grad.dtype == torch.float32 and X.grad.dtype == torch.float64


def test_requires_grad_on_a_non_leaf_is_refused():
    A = sp((3, 3), "csr", seed_of("nonleaf"))
    B = A.with_values(vals(A, 1) * 2)
    assert B.requires_grad
    with pytest.raises(RuntimeError, match="leaf"):
        B.requires_grad_(False)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_to_sparse_of_a_dense_tensor_is_differentiable(fmt):
    x = make_dense((5, 4), torch.float64, seed_of("to_sparse", fmt)).requires_grad_()
    A = scorch.to_sparse(x, fmt)
    assert A.requires_grad and A.format == scorch.Format.parse(fmt, 2)
    torch.testing.assert_close(A.detach().to_dense(), x.detach())
    W = torch.randn(5, 4, dtype=torch.float64)
    (A * W).sum().backward()
    # Only stored entries carry gradient (the pattern is data, not a function of x).
    stored = torch.ones_like(W) if fmt == "dense" else (x.detach() != 0).double()
    torch.testing.assert_close(x.grad, W * stored)


def test_grad_of_a_dense_format_sparse_tensor():
    """A dense-format SparseTensor stores every entry; its gradient kernels come back as
    plain tensors and are gathered onto the stored entries."""
    x = make_dense((4, 5), torch.float64, seed_of("dense_fmt"))
    A = scorch.to_sparse(x, "dense").requires_grad_()
    X = torch.randn(5, 3, dtype=torch.float64)
    (A @ X).sum().backward()
    assert isinstance(A.grad, scorch.SparseTensor) and A.grad.format == A.format
    torch.testing.assert_close(A.grad.to_dense(), torch.ones(4, 3, dtype=torch.float64) @ X.t())
    gradcheck(lambda v, Y: A.with_values(v) @ Y, vals(A, 1), rnd((5, 2), 2))


# ---- duplicates: each stored entry's gradient is its coordinate's --------------------------

def _with_duplicates(fmt):
    """A 3 x 4 matrix storing (0,1) twice and (2,3) three times, in a format that can."""
    rows = torch.tensor([0, 0, 0, 1, 2, 2, 2], dtype=torch.int32)
    cols = torch.tensor([1, 1, 2, 0, 3, 3, 3], dtype=torch.int32)
    vals = torch.tensor([1.0, 2.0, -1.5, 3.0, 0.5, -2.0, 4.0], dtype=torch.float64)
    if fmt == "coo":
        return scorch.from_components((3, 4), fmt, pos=[torch.tensor([0, 7],
                                      dtype=torch.int32), None], crd=[rows, cols], values=vals)
    pos1 = torch.tensor([0, 3, 4, 7], dtype=torch.int32)
    if fmt == "dc(nonunique)":
        return scorch.from_components((3, 4), scorch.Format(fmt), pos=[None, pos1],
                                      crd=[None, cols], values=vals)
    return scorch.from_components(     # cc(nonunique): every row is nonempty
        (3, 4), scorch.Format(fmt), pos=[torch.tensor([0, 3], dtype=torch.int32), pos1],
        crd=[torch.tensor([0, 1, 2], dtype=torch.int32), cols], values=vals)


@pytest.mark.parametrize("fmt", ["coo", "dc(nonunique)", "cc(nonunique)"])
def test_duplicates_each_get_their_coordinates_gradient(fmt):
    """d loss / d v_e is the dense gradient at e's coordinate (the dense tensor sums the
    duplicates), for products, elementwise ops and SDDMMs whose backward samples at the
    operand's pattern (they gave a coordinate's whole gradient to its first duplicate, and
    twice over where the output kept the duplicates)."""
    A = _with_duplicates(fmt)
    X, D, U = (rnd(s, k).detach() for k, s in enumerate([(4, 2), (3, 4), (3, 2)]))
    B = scorch.to_sparse((rnd((3, 4), 4) * (rnd((3, 4), 5) > 0)).detach(), "coo")
    cases = [
        ("A @ X", lambda S: S @ X),
        ("X^T @ A^T", lambda S: X.t() @ S.t()),
        ("A * D", lambda S: S * D),
        ("A + B", lambda S: S + B),
        ("2A - A/4", lambda S: 2 * S - S / 4),
        ("A * A", lambda S: S * S),
        ("sddmm", lambda S: torch.einsum("ij,ik,jk->ij", S, U, X)),
        ("sum", lambda S: S.sum(1)),
    ]
    coords = tuple(A.indices())
    dense_ops = (X, D, U)
    for name, f in cases:
        v = A.values().detach().clone().requires_grad_()
        for t in dense_ops:
            t.requires_grad_().grad = None
        out = f(A.with_values(v))
        out = out.to_dense() if isinstance(out, scorch.SparseTensor) else out
        w = rnd(out.shape, 6).detach()
        (out * w).sum().backward()
        got = [t.grad for t in dense_ops]
        for t in dense_ops:
            t.grad = None
        vd = A.values().detach().clone().requires_grad_()
        xd = torch.zeros(3, 4, dtype=torch.float64).index_put(coords, vd, accumulate=True)
        ref = f(xd) if name != "A + B" else xd + B.to_dense()
        torch.testing.assert_close(out, ref.detach(), msg=name)
        (ref * w).sum().backward()
        torch.testing.assert_close(v.grad, vd.grad, msg=name)
        for a, b in zip(got, [t.grad for t in dense_ops]):   # (the dense operands' too)
            torch.testing.assert_close(a, b, msg=name)


def test_a_torch_coo_input_keeps_its_values_gradient():
    v = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for fmt in ("csr", "coo", "csc"):
        v.grad = None
        S = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1], [1, 1, 0]]), v, (2, 2))   # (0,1) twice
        A = scorch.to_sparse(S, fmt)
        assert A.requires_grad
        torch.testing.assert_close(A.to_dense(), torch.tensor([[0.0, 3.0], [3.0, 0.0]]))
        (A @ torch.tensor([[1.0], [10.0]])).sum().backward()
        torch.testing.assert_close(v.grad, torch.tensor([10.0, 10.0, 1.0]))


def test_grad_setter_takes_only_the_pattern():
    a = torch.tensor([[1., 0, 2], [0, 3, 0]], dtype=torch.float64)
    A = scorch.to_sparse(a, "csr").requires_grad_()
    A.grad = scorch.to_sparse(a * 5, "csr")                 # the same coordinates
    torch.testing.assert_close(A.grad.to_dense(), a * 5)
    other = scorch.to_sparse(torch.tensor([[0., 5, 0], [6, 0, 7]], dtype=torch.float64), "csr")
    with pytest.raises(ValueError, match="A.grad must have A's pattern"):
        A.grad = other                                      # same nnz, other coordinates
    with pytest.raises(ValueError, match="pattern"):
        A.grad = scorch.to_sparse(a.t(), "csc")             # another shape
    torch.testing.assert_close(A.grad.to_dense(), a * 5)    # unchanged by the refusals
    A.grad = None
    assert A.grad is None


def _routes(A):
    return [lambda x: A @ x, lambda x: torch.mm(A, x), lambda x: F.linear(x.t(), A),
            lambda x: scorch.einsum("ij,jk->ik", A, x),
            lambda x: torch.einsum("ij,ik,jk->ij", A, x[:2], x).to_dense()]


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_forward_mode_ad_is_refused_not_dropped(fmt):
    """A kernel reads a dual tensor's primal only: the tangent would be lost, so any
    operand with a tangent is refused; without one, a dual level changes nothing."""
    import torch.autograd.forward_ad as fwAD
    a = torch.tensor([[1., 0, 2], [0, 3, 0]], dtype=torch.float64)
    A, X = scorch.to_sparse(a, fmt), rnd((3, 2), 1).detach()
    with fwAD.dual_level():
        dual = fwAD.make_dual(X, torch.ones_like(X))
        for fn in _routes(A):
            with pytest.raises(NotImplementedError, match="forward-mode AD"):
                fn(dual)
            fn(X)                                             # no tangent: computed
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            A.with_values(fwAD.make_dual(A.values(), torch.ones(A.nnz, dtype=torch.float64))) @ X
        torch.testing.assert_close(A @ X, a @ X)


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_vmap_batched_operands_are_refused(fmt):
    from torch.autograd.functional import jacobian
    a = torch.tensor([[1., 0, 2], [0, 3, 0]], dtype=torch.float64)
    A, X = scorch.to_sparse(a, fmt), rnd((3, 2), 1).detach()
    for fn in _routes(A):
        with pytest.raises(NotImplementedError, match="batched tensor of vmap"):
            torch.vmap(fn)(X.expand(4, 3, 2))
        with pytest.raises(NotImplementedError, match="batched tensor of vmap"):
            jacobian(fn, X, vectorize=True)
    # a kernel whose operands are not batched runs inside vmap
    torch.testing.assert_close(torch.vmap(lambda y: (A @ X).sum() * y)(torch.ones(3).double()),
                               (a @ X).sum().expand(3))


def test_func_transforms_are_refused_by_name():
    """torch.func.grad / jacrev see through autograd Functions only with setup_context;
    scorch's refuse by name (torch's own error spoke of setup_context)."""
    A = scorch.to_sparse(torch.tensor([[1., 0, 2], [0, 3, 0]], dtype=torch.float64), "csr")
    x = rnd((3,), 1).detach()
    layer = scorch.nn.SparseLinear(3, 2, density=0.5).double()
    params = dict(layer.named_parameters())
    for call in (lambda: torch.func.grad(lambda v: (A @ v).sum())(x),
                 lambda: torch.func.jacrev(lambda v: A @ v)(x),
                 lambda: torch.func.grad(lambda v: (A.with_values(v) @ x).sum())(A.values()),
                 lambda: torch.func.grad(lambda p: torch.func.functional_call(
                     layer, p, (x[None],)).sum())(params)):
        with pytest.raises(NotImplementedError, match="torch.func transforms"):
            call()
    torch.testing.assert_close(layer(x[None])[0], layer.weight.detach().to_dense() @ x
                               + layer.bias.detach())


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_autograd_api_on_sparse_tensors(fmt):
    """The autograd API takes SparseTensors where it takes tensors: the graph runs through
    the values, and gradients come back in the tensor's pattern."""
    a = make_dense((4, 5), torch.float64, seed_of("api", fmt), "empty_rows")
    X = rnd((5, 2), 1)
    want = torch.autograd.grad((a.requires_grad_() @ X).pow(2).sum(), a)[0] * (a != 0)
    a = a.detach()

    A = scorch.to_sparse(a, fmt).requires_grad_()
    gA, gX = torch.autograd.grad((A @ X).pow(2).sum(), [A, X])
    assert isinstance(gA, scorch.SparseTensor) and gA.format == A.format
    torch.testing.assert_close(gA.to_dense(), want)

    A = scorch.to_sparse(a, fmt)
    A.requires_grad = True                                  # the setter reaches the values
    assert A.values().requires_grad
    X.grad = None
    (A @ X).pow(2).sum().backward(inputs=[A])              # only A's gradient
    torch.testing.assert_close(A.grad.to_dense(), want)
    assert X.grad is None

    seen = []
    A = scorch.to_sparse(a, fmt).requires_grad_()
    A.register_hook(lambda g: seen.append(g) or g * 2)     # sees, and replaces, A's gradient
    S = A * 3.0
    assert A.is_leaf and A.grad_fn is None and not S.is_leaf and S.grad_fn is not None
    S.retain_grad()
    (S @ X).pow(2).sum().backward()
    assert len(seen) == 1 and isinstance(seen[0], scorch.SparseTensor)
    torch.testing.assert_close(A.grad.to_dense(), 2 * 3 * S.grad.to_dense())
    torch.testing.assert_close(S.grad.to_dense(), torch.autograd.grad(
        (3 * a.requires_grad_() @ X).pow(2).sum(), a)[0] / 3 * (a != 0))


def test_a_hook_returning_a_wrong_shape_is_named():
    A = scorch.to_sparse(torch.eye(3, dtype=torch.float64), "csr").requires_grad_()

    def widen(g):
        return torch.zeros(4)
    A.register_hook(widen)
    with pytest.raises(RuntimeError, match="hook 'test_a_hook_returning_a_wrong_shape_is_"
                                           "named.<locals>.widen' returned a gradient of "
                                           "shape \\(4,\\)"):
        (A @ torch.ones(3, 2, dtype=torch.float64)).sum().backward()


def test_backward_of_a_sparse_result_with_a_sparse_gradient():
    a = make_dense((4, 5), torch.float64, seed_of("sparse-out"), "empty_rows")
    Q, K = rnd((4, 3), 1), rnd((5, 3), 2)
    S = torch.einsum("ij,ik,jk->ij", scorch.to_sparse(a, "csr"), Q, K)
    G = S.detach().with_values(torch.arange(S.nnz, dtype=torch.float64))
    gQ, = torch.autograd.grad(S, Q, G, retain_graph=True)
    S.backward(G)
    ref = torch.autograd.grad(a * (Q @ K.t()), Q, G.to_dense())[0]
    torch.testing.assert_close(gQ, ref)
    torch.testing.assert_close(Q.grad, ref)
    other = scorch.to_sparse(torch.ones(4, 5, dtype=torch.float64), "csr")
    with pytest.raises(ValueError, match="output's pattern"):
        torch.autograd.grad(S, Q, other)


def test_einsum_gradient_edge_forms():
    """Gradients against dense autograd where the output permutes a coo with duplicates
    (each duplicate gets its coordinate's gradient once), a dense operand is broadcast
    along a dimension of 1 (its gradient sums over the stretch), and a dense operand alone
    is summed to a scalar."""
    f64 = torch.float64
    W = torch.tensor([[1., 2.], [3., 4.]], dtype=f64)
    for expr, extra in (("ij->ji", ()), ("ij,ij->ji", (W,)), ("ij,ji->ji", (W,))):
        v = torch.tensor([1., 2., 4.], dtype=f64, requires_grad=True)
        A = scorch.from_components((2, 2), "coo", pos=[torch.tensor([0, 3]), None],
                                   crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0])],
                                   values=v)
        (torch.einsum(expr, A, *extra).to_dense() * W).sum().backward()
        d = torch.zeros(2, 2, dtype=f64, requires_grad=True)
        dense = d + torch.sparse_coo_tensor(A.indices(), v.detach(), (2, 2)).to_dense()
        (torch.einsum(expr, dense, *extra) * W).sum().backward()
        torch.testing.assert_close(v.grad, d.grad[tuple(A.indices())], msg=expr)

    S = scorch.to_sparse(torch.tensor([[1., 0, 2], [0, 3, 0]], dtype=f64), "csr")
    for expr in ("mk,ik->i", "mk,ik->"):
        x = torch.ones(3, 1, dtype=f64, requires_grad=True)
        xd = x.detach().clone().requires_grad_()
        torch.einsum(expr, x, S).sum().backward()
        torch.einsum(expr, xd, S.to_dense()).sum().backward()
        torch.testing.assert_close(x.grad, xd.grad)

    for expr, shape in (("i->", (3,)), ("ij->", (2, 3)), ("ii->", (3, 3))):
        x = torch.randn(shape, dtype=f64, requires_grad=True)
        scorch.einsum(expr, x).backward()
        xd = x.detach().clone().requires_grad_()
        torch.einsum(expr, xd).backward()
        torch.testing.assert_close(x.grad, xd.grad)


def test_dense_operand_whose_index_the_others_hold_at_size_1():
    """A dense operand's gradient where every other operand holding one of its indices
    has it at size 1 (torch broadcast them along the operand's extent): the same all
    along that extent (it was returned at size 1, and autograd refused it, or a reshape
    failed).  Each case: (equation, operands as (dense tensor, format or None))."""
    f64 = torch.float64
    B = torch.tensor([1., 0., 2.], dtype=f64)
    cases = [
        ("i,ij,j->j", [(torch.randn(4, dtype=f64), None), (torch.ones(1, 3, dtype=f64), None),
                       (B, "csf")]),
        ("i,ij,j->", [(torch.randn(4, dtype=f64), None), (torch.randn(1, 3, dtype=f64), None),
                      (B, "csf")]),
        ("ac,d,dc->ac", [(torch.arange(1., 4., dtype=f64).reshape(3, 1), "csr"),
                         (torch.tensor([1., 2, 3], dtype=f64), None),
                         (torch.tensor([[4.]], dtype=f64), None)]),
        ("acb,d,dc->acb", [(torch.arange(1., 10., dtype=f64).reshape(3, 1, 3), "csf"),
                           (torch.tensor([1., 2, 3], dtype=f64), None),
                           (torch.tensor([[4.]], dtype=f64), None)]),
        ("ca,c->", [(torch.arange(1., 7., dtype=f64).reshape(3, 2), None),
                    (torch.tensor([5.], dtype=f64), "dense")]),
        ("ijk,jk,k->", [(torch.randn(2, 4, 3, dtype=f64), None),
                        (torch.randn(1, 3, dtype=f64), None), (B, "csf")]),
    ]
    for expr, spec in cases:
        ops = [scorch.to_sparse(t, f) if f else t.clone() for t, f in spec]
        for o in ops:
            o.requires_grad_()
        dense = [t.clone().requires_grad_() for t, _ in spec]
        out, ref = torch.einsum(expr, *ops), torch.einsum(expr, *dense)
        torch.testing.assert_close(dense_of(out), ref, msg=expr)
        w = torch.linspace(-1, 2, ref.numel(), dtype=f64).reshape(ref.shape)
        got = torch.autograd.grad((dense_of(out) * w).sum(), ops)
        want = torch.autograd.grad((ref * w).sum(), dense)
        for o, a, b in zip(ops, got, want):
            torch.testing.assert_close(a._vals if isinstance(o, scorch.SparseTensor) else a,
                                       b[tuple(o.indices())] if isinstance(
                                           o, scorch.SparseTensor) else b, msg=expr)
        def f(*xs):   # (the sparse operands' values and the dense operands)
            it = iter(xs)
            return dense_of(torch.einsum(expr, *[o.with_values(next(it)) if isinstance(
                o, scorch.SparseTensor) else next(it) for o in ops]))
        gradcheck(f, *[(o.values() if isinstance(o, scorch.SparseTensor) else o)
                       .detach().clone().requires_grad_() for o in ops])


def _coo3_with_duplicates():
    """A 2 x 3 x 2 coo storing (0,1,0) twice."""
    return scorch.from_components(
        (2, 3, 2), "coo", pos=[torch.tensor([0, 4]), None, None],
        crd=[torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 0, 2]), torch.tensor([0, 0, 1, 1])],
        values=torch.tensor([1., 2., 4., -1.], dtype=torch.float64))


@pytest.mark.parametrize("fmt", ["coo", "dc(nonunique)", "cc(nonunique)", "coo3"])
def test_permuted_output_of_duplicates_gives_dense_operands_their_gradient(fmt):
    """An output that keeps a pattern with duplicates as a permuted view ("ij,ij->ji")
    pairs entry by entry with that operand in the dense operands' gradients too (G was
    passed beside it, and each duplicate met every other: twice the gradient)."""
    A = _coo3_with_duplicates() if fmt == "coo3" else _with_duplicates(fmt)
    n = A.dim()
    t = "ijk"[:n]
    exprs = [f"{t},{t}->{t[::-1]}", f"{t},{t[::-1]}->{t[::-1]}", f"{t},{t},{t}->{t[::-1]}"]
    if n == 2:
        exprs.append("ij,ik,jk->ji")
    else:
        exprs.append("ijk,ijk->ikj")
    coords = tuple(A.indices())
    for expr in exprs:
        terms = expr.split("->")[0].split(",")[1:]
        g = torch.Generator().manual_seed(len(expr))
        size = dict(zip("ijk", (*A.shape, 2)))
        ds = [torch.randn([size[c] for c in u], generator=g, dtype=torch.float64)
              for u in terms]
        v = A.values().detach().clone().requires_grad_()
        xs = [d.clone().requires_grad_() for d in ds]
        out = torch.einsum(expr, A.with_values(v), *xs).to_dense()
        w = torch.randn(out.shape, generator=g, dtype=torch.float64)
        (out * w).sum().backward()
        vd = v.detach().clone().requires_grad_()
        xd = [d.clone().requires_grad_() for d in ds]
        dense = torch.zeros(A.shape, dtype=torch.float64).index_put(coords, vd, accumulate=True)
        ref = torch.einsum(expr, dense, *xd)
        torch.testing.assert_close(out, ref.detach(), msg=expr)
        (ref * w).sum().backward()
        torch.testing.assert_close(v.grad, vd.grad, msg=expr)
        for a, b in zip(xs, xd):
            torch.testing.assert_close(a.grad, b.grad, msg=expr)
        gradcheck(lambda v, *x: torch.einsum(expr, A.with_values(v), *x).to_dense(),
                  vals(A, 3), *[d.clone().requires_grad_() for d in ds])


def test_select_keeps_a_nonunique_level():
    A = scorch.from_components((1, 3), "dc(nonunique)", pos=[None, torch.tensor([0, 3])],
                               crd=[None, torch.tensor([0, 2, 2])],
                               values=torch.tensor([1., 2., 3.]))
    r = A[0]
    assert not r.format.unique[0]
    torch.testing.assert_close(r.to_dense(), torch.tensor([1., 0., 5.]))
    C = scorch.to_sparse(torch.ones(2, 3), "csr")
    torch.testing.assert_close(torch.einsum("ij,ij->ij", A, C).to_dense(),
                               torch.tensor([[1., 0., 5.], [1., 0., 5.]]))


class _DenseGradMatmul(torch.autograd.Function):
    """A user's Function over a SparseTensor argument whose backward returns a dense
    gradient for it."""

    @staticmethod
    def forward(ctx, W, X):
        ctx.save_for_backward(X)
        return W @ X

    @staticmethod
    def backward(ctx, g):
        X, = ctx.saved_tensors
        return g @ X.t(), None


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("how", ["leaf", "with_values(p)", "with_values(2 * p)"])
@pytest.mark.parametrize("call", ["checkpoint(use_reentrant=True)", "own Function"])
def test_a_sparse_argument_of_an_autograd_function_gets_its_gradient(fmt, how, call):
    """autograd.Function sees the wrapper, not the values scorch records on: the gradient
    it gave a SparseTensor argument stayed on the wrapper's own grad slot (None for
    A.grad and p.grad).  It now goes on to the values, leaf or not."""
    from torch.utils.checkpoint import checkpoint
    base = sp((5, 4), fmt, seed_of("fn-arg", fmt, how))
    X = rnd((4, 3), 1).detach()

    def build():
        if how == "leaf":
            A = base.detach().clone().requires_grad_()
            return A, A
        p = torch.nn.Parameter(base.values().detach().clone())
        return p, base.with_values(p if how == "with_values(p)" else 2 * p)

    want_of, W = build()
    (W @ X).pow(2).sum().backward() if call != "own Function" else (W @ X).sum().backward()
    want = want_of.grad.to_dense() if how == "leaf" else want_of.grad
    got_of, W = build()
    if call == "own Function":
        _DenseGradMatmul.apply(W, X).sum().backward()
    else:
        checkpoint(lambda W, X: (W @ X).pow(2), W, X, use_reentrant=True).sum().backward()
    got = got_of.grad.to_dense() if how == "leaf" else got_of.grad
    assert got is not None
    torch.testing.assert_close(got, want)


class _ToDense(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A):
        return A.to_dense().detach()

    @staticmethod
    def backward(ctx, g):
        return g


def test_a_function_argument_with_history_keeps_its_graph():
    """The gradient a Function gives a SparseTensor argument goes on through the values'
    history without freeing it (the tensor used outside the Function too; a second
    backward after retain_graph) and is recorded under create_graph."""
    x = torch.tensor([[1., 0, 2], [0, 3, 0]], dtype=torch.float64)
    p = torch.tensor([1., 2., 3.], dtype=torch.float64, requires_grad=True)
    build = lambda: scorch.to_sparse(x, "csr").with_values(p.exp())   # noqa: E731
    b = build()
    (_ToDense.apply(b).sum() + b.to_dense().sum()).backward()
    torch.testing.assert_close(p.grad, 2 * p.exp())
    p.grad = None
    loss = _ToDense.apply(build()).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    torch.testing.assert_close(p.grad, 2 * p.exp())
    p.grad = None
    _ToDense.apply(build()).pow(2).sum().backward(create_graph=True)
    assert p.grad.requires_grad
    torch.testing.assert_close(p.grad, 2 * p.exp() * p.exp())
    p.grad = None


@pytest.mark.parametrize("fmt", ["coo", "csr", "csf"])
def test_gradient_joins_an_operand_whose_pattern_the_output_shares(fmt, monkeypatch):
    """The output of an SDDMM shares its mask's arrays, so the gradient G pairs with the
    mask entry by entry: G's values join the mask's, and the backward einsums read one
    sparse operand, not a merge of two identical patterns (a coo or csf sampled_addmm's
    backward was 5-13x slower for that merge)."""
    from scorch import _torch_ops
    shape = (6, 5) if fmt != "csf" else (2, 6, 5)
    M = sp(shape, fmt, seed_of("join", fmt))
    Q = rnd((*shape[:-1], 3), 1)
    K = rnd((*shape[:-2], 3, shape[-1]), 2)
    seen = []
    real = _torch_ops._backward_einsum

    def spy(expr, *ops, **kw):
        seen.append(sum(isinstance(o, scorch.SparseTensor) for o in ops))
        return real(expr, *ops, **kw)

    monkeypatch.setattr(_torch_ops, "_backward_einsum", spy)
    S = torch.sparse.sampled_addmm(M, Q, K, beta=0)
    w = torch.arange(float(S.nnz), dtype=torch.float64)
    (S.values() * w).sum().backward()
    assert seen and max(seen) == 1, seen
    Qd, Kd = Q.detach().clone().requires_grad_(), K.detach().clone().requires_grad_()
    mask = M.to_dense() != 0
    dense = torch.where(mask, Qd @ Kd, 0)
    (dense[mask] * w).sum().backward()
    torch.testing.assert_close(Q.grad, Qd.grad)
    torch.testing.assert_close(K.grad, Kd.grad)


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "dense"])
def test_a_dense_gradient_of_a_sparse_output_is_read_at_its_entries(fmt):
    """S.backward(G) with G dense of S's shape (as torch.sparse takes it): each stored
    entry's gradient is G at its coordinates. G was taken as the values' gradient: a
    shape error quoting nnz, or, where the shapes happened to agree, wrong gradients."""
    x = make_dense((4, 5), torch.float64, seed_of("dense-grad", fmt))
    G = torch.randn(4, 5, dtype=torch.float64)
    A = scorch.to_sparse(x, fmt).requires_grad_()
    (A * 3).backward(G)
    stored = torch.ones_like(A.detach()).to_dense() != 0
    torch.testing.assert_close(A.grad.to_dense(), 3 * G * stored)
    g, = torch.autograd.grad(A * 3, A, G)
    torch.testing.assert_close(g.to_dense(), 3 * G * stored)
    with pytest.raises(RuntimeError, match=r"grad_output\[0\] has a shape of \[5, 4\]"):
        (A * 3).backward(G.T)


def test_repeated_coordinates_each_get_the_gradient_at_their_place():
    v = torch.tensor([1., 2., 3.], requires_grad=True)
    A = scorch.from_components((3,), "coo", pos=[torch.tensor([0, 3])],
                               crd=[torch.tensor([0, 0, 2])], values=v)   # 0, 0 and 2
    (A * 2).backward(torch.tensor([10., 20., 30.]))
    assert v.grad.tolist() == [20., 20., 60.]


def test_an_implicit_gradient_needs_one_element():
    """backward() without a gradient: a SparseTensor of one element (stored or not) takes
    1, as a scalar does; any other shape is refused as torch refuses it (a 2 x 2 result
    storing one entry passed as a scalar)."""
    C = scorch.to_sparse(torch.tensor([[0., 0], [0, 5]]), "csr").requires_grad_()
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        (C * 2).backward()
    D = scorch.to_sparse(torch.tensor([[5.]]), "coo").requires_grad_()
    (D * 3).backward()
    assert D.grad.to_dense().tolist() == [[3.]]


def test_batched_gradients_are_refused_by_name():
    """autograd.grad(is_grads_batched=True) through a SparseTensor: refused naming it (a
    sparse output read the batch as a shape mismatch; a sparse input came back as a
    malformed SparseTensor)."""
    A = scorch.to_sparse(torch.eye(3), "csr").requires_grad_()
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        torch.autograd.grad(A * 2, A, torch.ones(4, 3, 3), is_grads_batched=True)
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        torch.autograd.grad((A @ torch.ones(3, 2)), A, torch.ones(4, 3, 2),
                            is_grads_batched=True)
