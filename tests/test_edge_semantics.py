"""Edge cases where scorch's ops differed from dense PyTorch: value maps over a coo's
duplicate entries, 1-D softmax, the dtype of an indexed element, add-products' input
shapes and gradient at beta = 0, and scalar operands of + and *."""
import pytest
import torch
import torch.nn.functional as F

import scorch

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


def _dup_coo(dtype):
    """A 2 x 3 coo whose entry (0, 0) is stored twice (-2 and 1: -1 in total) and whose
    entry (1, 2) once (3)."""
    return scorch.from_components(
        (2, 3), "coo", pos=[torch.tensor([0, 3]), None],
        crd=[torch.tensor([0, 0, 1]), torch.tensor([0, 0, 2])],
        values=torch.tensor([-2, 1, 3], dtype=dtype))


MAPS = {
    "relu": torch.relu, "F.relu": F.relu, "abs": torch.abs, "square": torch.square,
    "pow2": lambda x: x ** 2, "pow3": lambda x: x.pow(3), "sign": torch.sign,
    "clamp": lambda x: x.clamp(-1, 2), "neg": torch.neg, "mul3": lambda x: x * 3,
}


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_value_maps_see_duplicates_summed(name, dtype):
    A = _dup_coo(dtype)
    d = A.to_dense()
    assert d[0, 0] == -1
    got = MAPS[name](A)
    assert isinstance(got, scorch.SparseTensor)
    want = MAPS[name](d)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.to_dense(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norms_casts_and_likes_see_duplicates_summed(dtype):
    A = _dup_coo(dtype)
    d = A.to_dense()
    torch.testing.assert_close(A.norm(), d.norm())
    torch.testing.assert_close(torch.linalg.vector_norm(A, float("inf")),
                               torch.linalg.vector_norm(d, float("inf")))
    torch.testing.assert_close((A * 0.5).to(torch.int32).to_dense(), (d * 0.5).to(torch.int32))
    pattern = (d != 0).to(dtype)
    torch.testing.assert_close(torch.ones_like(A).to_dense(), pattern)
    torch.testing.assert_close(torch.full_like(A, 3).to_dense(), 3 * pattern)
    assert torch.ones_like(A).nnz == 2


def test_gradient_of_a_map_over_duplicates():
    v = torch.tensor([-2.0, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
    A = _dup_coo(torch.float64).with_values(v)
    torch.relu(A).to_dense().sum().backward()
    # relu(-2 + 1) = 0: no gradient to either duplicate; relu(3): 1
    torch.testing.assert_close(v.grad, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


@pytest.mark.parametrize("fmt", ["c", "coo", "dense"])
def test_softmax_of_a_vector(fmt):
    x = torch.tensor([1.0, 0.0, 2.0, 0.5])
    V = scorch.to_sparse(x, fmt)
    kept = (x != 0) if fmt != "dense" else torch.ones(4, dtype=torch.bool)
    want = torch.zeros(4)
    want[kept] = torch.softmax(x[kept], 0)
    torch.testing.assert_close(torch.softmax(V, 0).to_dense(), want)
    want_log = torch.zeros(4)
    want_log[kept] = torch.log_softmax(x[kept], 0)
    torch.testing.assert_close(torch.log_softmax(V, 0).to_dense(), want_log)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.float32])
@pytest.mark.parametrize("fmt", ["csr", "coo", "dense"])
def test_an_indexed_element_keeps_the_dtype(dtype, fmt):
    x = torch.tensor([[1, 0], [0, 2]], dtype=dtype)
    A = scorch.to_sparse(x, fmt)
    for got, want in [(A[1, 1], x[1, 1]), (A[0, 1], x[0, 1]),
                      (scorch.to_sparse(x[0], "c" if fmt != "dense" else "dense")[0], x[0, 0])]:
        assert got.dtype == want.dtype and got.dim() == 0
        assert torch.equal(got, want)


def test_add_products_check_the_input_shape():
    A = scorch.to_sparse(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "csr")
    X = torch.ones(2, 2)
    B = scorch.to_sparse(torch.ones(2, 2, 2), "csf")
    for call in [lambda: torch.addmm(torch.ones(3, 2, 2), A, X),
                 lambda: torch.addmm(torch.ones(5, 7), A, X, beta=0),
                 lambda: torch.addmv(torch.ones(2, 2), A, torch.ones(2)),
                 lambda: torch.baddbmm(torch.ones(3, 2, 2, 2), B, torch.ones(2, 2, 2))]:
        with pytest.raises(RuntimeError, match="does not broadcast"):
            call()
    for inp in (torch.ones(2), torch.ones(1, 2), torch.ones(2, 1), torch.tensor(1.0)):
        torch.testing.assert_close(torch.addmm(inp, A, X), torch.addmm(inp, A.to_dense(), X))


def test_beta_zero_ignores_the_input_but_keeps_its_gradient():
    A = scorch.to_sparse(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "csr")
    X = torch.ones(2, 2)
    b = torch.tensor([[1.0, float("nan")], [float("inf"), 2.0]], requires_grad=True)
    r = torch.addmm(b, A, X, beta=0)
    assert r.requires_grad
    torch.testing.assert_close(r, A.to_dense() @ X)
    r.sum().backward()
    torch.testing.assert_close(b.grad, torch.zeros(2, 2))
    c = torch.ones(2, requires_grad=True)
    torch.addmv(c, A, torch.ones(2), beta=0).sum().backward()
    torch.testing.assert_close(c.grad, torch.zeros(2))


def test_scalar_operands_of_add_and_mul():
    x = torch.tensor([[1, 0], [0, -2]])
    A = scorch.to_sparse(x, "csr")
    cases = [lambda t: t + 0.0, lambda t: t - 0.0, lambda t: 0.0 - t, lambda t: t + 0,
             lambda t: t * True, lambda t: True * t, lambda t: t * False,
             lambda t: t.float() - torch.tensor(0.0), lambda t: torch.tensor(0.0) + t.float()]
    for f in cases:
        got, want = f(A), f(x)
        assert isinstance(got, scorch.SparseTensor)
        assert got.dtype == want.dtype
        assert torch.equal(got.to_dense(), want)
    s = torch.tensor(0.0, requires_grad=True)
    with pytest.raises(NotImplementedError, match="requires grad"):
        A.float() + s
    with pytest.raises(NotImplementedError, match="nonzero scalar"):
        A + 1


def test_elementwise_corners_follow_torch():
    """0.0 - A on integers negates after promotion; a Python bool adds as 0 or 1 and
    subtracts not at all; a bool alpha, shapes that do not broadcast: torch's errors;
    out= on value maps refused; an all-dense format kept by A + B."""
    x = torch.tensor([[0, 3], [200, 0]], dtype=torch.uint8)
    A = scorch.to_sparse(x, "csr")
    for got, want in ((0.0 - A, 0.0 - x), (torch.rsub(A, 0.0), torch.rsub(x, 0.0)),
                      (torch.tensor(0.) - A, torch.tensor(0.) - x)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.to_dense(), want)
    y = torch.tensor([[1., 0], [0, -2]])
    B = scorch.to_sparse(y, "csr")
    torch.testing.assert_close((B + False).to_dense(), y + False)
    with pytest.raises(NotImplementedError, match="nonzero scalar"):
        B + True
    for call in (lambda: B - True, lambda: torch.ones(2, 2, dtype=torch.bool) - B,
                 lambda: torch.add(B, B, alpha=True), lambda: B * torch.ones(5),
                 lambda: B + scorch.to_sparse(torch.ones(2, 3), "csr"),
                 lambda: B / torch.ones(3, 2)):
        with pytest.raises(RuntimeError):
            call()
    D = torch.zeros(2, 2)
    for call in (lambda: torch.neg(B, out=D), lambda: torch.abs(B, out=D),
                 lambda: torch.pow(B, 2, out=D)):
        with pytest.raises(NotImplementedError, match="out="):
            call()
    assert torch.equal(D, torch.zeros(2, 2))
    Ad = scorch.to_sparse(y, "dense")
    for r in (Ad + B, Ad - Ad, torch.add(Ad, B, alpha=2)):
        assert isinstance(r, scorch.SparseTensor) and r.format.name == "dense"
    torch.testing.assert_close((Ad - B).to_dense(), torch.zeros(2, 2))
    torch.testing.assert_close(B.subtract(B).to_dense(), y - y)
    torch.testing.assert_close(B.multiply(2).to_dense(), y * 2)
    torch.testing.assert_close(B.divide(2).to_dense(), y / 2)
    with pytest.raises(NotImplementedError, match="elementwise maximum"):
        torch.max(B, B)


@pytest.mark.parametrize("dense_fmt", ["dense", "dd"])
def test_an_all_dense_operand_keeps_the_others_stored_zeros(dense_fmt):
    """P + D with D in an all-dense format (it stores every position): the sum's entries
    are every position, in P's format, so P's explicit stored zero keeps its gradient
    (converting the compiler's dense result dropped it: the gradient there was 0)."""
    x = torch.tensor([[1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    A = scorch.to_sparse(x, "dense").requires_grad_()
    B = scorch.to_sparse(torch.tensor([[0.0, 2.0], [0.0, 0.0]], dtype=torch.float64), "csr")
    D = scorch.to_sparse(torch.tensor([[0.0, 0.0], [5.0, 0.0]], dtype=torch.float64),
                         dense_fmt)
    P = A * B                                   # csr: (0, 1) stored, value 0 * 2
    assert P.nnz == 1 and P.values().item() == 0
    S = P + D
    assert S.format == P.format and S.nnz == 4
    torch.testing.assert_close(S.to_dense(), torch.tensor([[0.0, 0.0], [5.0, 0.0]],
                                                          dtype=torch.float64))
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    g, = torch.autograd.grad((S.to_dense() * w).sum(), A)
    xd = x.clone().requires_grad_()
    gd, = torch.autograd.grad(((xd * B.to_dense() + D.to_dense()) * w).sum(), xd)
    torch.testing.assert_close(g.to_dense(), gd)
