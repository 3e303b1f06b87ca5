"""In-place ops on a SparseTensor that keep its stored entries (a scalar factor or divisor,
a zero-preserving map, a SparseTensor of the same pattern, a dense factor) write its values
array: the result is the dense tensor's under the same op, views that share the array see
it, and what scorch kept of the tensor (a transposed copy) is made again.  Ops whose result
has other entries are refused by name, as out of place."""
import pytest
import torch
import torch.nn.functional as F

import scorch
from conftest import make_dense, seed_of

FORMATS = ["csr", "csc", "coo", "dcsr"]

# (name, in-place op on a SparseTensor or a dense tensor alike)
OPS = [
    ("mul_", lambda t: t.mul_(2.5)),
    ("mul_ 0-D", lambda t: t.mul_(torch.tensor(-3.0, dtype=t.dtype))),
    ("imul", lambda t: t.__imul__(4)),
    ("div_", lambda t: t.div_(4)),
    ("itruediv", lambda t: t.__itruediv__(-2)),
    ("neg_", lambda t: t.neg_()),
    ("relu_", lambda t: t.relu_()),
    ("torch.relu_", lambda t: torch.relu_(t)),
    ("abs_", lambda t: t.abs_()),
    ("clamp_", lambda t: t.clamp_(-0.5, 0.5)),
    ("pow_", lambda t: t.pow_(2)),
    ("square_", lambda t: t.square_()),
    ("tanh_", lambda t: t.tanh_()),
    ("zero_", lambda t: t.zero_()),
    ("nan_to_num_", lambda t: t.nan_to_num_()),
    ("F.relu", lambda t: F.relu(t, inplace=True)),
    ("F.dropout eval", lambda t: F.dropout(t, 0.5, training=False, inplace=True)),
    ("F.hardtanh", lambda t: F.hardtanh(t, -0.25, 0.25, inplace=True)),
]


def _sample(shape, dtype, *key):
    return make_dense(shape, dtype, seed_of("in-place", *key)) - \
        0.5 * (make_dense(shape, dtype, seed_of("in-place-neg", *key)) != 0).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,op", OPS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_in_place_ops_match_dense(fmt, name, op, dtype):
    x = _sample((5, 6), dtype, fmt, name)
    A = scorch.to_sparse(x, fmt)
    view = A.t()                              # shares A's values array
    X = torch.randn(5, 3, dtype=dtype, generator=torch.Generator().manual_seed(1))
    before = view @ X                         # (a csr's Aᵀ·X keeps a transposed copy)
    r = op(A)
    want = op(x.clone())
    assert r is A and isinstance(A, scorch.SparseTensor) and A.format.name == fmt
    torch.testing.assert_close(A.to_dense(), want)
    torch.testing.assert_close(view.to_dense(), want.t())
    torch.testing.assert_close(view @ X, want.t() @ X)
    if not torch.equal(want, x):
        assert not torch.allclose(before, view @ X)


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_pattern_operands(fmt):
    """add_ / sub_ (alpha) of a SparseTensor with the same entries, and mul_ by one or by a
    dense tensor (broadcast too), in place; an operand with other entries is refused."""
    x = _sample((4, 5), torch.float64, fmt, "pattern")
    y = torch.where(x != 0, torch.arange(1.0, 21.0, dtype=torch.float64).reshape(4, 5), 0.0)
    A, B = scorch.to_sparse(x, fmt), scorch.to_sparse(y, fmt)
    want = x.clone()
    A.add_(B, alpha=2)
    want.add_(y, alpha=2)
    A.sub_(B)
    want.sub_(y)
    A += B
    want += y
    A.mul_(B)
    want.mul_(y)
    d = torch.arange(5.0, dtype=torch.float64) - 2
    A.mul_(d)
    want.mul_(d)
    torch.testing.assert_close(A.to_dense(), want)
    other = scorch.to_sparse(torch.ones(4, 5, dtype=torch.float64), fmt)
    with pytest.raises(NotImplementedError, match="torch.Tensor.add_.*must keep the "
                                                  "tensor's stored entries"):
        A.add_(other)
    with pytest.raises(NotImplementedError, match="must keep"):
        A.add_(torch.ones(4, 5, dtype=torch.float64))
    torch.testing.assert_close(A.to_dense(), want)


def test_refusals_and_errors():
    x = _sample((4, 5), torch.float32, "refusals")
    A = scorch.to_sparse(x, "csr")
    with pytest.raises(NotImplementedError, match="torch.Tensor.exp_"):
        A.exp_()
    with pytest.raises(NotImplementedError, match=r"torch.Tensor.add_ \(through torch.add\)"):
        A.add_(1)
    with pytest.raises(NotImplementedError, match=r"torch.Tensor.div_ \(through torch.div\).*"
                                                  "implicit zeros into nan"):
        A.div_(0)
    with pytest.raises(NotImplementedError, match="F.hardtanh"):
        F.hardtanh(A, 0.5, 1.0, inplace=True)
    with pytest.raises(NotImplementedError, match="dense tensor"):
        torch.ones(4, 5).mul_(A)
    I = scorch.to_sparse(torch.tensor([[1, 0], [0, 2]]), "csr")
    with pytest.raises(RuntimeError, match="can't be cast"):
        I.mul_(0.5)
    I.mul_(3)
    assert I.dtype == torch.int64 and torch.equal(I.to_dense(), torch.tensor([[3, 0], [0, 6]]))
    # a coo with repeated coordinates: a linear map in place, not a nonlinear one (its
    # duplicates would be summed first: other entries)
    D = scorch.from_components((2, 2), "coo", pos=[torch.tensor([0, 3]), None],
                               crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0])],
                               values=torch.tensor([1.0, -2.0, 3.0]))
    D.mul_(2)
    torch.testing.assert_close(D.to_dense(), torch.tensor([[0.0, -2.0], [6.0, 0.0]]))
    with pytest.raises(NotImplementedError, match="must keep"):
        D.relu_()
    torch.testing.assert_close(A.to_dense(), x)


def test_autograd_rules():
    """As dense: a leaf that requires grad is written in place only under no_grad; a
    non-leaf is recorded (the gradient flows through the in-place op); a factor that
    requires grad would give a tensor without history one, which is refused."""
    x = _sample((4, 5), torch.float64, "autograd")
    A = scorch.to_sparse(x, "csr").requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        A.mul_(2)
    with torch.no_grad():
        A.mul_(2)
    torch.testing.assert_close(A.to_dense(), 2 * x)
    B = A * 1.0
    B.mul_(3)
    B.relu_()
    B.sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), 3.0 * (x > 0).double())
    w = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    C = scorch.to_sparse(x, "csr")
    with pytest.raises(NotImplementedError, match="gradient history"):
        C.mul_(w)
    torch.testing.assert_close(C.to_dense(), x)


def test_training_a_sparse_leaf_with_sgd_and_clipping():
    """A SparseTensor leaf (or Parameter) with a sparse gradient: clip_grad_norm_ scales
    the gradient in place and SGD (with momentum) steps the values, as the dense model
    masked to the pattern does."""
    x = _sample((6, 5), torch.float64, "sgd")
    mask = x != 0
    X = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    A = torch.nn.Parameter(scorch.to_sparse(x, "csr"))
    W = torch.nn.Parameter(x.clone())
    opts = [torch.optim.SGD([A], lr=0.05, momentum=0.9),
            torch.optim.SGD([W], lr=0.05, momentum=0.9)]
    for _ in range(3):
        for opt in opts:
            opt.zero_grad()
        (A @ X).pow(2).sum().backward()
        (W @ X).pow(2).sum().backward()
        W.grad.mul_(mask)
        n1 = torch.nn.utils.clip_grad_norm_([A], 1.0)
        n2 = torch.nn.utils.clip_grad_norm_([W], 1.0)
        torch.testing.assert_close(n1, n2)
        torch.testing.assert_close(A.grad.to_dense(), W.grad)
        for opt in opts:
            opt.step()
        torch.testing.assert_close(A.to_dense(), W.detach())


def test_pieces_are_copies_and_refuse_writes():
    """A[i], A[a:b], narrow, select, split and unbind pieces hold copies of A's entries
    (torch's dense ones are views): a write to one would not reach A, so it is refused;
    advanced indexing copies in torch too and is written; A[None], A[:] and A.t() share
    A's values and write through."""
    x = _sample((4, 5), torch.float32, "pieces")
    A = scorch.to_sparse(x, "csr")
    for piece in (lambda: A[0], lambda: A[1:3], lambda: A.narrow(0, 1, 2),
                  lambda: A.select(1, 2), lambda: A.split(2)[1], lambda: A.unbind(1)[0],
                  lambda: next(iter(A)), lambda: A[..., 1:]):
        with pytest.raises(NotImplementedError, match="a piece another one gave"):
            piece().mul_(10)
    torch.testing.assert_close(A.to_dense(), x)
    B = A[[0, 2]]
    B.mul_(2)
    torch.testing.assert_close(B.to_dense(), 2 * x[[0, 2]])
    P = A[1:3].clone()
    P.mul_(3)
    torch.testing.assert_close(P.to_dense(), 3 * x[1:3])
    A[None].mul_(2)
    A[:].mul_(3)
    A.t().neg_()
    torch.testing.assert_close(A.to_dense(), -6 * x)


@pytest.mark.parametrize("name,op", [
    ("leaky_relu", lambda t: F.leaky_relu(t, 0.2, inplace=True)),
    ("clamp_", lambda t: t.clamp_(-1, 1)), ("abs_", lambda t: t.abs_()),
    ("square_", lambda t: t.square_()), ("sin_", lambda t: t.sin_()),
    ("mul_ dense", lambda t: t.mul_(torch.full(t.shape, 3.0, dtype=t.dtype))),
    ("relu_", lambda t: t.relu_())])
def test_in_place_on_a_recorded_tensor_keeps_what_backward_reads(name, op):
    """An op whose backward reads its input, written in place on a tensor autograd
    records: the gradient as dense autograd's (the write used to change the input the
    op had saved, and backward raised)."""
    x = _sample((4, 5), torch.float64, "recorded", name)
    A = scorch.to_sparse(x, "csr").requires_grad_()
    B = A * 1.5
    op(B)
    (B.to_dense() * torch.arange(20.0, dtype=torch.float64).reshape(4, 5)).sum().backward()
    xd = x.clone().requires_grad_()
    Bd = xd * 1.5
    op(Bd)
    (Bd * torch.arange(20.0, dtype=torch.float64).reshape(4, 5)).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), xd.grad * (x != 0))


@pytest.mark.parametrize("fmt", ["cd", "dcd", "cdc"])
def test_dense_levels_below_a_sparse_one(fmt):
    """A sum or product of two tensors with a dense level below a sparse one comes back
    with that level compressed (cd -> cc) but the same entries in the same order: written
    in place (SGD on such a parameter)."""
    shape = (3, 4) if len(fmt) == 2 else (3, 4, 2)
    x = _sample(shape, torch.float64, "dense-below", fmt)
    A = scorch.to_sparse(x, fmt)
    A.add_(A, alpha=0.5)
    A.mul_(torch.full(shape, 2.0, dtype=torch.float64))
    torch.testing.assert_close(A.to_dense(), 3 * x)
    if len(shape) == 2:
        P = torch.nn.Parameter(scorch.to_sparse(x, fmt))
        (P @ torch.ones(4, 2, dtype=torch.float64)).sum().backward()
        torch.optim.SGD([P], lr=0.1, momentum=0.9).step()
        stored = torch.zeros(shape, dtype=torch.bool)
        stored[tuple(P.indices())] = True
        torch.testing.assert_close(P.to_dense(), x - 0.2 * stored)


def test_operator_and_function_forms():
    """`A **= 2`, torch.abs_ / neg_ / sqrt_ / clamp_ and a COO's linear maps (neg_, eval
    dropout) over repeated coordinates, which need not sum them; and the augmented
    assignments under torch.compile (one graph break, as the methods)."""
    x = _sample((3, 4), torch.float32, "forms")
    A = scorch.to_sparse(x, "csr")
    A **= 2
    torch.abs_(A)
    torch.sqrt_(A)
    torch.neg_(A)
    torch.clamp_(A, -1, 1)
    torch.testing.assert_close(A.to_dense(), (-x.abs()).clamp(-1, 1))
    D = scorch.from_components((2, 2), "coo", pos=[torch.tensor([0, 3]), None],
                               crd=[torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0])],
                               values=torch.tensor([1.0, -2.0, 3.0]))
    D.neg_()
    F.dropout(D, 0.5, training=False, inplace=True)
    assert D.nnz == 3
    torch.testing.assert_close(D.to_dense(), torch.tensor([[0.0, 1.0], [-3.0, 0.0]]))

    def step(T):
        T *= 2
        T /= 4
        T += T
        T -= T * 0.5
        return T.sum()
    B = scorch.to_sparse(x, "csr")
    torch._dynamo.reset()

    def bitwise(T):
        T |= T
        return T.sum()
    with pytest.raises(Exception, match="bitwise_or_"):   # (a refusal, not a recursion)
        torch.compile(bitwise, backend="eager")(scorch.to_sparse(torch.eye(3, dtype=torch.int64), "csr"))
    torch._dynamo.reset()
    out = torch.compile(step, backend="eager")(B)
    torch.testing.assert_close(out, x.sum() * 0.5)
    torch.testing.assert_close(B.to_dense(), x * 0.5)


def test_views_of_pieces_and_integer_keys_refuse_writes_too():
    """A view of a piece (its transpose, detach, an added dimension), a squeeze (a copy
    here, a view in torch) and pieces taken with NumPy or 0-D tensor integers share the
    piece's values storage, which is what marks them: refused, A unchanged."""
    import numpy as np
    x = _sample((4, 5), torch.float32, "piece-views")
    A = scorch.to_sparse(x, "csr")
    for view in (lambda: A[1:3].t(), lambda: A[1:3].detach(), lambda: A[1:3][None],
                 lambda: A[1:3].unsqueeze(0), lambda: A[1:2].squeeze(0),
                 lambda: A[np.int64(1)], lambda: A[torch.tensor(1)], lambda: A.squeeze()[1:]):
        with pytest.raises(NotImplementedError, match="a piece another one gave"):
            view().mul_(2)
    torch.testing.assert_close(A.to_dense(), x)


def test_grad_scaler_unscales_a_sparse_parameters_gradient():
    """torch.amp.GradScaler on a Parameter(SparseTensor): unscale_ divides the gradient's
    values in place (it was refused), so a scaled step is the plain step, and an inf in
    the gradient skips the step and lowers the scale."""
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    base = scorch.to_sparse(torch.eye(20) + torch.diag(torch.ones(19), 1), "csr")
    P, Q = torch.nn.Parameter(base.clone()), torch.nn.Parameter(base.clone())
    sp, sq = torch.optim.SGD([P], 0.1), torch.optim.SGD([Q], 0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale((P @ x).pow(2).mean()).backward()
    scaler.step(sp)
    scaler.update()
    (Q @ x).pow(2).mean().backward()
    sq.step()
    torch.testing.assert_close(P.detach().to_dense(), Q.detach().to_dense())
    before = P.detach().to_dense().clone()
    sp.zero_grad()
    scaler.scale((P @ x).sum() * float("inf")).backward()
    scaler.step(sp)
    scaler.update()
    assert torch.equal(P.detach().to_dense(), before) and scaler.get_scale() == 512.0
