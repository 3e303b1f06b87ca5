"""Calls that code ported from torch.sparse makes on a SparseTensor: each computes what
torch's sparse layouts compute (against the dense result), or is refused with a message
that names what was wrong and what to call instead (a migration hunt found them refused
through aten ops the user never called, or with another case's message).
"""
import pytest
import torch
import torch.nn.functional as F

import scorch

from conftest import make_dense, seed_of

FORMATS = ["csr", "csc", "coo", "dcsr", "dense"]


def _x(name, shape=(5, 6), dtype=torch.float64):
    return make_dense(shape, dtype, seed_of("migration", name))


@pytest.mark.parametrize("fmt", FORMATS)
def test_narrow_copy_is_narrow_as_a_copy(fmt):
    """narrow_copy (torch's COO has no narrow) gives narrow's entries, and is a tensor of
    its own: written in place, the source stays as it was."""
    x = _x("narrow-copy")
    A = scorch.to_sparse(x, fmt)
    for dim, start, length in ((0, 1, 3), (1, 0, 6), (1, -4, 2), (0, 5, 0)):
        got = A.narrow_copy(dim, start, length)
        assert isinstance(got, scorch.SparseTensor)
        assert torch.equal(got.to_dense(), x.narrow(dim, start, length))
        assert torch.equal(torch.narrow_copy(A, dim, start, length).to_dense(),
                           x.narrow(dim, start, length))
        got.mul_(2)
        assert torch.equal(A.to_dense(), x)
    with pytest.raises(IndexError, match="narrow_copy: start 4 and length 3 exceed"):
        A.narrow_copy(0, 4, 3)


@pytest.mark.parametrize("fmt", FORMATS)
def test_erfinv_keeps_the_entries(fmt):
    x = _x("erfinv").clamp(-0.9, 0.9)
    A = scorch.to_sparse(x, fmt)
    got = A.erfinv()
    assert isinstance(got, scorch.SparseTensor) and got.nnz == A.nnz
    torch.testing.assert_close(got.to_dense(), x.erfinv())
    torch.testing.assert_close(torch.special.erfinv(A).to_dense(), x.erfinv())
    B = A.clone()
    B.erfinv_()
    torch.testing.assert_close(B.to_dense(), x.erfinv())


@pytest.mark.parametrize("fmt", FORMATS + ["coo-dup"])
def test_value_tests_are_dense_bool(fmt):
    """isnan / isinf / isfinite / isposinf / isneginf / signbit: a dense bool tensor as
    the comparisons give, the unstored places tested as zeros, duplicates summed first
    (inf + -inf at one coordinate is nan there)."""
    x = torch.tensor([[float("nan"), 0, -0.0, 1.5], [0, 0, float("inf"), -2.0],
                      [float("-inf"), 0, 0, 0]])
    if fmt == "coo-dup":
        A = scorch.from_components((3, 4), "coo", pos=[torch.tensor([0, 3]), None],
                                   crd=[torch.tensor([1, 1, 2]), torch.tensor([3, 3, 0])],
                                   values=torch.tensor([float("inf"), float("-inf"), 2.0]))
        x = A.to_dense()
        assert x[1, 3].isnan()
    else:
        A = scorch.to_sparse(x, fmt)
        x = A.to_dense()   # (-0.0 is not stored: a zero place, whose sign bit is clear)
    for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf,
               torch.signbit):
        got = fn(A)
        assert type(got) is torch.Tensor and got.dtype == torch.bool
        assert torch.equal(got, fn(x)), fn.__name__
        assert torch.equal(getattr(A, fn.__name__)(), fn(x))


def test_bool_values_and_is_nonzero():
    """.bool() names the conversions that work (scorch stores no bool values); is_nonzero
    of a one-element tensor answers as bool() does."""
    A = scorch.to_sparse(_x("bool"), "csr")
    with pytest.raises(TypeError, match=r"not torch.bool \(A != 0 gives a dense bool"):
        A.bool()
    for v, want in ((2.0, True), (0.0, False)):
        one = scorch.to_sparse(torch.tensor([[v]]), "coo")
        assert one.is_nonzero() is want and torch.is_nonzero(one) is want
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one "
                                           "value is ambiguous"):
        A.is_nonzero()


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_dense_accumulator_add_products_in_place(fmt):
    """out.addmm_(A, X) / addmv_ / baddbmm_ into a dense out: torch.sparse computes them
    (they were refused, blaming a write to the SparseTensor, which is not written)."""
    x = _x("addmm-inplace", (4, 5))
    A = scorch.to_sparse(x, fmt)
    X, v = torch.rand(5, 3, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    out = torch.rand(4, 3, dtype=torch.float64)
    want = out * 0.5 + 2 * (x @ X)
    assert out.addmm_(A, X, beta=0.5, alpha=2) is out
    torch.testing.assert_close(out, want)
    y = torch.rand(4, dtype=torch.float64)
    want = y + x @ v
    y.addmv_(A, v)
    torch.testing.assert_close(y, want)
    b = torch.rand(1, 4, 3, dtype=torch.float64)
    want = b + x[None] @ X[None]
    b.baddbmm_(scorch.to_sparse(x[None], "coo"), X[None])
    torch.testing.assert_close(b, want)
    # autograd through the written tensor, as torch's in-place ops record it
    Xg = X.clone().requires_grad_()
    acc = torch.zeros(4, 3, dtype=torch.float64, requires_grad=True).clone()
    acc.addmm_(A, Xg)
    acc.sum().backward()
    torch.testing.assert_close(Xg.grad, x.sum(0)[:, None].expand(5, 3))
    with pytest.raises(RuntimeError, match="does not broadcast"):
        torch.zeros(5, 3, dtype=torch.float64).addmm_(A, X)
    with pytest.raises(RuntimeError, match=r"the product's shape \(4, 3\) is not the written "
                                           r"tensor's \(1, 3\)"):
        torch.zeros(1, 3, dtype=torch.float64).addmm_(A, X)   # (a broadcast input)
    with pytest.raises(NotImplementedError, match="writes in place"):
        A.addmm_(A, torch.eye(5, dtype=torch.float64))   # (a SparseTensor written: refused)


def test_refusals_name_the_case():
    """Messages that named another case: a dense tensor assigned a SparseTensor, two
    SparseTensors compared, a transpose in place, gradcheck over a SparseTensor."""
    x = _x("refusals", (3, 3))
    A = scorch.to_sparse(x, "csr")
    with pytest.raises(NotImplementedError, match="a dense tensor takes a sparse one's "
                                                  "entries through value.to_dense"):
        torch.zeros(3, 3, dtype=torch.float64)[:] = A
    for op in (torch.eq, torch.ne, torch.lt, torch.ge):
        with pytest.raises(NotImplementedError, match="two SparseTensors compared"):
            op(A, A)
    assert torch.equal(A == x, torch.ones(3, 3, dtype=torch.bool))
    for name, hint in (("t_", r"A = A.t\(\)"), ("transpose_", r"A = A.transpose\(d0, d1\)"),
                       ("unsqueeze_", r"A = A.unsqueeze\(d\)")):
        args = (0, 1) if name == "transpose_" else (0,) if name == "unsqueeze_" else ()
        with pytest.raises(NotImplementedError, match=f"shape does not change in place; use {hint}"):
            getattr(A, name)(*args)
        assert A.shape == (3, 3)
    Ag = A.detach().requires_grad_()
    X = torch.rand(3, 2, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match=r"gradcheck\(lambda v: f\(A.with_values"):
        torch.autograd.gradcheck(lambda a: a @ X, (Ag,))
    assert torch.autograd.gradcheck(lambda v: A.with_values(v) @ X,
                                    (A.values().detach().requires_grad_(),))


def test_sdpa_mask_batch_mismatch_is_named():
    n = 7
    q = torch.rand(2, 2, n, 4)
    M = scorch.to_sparse(torch.ones(3, n, n).tril(), "coo")
    with pytest.raises(RuntimeError, match=r"batch dims \(before L and S\) of the sparse "
                                           r"attn_mask \(3,\), the query \(2, 2\)"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=M)


def test_messages_for_malformed_input_name_it():
    """A robustness hunt's unclear messages: a kernel of constants alone said "einsum
    needs at least one operand"; a size past 2^63 - 1 gave OverflowError "int too big to
    convert" from inside the C core."""
    with pytest.raises(ValueError, match="has no operand tensor"):
        scorch.kernel("C(i,j) = 2 * 3")()
    with pytest.raises(ValueError, match=r"size 9223372036854775808 in dimension 0, past "
                                         r"2\^63 - 1"):
        scorch.from_components((2 ** 63, 3), "csr", pos=[None, torch.tensor([0, 0])],
                               crd=[None, torch.tensor([], dtype=torch.int64)],
                               values=torch.tensor([]))


def test_sdpa_mask_of_only_blocked_places_warns():
    """A mask ported from torch's additive convention (-inf where blocked) stores only
    the -inf places: nothing is attended, silently zero before; now a warning says why."""
    n = 6
    q = torch.rand(1, 2, n, 4)
    allowed = torch.ones(n, n).tril().bool()
    additive = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))
    M = scorch.to_sparse(additive, "csr")
    with pytest.warns(UserWarning, match="every stored value of the sparse attn_mask is -inf"):
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=M)
    assert torch.equal(out, torch.zeros_like(out))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (a mask of allowed places: no warning)
        F.scaled_dot_product_attention(q, q, q, attn_mask=scorch.to_sparse(allowed.float(),
                                                                           "csr"))
