"""reshape / view / flatten / unflatten / ravel of a SparseTensor: the entries renumbered
in row-major order, as dense reshape places elements, in the format family of the input
(its own where the dimension count stays), differentiable w.r.t. the values; a copy,
so in-place writes to it are refused as for other pieces."""
import pytest
import torch

import scorch

FORMATS = ["csr", "csc", "coo", "dcsr", "dense"]

RESHAPES = {
    "reshape(3, 8)": lambda t: t.reshape(3, 8),
    "reshape((2, 3, 4))": lambda t: t.reshape((2, 3, 4)),
    "torch.reshape(-1)": lambda t: torch.reshape(t, (-1,)),
    "view(24, 1)": lambda t: t.view(24, 1),
    "view(4, -1)": lambda t: t.view(4, -1),
    "flatten": lambda t: t.flatten(),
    "torch.flatten(0, 1)": lambda t: torch.flatten(t, 0, 1),
    "unflatten(0, (2, -1))": lambda t: t.unflatten(0, (2, -1)),
    "ravel": lambda t: t.ravel(),
    "view_as": lambda t: t.view_as(torch.empty(8, 3)),
}


def _check(m, fmt, fn):
    A = scorch.to_sparse(m, fmt).requires_grad_()
    R, want = fn(A), fn(m)
    assert isinstance(R, scorch.SparseTensor) and R.shape == want.shape
    assert torch.equal(R.to_dense(), want)
    g = torch.randn(want.shape, dtype=m.dtype)
    (R.to_dense() * g).sum().backward()
    md = m.clone().requires_grad_()
    (fn(md) * g).sum().backward()
    stored = torch.ones_like(A.detach()).to_dense() != 0
    torch.testing.assert_close(A.grad.to_dense(), md.grad * stored)
    return R


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(RESHAPES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_matches_dense_reshape(fmt, name, dtype):
    g = torch.Generator().manual_seed(len(name) * 7 + FORMATS.index(fmt))
    m = (torch.randn(6, 4, generator=g) * 4).to(dtype) * (torch.rand(6, 4, generator=g) < 0.4)
    if dtype.is_floating_point:
        _check(m, fmt, RESHAPES[name])
    else:
        A = scorch.to_sparse(m, fmt)
        assert torch.equal(RESHAPES[name](A).to_dense(), RESHAPES[name](m))


@pytest.mark.parametrize("fmt,shape,want", [
    ("ddc", (2, 2, 3, 5), "dddc"), ("ddc", (12, 5), "csr"), ("csf", (12, 5), "dcsr"),
    ("coo", (2, 2, 3, 5), "coo"), ("csf", (2, 2, 3, 5), "csf")])
def test_three_dimensions_keep_their_family(fmt, shape, want):
    m = torch.randn(4, 3, 5, dtype=torch.float64) * (torch.rand(4, 3, 5) < 0.4)
    R = _check(m, fmt, lambda t: t.reshape(shape))
    assert str(R.format) == want


def test_a_tall_grid_goes_coo_not_dense_rows():
    """A csr whose reshape would make far more dense rows than it has entries is coo."""
    A = scorch.to_sparse(torch.eye(1000)[:, :1000], "csr")
    R = A.reshape(500000, 2)
    assert str(R.format) == "coo" and R.nnz == 1000
    assert torch.equal(R.to_dense().reshape(1000, 1000), torch.eye(1000))


@pytest.mark.parametrize("shape,new", [((0, 4), (4, 0)), ((0, 4), (-1,)), ((1, 1), (1,)),
                                       ((3, 4), (3, 4)), ((2, 3), (3, 1, 2))])
def test_edges(shape, new):
    m = torch.ones(shape)
    for fmt in ("csr", "coo"):
        R = scorch.to_sparse(m, fmt).reshape(new)
        assert torch.equal(R.to_dense(), m.reshape(new))
    z = scorch.to_sparse(torch.zeros(shape), "csr").reshape(new)
    assert z.nnz == 0 and torch.equal(z.to_dense(), torch.zeros(shape).reshape(new))


def test_duplicates_are_summed():
    A = scorch.from_components((2, 3), "coo", pos=[torch.tensor([0, 3]), None],
                               crd=[torch.tensor([0, 0, 1]), torch.tensor([0, 0, 2])],
                               values=torch.tensor([-2.0, 1.0, 3.0]))
    assert torch.equal(A.reshape(3, 2).to_dense(), A.to_dense().reshape(3, 2))


def test_a_copy_refusing_writes_and_bad_shapes():
    A = scorch.to_sparse(torch.eye(4), "csr")
    before = A.values().clone()
    V = A.view(2, 8)
    with pytest.raises(NotImplementedError, match="view"):
        V.mul_(2)
    assert torch.equal(A.values(), before)
    assert A.reshape(4, 4) is A
    with pytest.raises(RuntimeError, match=r"shape \[5, 3\] is invalid for input of size 16"):
        A.reshape(5, 3)
    with pytest.raises(RuntimeError, match="at most one -1"):
        A.reshape(-1, -1)
    with pytest.raises(RuntimeError, match="ambiguous"):
        scorch.to_sparse(torch.zeros(0, 4), "csr").reshape(0, -1)
    with pytest.raises(NotImplementedError, match=r"view\(dtype\)"):
        A.view(torch.int32)
    with pytest.raises(TypeError):   # (torch's own argument parser)
        A.reshape(2.0, 8)


def test_multihead_attention_takes_a_per_head_mask():
    """nn.MultiheadAttention reshapes a (batch * heads, L, S) mask with view."""
    torch.manual_seed(0)
    n, d, b, h = 7, 8, 2, 2
    x = torch.randn(b, n, d)
    pattern = (torch.rand(b * h, n, n) < 0.4) | torch.eye(n, dtype=torch.bool)
    M = scorch.to_sparse(pattern.float(), "coo")
    mha = torch.nn.MultiheadAttention(d, h, batch_first=True)
    out, _ = mha(x, x, x, attn_mask=M, need_weights=False)
    ref, _ = mha(x, x, x, attn_mask=~pattern, need_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fmt,shape,sizes", [
    ("csr", (4, 5), (3, 4, 5)), ("csr", (4, 5), (2, 3, -1, -1)), ("coo", (4, 5), (3, 4, 5)),
    ("csc", (4, 5), (2, 3, -1, -1)), ("dense", (4, 5), (3, 4, 5)), ("csr", (1, 5), (4, 5)),
    ("coo", (1, 5), (2, 4, 5)), ("coo", (4, 1, 5), (4, 3, 5)), ("csf", (4, 1, 5), (2, 4, 3, 5)),
    ("ddc", (4, 1, 5), (4, 3, 5)), ("csr", (4, 5), (4, 5)), ("csr", (1, 1), (3, 4)),
    ("dense", (1, 1), (2, 3, 4)), ("coo", (1,), (5,)), ("coo", (1, 1, 1), (2, 3, 4))])
def test_expand_repeats_size_one_and_new_dimensions(fmt, shape, sizes):
    """A.expand as dense broadcasting places the elements (each slice holds A's entries),
    with gradients summed back over the copies; a copy refusing in-place writes."""
    g = torch.Generator().manual_seed(len(shape) * 10 + len(sizes))
    x = torch.randn(shape, dtype=torch.float64, generator=g) * (torch.rand(shape, generator=g) < 0.6)
    R = _check(x, fmt, lambda t: t.expand(*sizes))
    if tuple(R.shape) != shape and R.nnz:
        with pytest.raises(NotImplementedError, match="expand"):
            R.mul_(2)


def test_expand_errors_as_torch():
    A = scorch.to_sparse(torch.eye(3), "csr")
    with pytest.raises(RuntimeError, match="non-singleton dimension 1"):
        A.expand(3, 4)
    with pytest.raises(RuntimeError, match="must be greater or equal"):
        A.expand(3)
    with pytest.raises(RuntimeError, match="-1 is not allowed"):
        A.expand(-1, 3, 3)
    assert torch.equal(A.expand_as(torch.empty(2, 3, 3)).to_dense(), torch.eye(3).expand(2, 3, 3))


def test_dense_tensors_shaped_as_a_sparse_one_and_keyword_shapes():
    """dense.reshape_as(S) / view_as(S) / expand_as(S) are torch's own (the reshape
    handlers refused a dense self); torch.reshape(S, shape=...) takes the keyword;
    unflatten checks the sizes against the dimension even with no elements."""
    S = scorch.to_sparse(torch.eye(4), "csr")
    assert torch.zeros(16).reshape_as(S).shape == (4, 4)
    assert torch.zeros(16).view_as(S).shape == (4, 4)
    assert torch.zeros(1, 4).expand_as(S).shape == (4, 4)
    assert torch.equal(torch.reshape(S, shape=(2, 8)).to_dense(), torch.eye(4).reshape(2, 8))
    E = scorch.to_sparse(torch.zeros(0, 4), "csr")
    with pytest.raises(RuntimeError, match="don't multiply up"):
        E.unflatten(1, (2, 3))
    assert E.unflatten(1, (2, -1)).shape == (0, 2, 2)


@pytest.mark.parametrize("fmt,shape,new", [("cd", (3, 4), (4, 3)), ("dcd", (5, 3, 5), (1, 25, 3)),
                                           ("cd", (3, 4), (2, 6))])
def test_reshape_stores_exactly_the_stored_places(fmt, shape, new):
    """A format with a dense level below a sparse one would store whole rows around the
    renumbered entries (a cd's 8 stored places became 12), which softmax reads: the
    result stores the same places (explicit zeros included), renumbered."""
    x = torch.zeros(shape)
    x.view(-1)[::3] = torch.arange(1.0, x.numel() // 3 + 2)[:x.view(-1)[::3].numel()]
    x.view(-1)[4] = 0.0
    A = scorch.to_sparse(x, fmt)
    R = A.reshape(new)
    stored = torch.ones_like(A).to_dense() != 0
    assert R.nnz == A.nnz
    assert torch.equal(torch.ones_like(R).to_dense() != 0, stored.reshape(new))
    assert torch.equal(R.to_dense(), x.reshape(new))


def test_expand_costs_the_entries_not_the_shape():
    """Leading dimensions grown over a huge sparse tensor: ones of the leading shape
    only (a dense tensor of the whole output's size was allocated: 80 GB here)."""
    n = 100_000
    A = scorch.from_components((1, n, n), "coo", pos=[torch.tensor([0, 1]), None, None],
                               crd=[torch.tensor([0]), torch.tensor([7]), torch.tensor([9])],
                               values=torch.tensor([1.0]))
    R = A.expand(2, n, n)
    assert R.nnz == 2 and R.shape == (2, n, n)
    assert R.indices().tolist() == [[0, 1], [7, 7], [9, 9]]


def test_squeeze_of_a_dimension_a_sparse_level_stores_keeps_the_pattern():
    """Squeezing the size-1 dimension a ddc's compressed level stores: a select kept the
    dense levels above, so every place was stored and softmax spread over the zeros."""
    x = torch.zeros(2, 2, 1)
    x[0, 1, 0], x[1, 0, 0] = 3.0, -1.0
    S = scorch.to_sparse(x, "ddc").squeeze(-1)
    assert S.nnz == 2
    assert torch.equal(torch.softmax(S, -1).to_dense(), torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    B = scorch.to_sparse(torch.eye(3)[None], "ddc").squeeze(0)   # (a dense level on top: free)
    assert B.nnz == 3 and torch.equal(B.to_dense(), torch.eye(3))


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsr", "dense"])
def test_squeezing_every_dimension_gives_the_value(fmt):
    """A (1, 1) tensor squeezed to 0-D is its value as a plain tensor, as before."""
    A = scorch.to_sparse(torch.tensor([[2.0]]), fmt)
    for r in (A.squeeze(), A.squeeze((0, 1))):
        assert type(r) is torch.Tensor and r.shape == () and r.item() == 2.0
    assert scorch.to_sparse(torch.tensor([2.0]), "coo").squeeze(0).item() == 2.0


def test_expand_past_the_machine_is_a_memory_error():
    """expand copies (one entry per place it repeats A's): a result that cannot fit in
    memory is a MemoryError before anything is allocated (the arrays were allocated
    lazily and the process was killed filling them)."""
    L = lambda *a: torch.tensor(a, dtype=torch.int64)   # noqa: E731
    S = scorch.from_components((2, 2 ** 40), "csr", pos=[None, L(0, 1, 2)],
                               crd=[None, L(5, 2 ** 40 - 1)], values=torch.tensor([1.0, 2.0]))
    with pytest.raises(MemoryError, match="would store 2199023255552 entries"):
        S.unsqueeze(0).expand(2 ** 40, 2, 2 ** 40)
    assert S.unsqueeze(0).expand(3, 2, 2 ** 40).nnz == 6
