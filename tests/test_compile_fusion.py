"""scorch.compile: products wait for their use, so a dense product a sparse tensor samples
runs as one fused kernel, and every result equals eager PyTorch on dense tensors."""
import pytest
import torch
import torch.nn.functional as F

import scorch
from scorch._fuse import _Product

FORMATS = ["csr", "csc", "coo", "dcsr"]
DTYPES = [torch.float32, torch.float64]


def _mask(shape, fmt, dtype, seed, density=0.4):
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(shape, generator=g) < density) * torch.randn(shape, generator=g)
    return m.to(dtype), scorch.to_sparse(m.to(dtype), fmt)


def _dense(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


SAMPLED = {
    "mask*(Q@K.T)": lambda Q, K, M: M * (Q @ K.T),
    "(Q@K.T)*mask": lambda Q, K, M: (Q @ K.T) * M,
    "torch.mul(mm, mask)": lambda Q, K, M: torch.mul(torch.mm(Q, K.t()), M),
    "einsum*mask/scale": lambda Q, K, M: M * torch.einsum("ik,jk->ij", Q, K) / 4.0,
    "matmul(mT)*2*mask": lambda Q, K, M: torch.matmul(Q, K.mT) * 2 * M,
    "-(Q@K.T)*mask": lambda Q, K, M: -(Q @ K.transpose(0, 1)) * M,
    "mask*(K@Q.T).t()": lambda Q, K, M: M * (K @ Q.T).t(),
    "mask*(Q@K.T)*D": lambda Q, K, M: M * ((Q @ K.T) * torch.ones(Q.shape[0], K.shape[0],
                                                                 dtype=Q.dtype)),
}


@pytest.mark.parametrize("form", list(SAMPLED))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sampled_product_matches_dense(form, fmt, dtype):
    fn = SAMPLED[form]
    Q, K = _dense((7, 3), dtype, 1), _dense((5, 3), dtype, 2)
    m, M = _mask((7, 5), fmt, dtype, 3)
    y = scorch.compile(fn)(Q, K, M)
    eager = fn(Q, K, M)              # the dense product, then the sparse multiply
    assert isinstance(y, scorch.SparseTensor)
    assert (y.format, y.nnz, y.dtype) == (eager.format, eager.nnz, eager.dtype)
    torch.testing.assert_close(y.to_dense(), fn(Q, K, m))


def test_fused_product_is_never_formed_densely():
    # Q @ K.T would be 10^12 floats (4 TB): only the sampled product can be computed.
    n = 1_000_000
    g = torch.Generator().manual_seed(0)
    Q, K = torch.randn(n, 4, generator=g), torch.randn(n, 4, generator=g)
    idx = torch.randint(0, n, (2, 300), generator=g)
    M = scorch.from_edge_index(idx, n)
    y = scorch.compile(lambda Q, K, M: M * (Q @ K.T))(Q, K, M)
    assert isinstance(y, scorch.SparseTensor) and y.nnz == M.nnz
    coo = y.to_format("coo")
    r, c = coo.indices()
    torch.testing.assert_close(coo.values(), (Q[r] * K[c]).sum(1) * M.to_format("coo").values())


def test_products_inside_are_deferred_and_equations_fuse():
    seen = {}

    def fn(Q, K, M):
        p = Q @ K.T
        seen["p"] = (type(p), p.shape, p.dtype, p.dim())
        q = M * p
        seen["q"] = type(q)
        return q

    Q, K = _dense((4, 2), torch.float32, 1), _dense((3, 2), torch.float32, 2)
    m, M = _mask((4, 3), "csr", torch.float32, 3)
    scorch.compile(fn)(Q, K, M)
    assert seen["p"] == (_Product, torch.Size([4, 3]), torch.float32, 2)
    assert seen["q"] is _Product


@pytest.mark.parametrize("fmt", FORMATS)
def test_gradients_match_dense(fmt):
    dtype = torch.float64
    Q, K = _dense((6, 3), dtype, 4), _dense((5, 3), dtype, 5)
    m, M = _mask((6, 5), fmt, dtype, 6)
    Q.requires_grad_(); K.requires_grad_()
    v = M.values().clone().requires_grad_()
    Mv = M.with_values(v)
    y = scorch.compile(lambda Q, K, M: (M * (Q @ K.T)).sum() * 3)(Q, K, Mv)
    assert y.dim() == 0
    y.backward()
    gq, gk, gv = Q.grad, K.grad, v.grad
    Q.grad = K.grad = None
    md = m.clone().requires_grad_()
    (md * (Q @ K.T)).sum().mul(3).backward()
    torch.testing.assert_close(gq, Q.grad)
    torch.testing.assert_close(gk, K.grad)
    # (the gradient of a sparse operand lives on its pattern)
    torch.testing.assert_close(Mv.with_values(gv).to_dense(), md.grad * (m != 0))


def test_gradcheck_float64():
    Q, K = _dense((4, 2), torch.float64, 7), _dense((3, 2), torch.float64, 8)
    _, M = _mask((4, 3), "csr", torch.float64, 9, density=0.6)
    f = scorch.compile(lambda Q, K: (M * (Q @ K.T)).values())
    assert torch.autograd.gradcheck(f, (Q.requires_grad_(), K.requires_grad_()))


def test_batched_mask():
    Q, K = _dense((2, 6, 3), torch.float32, 10), _dense((2, 5, 3), torch.float32, 11)
    m, M = _mask((2, 6, 5), "csf", torch.float32, 12)
    fn = lambda Q, K, M: M * (Q @ K.transpose(-2, -1))
    y = scorch.compile(fn)(Q, K, M)
    assert isinstance(y, scorch.SparseTensor)
    torch.testing.assert_close(y.to_dense(), fn(Q, K, m))


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (1, 1), (9, 2)])
def test_edge_shapes_and_empty_masks(shape):
    n, k = shape
    Q, K = _dense((n, 3), torch.float32, 13), _dense((k, 3), torch.float32, 14)
    for density in (0.0, 1.0, 0.5):
        m, M = _mask(shape, "csr", torch.float32, 15, density)
        y = scorch.compile(lambda Q, K, M: M * (Q @ K.T))(Q, K, M)
        torch.testing.assert_close(y.to_dense(), m * (Q @ K.T))
    Z = scorch.to_sparse(torch.ones(n, k), "csr")
    y = scorch.compile(lambda Q, K, M: M * (Q @ K.T))(Q[:, :0], K[:, :0], Z)
    torch.testing.assert_close(y.to_dense(), torch.zeros(n, k))


def test_duplicate_coordinates_sum_as_dense():
    i = torch.tensor([[0, 0, 1, 2], [1, 1, 0, 2]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0])
    t = torch.sparse_coo_tensor(i, v, (3, 3))   # uncoalesced: (0, 1) twice
    M = scorch.to_sparse(t, "coo")
    Q, K = _dense((3, 2), torch.float32, 16), _dense((3, 2), torch.float32, 17)
    y = scorch.compile(lambda Q, K, M: M * (Q @ K.T))(Q, K, M)
    torch.testing.assert_close(y.to_dense(), t.to_dense() * (Q @ K.T))


def test_masked_sparse_product():
    a, A = _mask((6, 7), "csr", torch.float64, 18, 0.3)
    b, B = _mask((7, 5), "csr", torch.float64, 19, 0.3)
    m, M = _mask((6, 5), "csr", torch.float64, 20)
    y = scorch.compile(lambda A, B, M: M * (A @ B))(A, B, M)
    torch.testing.assert_close(y.to_dense(), m * (a @ b))


def test_chains_dense_calls_and_other_ops_run_as_written():
    a, A = _mask((6, 7), "csr", torch.float32, 21, 0.3)
    X, W = _dense((7, 4), torch.float32, 22), _dense((4, 3), torch.float32, 23)

    def fn(A, X, W):
        h = (A @ X) @ W            # two products: the inner one is computed first
        return torch.relu(h), X @ W, {"s": (X @ W).sum(0)}

    h, xw, d = scorch.compile(fn)(A, X, W)
    assert type(h) is torch.Tensor and type(xw) is torch.Tensor
    torch.testing.assert_close(h, torch.relu(a @ X @ W))
    # (without a sparse operand the ops run as written: the same bits as eager)
    assert torch.equal(xw, X @ W) and torch.equal(d["s"], (X @ W).sum(0))


def test_in_place_change_and_reuse_of_a_product():
    Q, K = _dense((6, 3), torch.float32, 24), _dense((5, 3), torch.float32, 25)
    m, M = _mask((6, 5), "csr", torch.float32, 26)

    def fn(Q, K, M):
        p = Q @ K.T
        first = M * p                # fused: p itself is not computed
        p.mul_(2)                    # computes p, then doubles it
        return first, M * p, p

    first, second, p = scorch.compile(fn)(Q, K, M)
    torch.testing.assert_close(first.to_dense(), m * (Q @ K.T))
    torch.testing.assert_close(second.to_dense(), m * (2 * (Q @ K.T)))
    torch.testing.assert_close(p, 2 * (Q @ K.T))


def test_what_does_not_fuse_runs_eagerly():
    Q, K = _dense((6, 3), torch.float32, 27), _dense((5, 3), torch.float32, 28)
    m64, M64 = _mask((6, 5), "csr", torch.float64, 29)
    row = _dense((5,), torch.float32, 30)
    fns = [lambda Q, K, M: M * (Q @ K.T),                # float64 mask, float32 product
           lambda Q, K, M: (Q @ K.T) * row,              # a row broadcast: fused, dense
           lambda Q, K, M: (Q @ K.T) * row[:1],          # a size-1 broadcast: eager
           lambda Q, K, M: (Q @ K.T).sum(1, keepdim=True),
           lambda Q, K, M: (Q @ K.T) / torch.tensor(2.0)]
    for fn in fns:
        want = fn(Q, K, m64)
        got = scorch.compile(fn)(Q, K, M64)
        got = got.to_dense() if isinstance(got, scorch.SparseTensor) else got
        torch.testing.assert_close(got, want)


def test_a_kept_product_computes_when_used_later():
    kept = []

    def fn(Q, K):
        kept.append(Q @ K.T)
        return None

    Q, K = _dense((3, 2), torch.float32, 31), _dense((4, 2), torch.float32, 32)
    assert scorch.compile(fn)(Q, K) is None
    torch.testing.assert_close(kept[0] + 1, Q @ K.T + 1)
    assert kept[0].shape == (3, 4)
    assert "tensor(" in repr(kept[0])


def test_decorator_and_errors_as_eager():
    @scorch.compile
    def fn(Q, K):
        return Q @ K.T

    Q = _dense((3, 2), torch.float32, 33)
    torch.testing.assert_close(fn(Q, Q), Q @ Q.T)
    with pytest.raises(RuntimeError):
        fn(Q, _dense((3, 5), torch.float32, 34))   # as eager: the sizes disagree
    inputs = (Q.clone(),)
    scorch.compile(lambda Q: (Q @ Q.T) * 2)(*inputs)
    assert torch.equal(inputs[0], Q)


def test_an_operand_changed_in_place_after_the_product_was_taken():
    Q, K = _dense((6, 3), torch.float32, 35), _dense((5, 3), torch.float32, 36)
    m, M = _mask((6, 5), "csr", torch.float32, 37)

    def fn(Q, K, M):
        p = Q @ K.T
        Q.add_(1)                    # eager computed p before this: so does compile
        Q[0] = 5.0
        torch.mul(K, 2, out=K)
        return M * p, M * (Q @ K.T)

    want = fn(Q.clone(), K.clone(), m)
    got = scorch.compile(fn)(Q.clone(), K.clone(), M)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.to_dense(), w)

    kept = []
    scorch.compile(lambda Q, K: kept.append(Q @ K.T))(Q, K)
    Q.add_(1)                        # outside the compiled function: nothing saw it
    with pytest.raises(RuntimeError, match="changed in place"):
        kept[0] + 1


def test_grad_mode_and_reductions_as_eager():
    Q = _dense((4, 3), torch.float32, 38).requires_grad_()
    m, M = _mask((4, 4), "csr", torch.float32, 39)

    def fn(Q, M):
        with torch.no_grad():
            p = Q @ Q.T
        return M * p, (Q @ Q.T).sum(dim=[]), (Q @ Q.T) / 0.0

    a, b, c = scorch.compile(fn)(Q, M)
    assert not a.requires_grad
    torch.testing.assert_close(b, (Q @ Q.T).sum(dim=[]))
    torch.testing.assert_close(c, (Q @ Q.T) / 0.0)
    with pytest.raises(RuntimeError):
        scorch.compile(lambda Q: torch.mm(Q[None], Q[None]))(Q)   # as eager: mm is 2-D


def test_inside_torch_compile():
    Q, K = _dense((6, 3), torch.float32, 40), _dense((5, 3), torch.float32, 41)
    m, M = _mask((6, 5), "csr", torch.float32, 42)
    attn = scorch.compile(lambda Q, K, M: torch.softmax(M * (Q @ K.T), dim=1).values())
    step = torch.compile(lambda Q, K, M: attn(Q, K, M).sum() * 2, backend="eager")
    got = step(Q, K, M)
    torch.testing.assert_close(got, attn(Q, K, M).sum() * 2)


# ---- random programs: compiled against eager, on dense and on sparse masks --------------

_STARTS = ["Q @ K.T", "torch.einsum('ik,jk->ij', Q, K)", "torch.matmul(Q, K.mT)", "(K @ Q.T).T",
           "torch.mm(Q, K.t())"]
_STEPS = ["x * M", "M * x", "x * 0.5", "x / 3", "-x", "x * D", "D * x", "x * v", "x.t().t()",
          "torch.mul(x, M)", "x.transpose(0, 1).T", "x.relu()", "x * x", "(x * 2) * M"]
_TAILS = ["x", "x.sum()", "x.sum(0)", "x.sum(1)", "x.sum((0, 1))"]


def run_program_case(seed):
    """A random chain of products, elementwise factors (a mask in a random format, a dense
    tensor, a row, scalars), transposes and sums: scorch.compile's result, type, format
    and gradient against the same function run eagerly on the sparse mask and on its
    dense twin."""
    import random
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    dtype = rng.choice(DTYPES)
    n, m, d = rng.choice([0, 1, 3, 6]), rng.choice([1, 4, 7]), rng.choice([0, 1, 3])
    Q = torch.randn(n, d, generator=g, dtype=dtype)
    K = torch.randn(m, d, generator=g, dtype=dtype)
    D = torch.randn(n, m, generator=g, dtype=dtype)
    v = torch.randn(m, generator=g, dtype=dtype)
    density = rng.choice([0.0, 0.3, 1.0])
    md = ((torch.rand(n, m, generator=g) < density) * torch.randn(n, m, generator=g)).to(dtype)
    M = scorch.to_sparse(md, rng.choice(FORMATS))
    body = [rng.choice(_STEPS) for _ in range(rng.randint(0, 4))]
    if not any("M" in b for b in body):
        body.append(rng.choice(["x * M", "M * x"]))
    src = (f"def f(Q, K, D, v, M):\n    x = {rng.choice(_STARTS)}\n"
           + "".join(f"    x = {b}\n" for b in body) + f"    return {rng.choice(_TAILS)}\n")
    ns = {"torch": torch}
    exec(src, ns)
    f = ns["f"]
    Qc, Qd = Q.clone().requires_grad_(), Q.clone().requires_grad_()
    got = scorch.compile(f)(Qc, K, D, v, M)
    eager = f(Q, K, D, v, M)
    want = f(Qd, K, D, v, md)
    dense = lambda t: t.to_dense() if isinstance(t, scorch.SparseTensor) else t
    assert type(got) is type(eager), src
    if isinstance(got, scorch.SparseTensor):
        assert got.format == eager.format, src
    torch.testing.assert_close(dense(got), want.detach(), msg=lambda s: f"{s}\n{src}")
    torch.testing.assert_close(dense(got), dense(eager), msg=lambda s: f"{s}\n{src}")
    if n * d:
        dense(got).sum().backward()
        want.sum().backward()
        torch.testing.assert_close(Qc.grad, Qd.grad, msg=lambda s: f"{s}\n{src}")


@pytest.mark.parametrize("batch", range(4))
def test_random_programs(batch):
    for seed in range(batch * 30, batch * 30 + 30):
        run_program_case(seed)


# ---- what eager PyTorch does, compile does: views, errors, modes, in-place writes -------

def _same(fn, *args):
    """fn compiled and eager give the same value (compared densely) and type."""
    got, want = scorch.compile(fn)(*args), fn(*args)
    assert type(got) is type(want)
    if isinstance(want, scorch.SparseTensor):
        assert got.format == want.format
        got, want = got.to_dense(), want.to_dense()
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    else:
        assert got == want
    return got


def test_views_of_a_product_share_its_memory():
    Q, K = _dense((5, 3), torch.float32, 43), _dense((4, 3), torch.float32, 44)
    _, M = _mask((4, 5), "csr", torch.float32, 45)

    def base_changed(Q, K, M):
        p = Q @ K.T
        q = p.T
        p.mul_(2)
        return q

    def view_changed(Q, K, M):
        p = Q @ K.T
        r = p.mT
        r.mul_(3)
        return p

    def base_changed_then_sampled(Q, K, M):
        p = Q @ K.T
        q = p.T
        p[0, 0] = 99.0
        return M * q                 # q holds the 99: computed, then multiplied

    for fn in (base_changed, view_changed, base_changed_then_sampled,
               lambda Q, K, M: M * (Q @ K.T).T):
        _same(fn, Q, K, M)


def test_errors_are_raised_where_eager_raises_them():
    Q, K = _dense((5, 3), torch.float32, 47), _dense((4, 3), torch.float32, 48)

    def caught(op):
        def fn(Q, K):
            try:
                return op(Q @ K.T)
            except (IndexError, RuntimeError) as e:
                return type(e).__name__
        return fn

    for op in (lambda p: p.sum(2), lambda p: p.transpose(0, 7), lambda p: p.permute(0, 3),
               lambda p: p.sum(-3), lambda p: p.sum((0, 0))):
        _same(caught(op), Q, K)


def test_in_place_metadata_modes_and_containers():
    import collections
    Q, K = _dense((5, 3), torch.float32, 49), _dense((4, 3), torch.float32, 50)
    _same(lambda Q, K: (lambda p: (p.t_(), tuple(p.shape))[1])(Q @ K.T), Q, K)
    _same(lambda Q, K: (lambda p: (p.unsqueeze_(0), p.dim(), len(p))[1:])(Q @ K.T), Q, K)

    def grads(Q, K):
        p = Q @ K.T
        p.requires_grad_()
        return p.requires_grad
    _same(grads, Q, K)

    def autocast(Q, K):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            p = Q @ K.T
            inside = p.dtype
        return inside, p.dtype, (p + 0).dtype
    assert scorch.compile(autocast)(Q, K) == autocast(Q, K)

    Qg = Q.clone().requires_grad_()

    def inference(Q, K):
        p = Q @ K.T
        with torch.inference_mode():
            p.sum(0) + 0
        return p.requires_grad, p.is_inference()
    assert scorch.compile(inference)(Qg, K) == inference(Qg, K)

    def kept(Q, K):
        d = collections.defaultdict(list)
        d["p"] = Q @ K.T
        return d
    got = scorch.compile(kept)(Q, K)
    assert type(got) is collections.defaultdict and type(got["p"]) is torch.Tensor


def test_unseen_and_seen_in_place_writes():
    Q, K = _dense((5, 3), torch.float32, 51), _dense((4, 3), torch.float32, 52)
    m, M = _mask((5, 4), "csr", torch.float32, 53)

    def relu_inplace(Q, K, M):
        p = M * (Q @ K.T)
        torch.nn.functional.relu(Q, inplace=True)
        return p

    def foreach(Q, K, M):
        p = M * (Q @ K.T)
        torch._foreach_mul_([Q], 2.0)
        return p

    def data_set(Q, K, M):
        p = Q @ K.T
        Q.data = Q.data * 2
        return M * p

    for fn in (relu_inplace, foreach, data_set):
        Qa, Qb = Q.clone(), Q.clone()
        got, want = scorch.compile(fn)(Qa, K, M), fn(Qb, K, M)
        torch.testing.assert_close(got.to_dense(), want.to_dense())
        assert torch.equal(Qa, Qb)


def test_sparse_products_and_refusals_as_eager():
    a, A = _mask((5, 5), "csr", torch.float32, 54)
    X = _dense((5, 3), torch.float32, 55)
    for fn in (lambda A: (A @ A) * 2, lambda A: -(A @ A), lambda A: (A @ A).T,
               lambda A: (A @ A).sum(0), lambda A: (A @ X) * 3, lambda A: (A @ X).sum(1)):
        _same(fn, A)
    v = scorch.to_sparse(torch.tensor([1.0, 0.0, 2.0]), "coo")
    _same(lambda v: torch.dot(v, torch.ones(3)), v)
    for fn in (lambda v: torch.roll(v, 1),):
        with pytest.raises(NotImplementedError):
            fn(v)
        with pytest.raises(NotImplementedError):
            scorch.compile(fn)(v)
    # a batch of products times a 2-D mask: the mask broadcast over the batch, as eager
    got = _same(lambda B: (torch.ones(2, 3, 1) @ torch.ones(2, 1, 3)) * B, A[:3, :3])
    torch.testing.assert_close(got, a[:3, :3].expand(2, 3, 3))


def test_scalars_a_dtype_cannot_hold_are_not_folded():
    Q, K = _dense((5, 3), torch.float64, 56) * 0, _dense((4, 3), torch.float64, 57)
    _, M = _mask((5, 4), "csr", torch.float64, 58, density=1.0)
    _same(lambda Q, K, M: (M * (Q @ K.T) / 1e-310), Q, K, M)
    # float16 scales in float32 (1 / 1e-5 is past its range): not folded.  The fused
    # product rounds once where eager rounds the product and the masked one: 2 ulps.
    h = lambda t: t.to(torch.float16)
    _, Mh = _mask((5, 4), "csr", torch.float16, 58, density=1.0)
    fn = lambda Q, K, M: M * (Q @ K.T) / 1e-5
    got, want = scorch.compile(fn)(h(Q + 1e-3), h(K), Mh), fn(h(Q + 1e-3), h(K), Mh)
    assert got.values().isfinite().all()
    torch.testing.assert_close(got.to_dense(), want.to_dense(), rtol=2e-3, atol=0)


def test_sparse_attributes_and_functions_that_read_tensors_directly():
    Q, K = _dense((5, 3), torch.float32, 59), _dense((4, 3), torch.float32, 60)
    _, M = _mask((5, 4), "csr", torch.float32, 61)

    def attrs(Q, K, M):
        s = M * (Q @ K.T)
        return s.nnz, s.format, s.with_values(s.values().exp()).values().sum()
    got, want = scorch.compile(attrs)(Q, K, M), attrs(Q, K, M)
    assert got[:2] == want[:2]
    torch.testing.assert_close(got[2], want[2])

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            return g * ctx.saved_tensors[0].cos()

    # autograd.Function.apply reads the deferred product without torch's functions: it
    # sees a constant, so backward says nothing requires grad (never a silent None)
    Qg = Q.clone().requires_grad_()
    y = scorch.compile(lambda Q, K: Sin.apply(Q @ K.T))(Qg, K)
    torch.testing.assert_close(y, (Q @ K.T).sin())
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
    y = scorch.compile(lambda Q, K: Sin.apply((Q @ K.T).contiguous()))(Qg, K)
    y.sum().backward()
    torch.testing.assert_close(Qg.grad, ((Q @ K.T).cos()) @ K)


def test_a_product_derived_from_another_is_taken_before_the_other_changes():
    Q, K = _dense((4, 3), torch.float32, 62), _dense((5, 3), torch.float32, 63)
    _, M = _mask((4, 5), "csr", torch.float32, 64)
    D = _dense((4, 5), torch.float32, 65)
    for derive in (lambda p: p * 2, lambda p: p.sum(0), lambda p: -p, lambda p: p * D,
                   lambda p: p.T * 2, lambda p: M * p):
        for change in (lambda p: p.mul_(3), lambda p: p.add_(1), lambda p: p.zero_(),
                       lambda p: p.__setitem__((0, 0), 100.0), lambda p: p[0].add_(5)):
            def fn(Q, K):
                p = Q @ K.T
                s = derive(p)
                change(p)
                return s, p
            got, want = scorch.compile(fn)(Q.clone(), K), fn(Q.clone(), K)
            for g, w in zip(got, want):
                g = g.to_dense() if isinstance(g, scorch.SparseTensor) else g
                w = w.to_dense() if isinstance(w, scorch.SparseTensor) else w
                torch.testing.assert_close(g, w)


def test_masks_formats_scalars_and_products_of_products_as_eager():
    Q, K = _dense((4, 3), torch.float32, 66), _dense((5, 3), torch.float32, 67)
    m = torch.ones(4, 5)
    for fa, fb in (("csr", "csc"), ("coo", "dcsr"), ("csc", "csr")):
        A, B = scorch.to_sparse(m, fa), scorch.to_sparse(m, fb)
        _same(lambda Q, K, A, B: A * (B * (Q @ K.T)), Q, K, A, B)
        _same(lambda Q, K, A, B: (A * (Q @ K.T)) * B, Q, K, A, B)
    Md = scorch.to_sparse(m, "dense")
    _same(lambda Q, K, M: M * (Q @ K.T), Q, K, Md)
    Mh = scorch.to_sparse(m * 0.5, "csr")
    big = lambda Q, K, M: M * (Q @ K.T) * 3e38      # eager overflows less than q·k·s
    got, want = scorch.compile(big)(Q * 2, K, Mh), big(Q * 2, K, Mh)
    assert torch.equal(got.values().isinf(), want.values().isinf())
    with pytest.raises(OverflowError):
        scorch.compile(lambda Q, K, M: M * (Q @ K.T) * 2 ** 70)(Q, K, Mh)
    _same(lambda Q, K, M: M * ((Q @ K.T) * (Q @ K.T)), Q, K, Mh)


def test_a_change_nothing_saw_is_reported_even_after_fusing():
    Q, K = _dense((4, 3), torch.float32, 68), _dense((5, 3), torch.float32, 69)
    _, M = _mask((4, 5), "csr", torch.float32, 70)

    def fn(Q, K, M):
        p = Q @ K.T
        with torch._C.DisableTorchFunction():
            Q.add_(1)
        return M * p

    with pytest.raises(RuntimeError, match="changed in place"):
        scorch.compile(fn)(Q.clone(), K, M)


def test_views_of_views_compute_from_their_root():
    Q, K = _dense((4, 3), torch.float32, 71), _dense((5, 3), torch.float32, 72)
    _, M = _mask((5, 4), "csr", torch.float32, 73)

    def chain(Q, K, M):
        p = Q @ K.T
        for _ in range(401):        # (each view of a view is one of p: no recursion)
            p = p.T
        return p, M * p

    def changed(Q, K, M):
        p = Q @ K.T
        r = p.T.permute(1, 0).T
        p.mul_(2)
        return r, M * r

    for fn in (chain, changed):
        got, want = scorch.compile(fn)(Q.clone(), K, M), fn(Q.clone(), K, M)
        torch.testing.assert_close(got[0], want[0])
        assert got[0].stride() == want[0].stride()
        torch.testing.assert_close(got[1].to_dense(), want[1].to_dense())


def test_a_torch_compiled_function_inside_runs_as_written():
    """A torch.compile'd function called inside scorch.compile: Dynamo traces its torch
    calls, and scorch's mode passes them through (a cached frame of the mode had run the
    next call's op with the last one's: (Q @ K.T) * 2 + 1 came out as p + 3)."""
    Q, K = _dense((4, 3), torch.float32, 1), _dense((5, 3), torch.float32, 2)
    M = _mask((4, 5), "csr", torch.float32, 3)[1]
    g = torch.compile(lambda Q, K: (Q @ K.T) * 2 + 1, backend="eager")
    h = torch.compile(lambda p: p * 3 - 1, backend="eager")
    lin = torch.compile(torch.nn.Linear(3, 3), backend="eager")
    f = scorch.compile(lambda Q, K, M: (g(Q, K), M * h(Q @ K.T), lin(Q) @ K.T))
    want = ((Q @ K.T) * 2 + 1, M * ((Q @ K.T) * 3 - 1), lin(Q) @ K.T)
    for _ in range(3):
        got = f(Q, K, M)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1].to_dense(), want[1].to_dense())
        torch.testing.assert_close(got[2], want[2].detach())
    # one compiled function given a deferred product, then a plain tensor: both right
    # (Dynamo had cached a frame traced with the product that lost the "+ 1")
    k = torch.compile(lambda x: x * 2 + 1, backend="eager")
    on_product, on_plain = scorch.compile(lambda Q: k(Q @ Q.T)), scorch.compile(k)
    for _ in range(2):
        torch.testing.assert_close(on_product(Q), (Q @ Q.T) * 2 + 1)
        torch.testing.assert_close(on_plain(Q), Q * 2 + 1)
        torch.testing.assert_close(k(Q), Q * 2 + 1)


def test_running_statistics_written_inside_are_seen():
    """F.batch_norm (training) writes its running mean and variance, F.instance_norm with
    running statistics too, F.embedding(max_norm=) its weight: a product reading them
    is computed before, as eager computed it (batch_norm's write moves no version)."""
    x = _dense((4, 3), torch.float32, 4) + 5
    W, M = torch.ones(3, 2), _mask((3, 2), "csr", torch.float32, 5)[1]

    def bn(rm, rv):
        p = rm @ W
        q = torch.einsum("i,j->ij", rm, torch.ones(2))
        F.batch_norm(x, rm, rv, training=True)
        return p, M * q

    def inst(rm, rv):
        q = torch.einsum("i,j->ij", rm, torch.ones(2))
        F.instance_norm(x.T[None], rm, rv, use_input_stats=True)
        return M * q

    for fn in (bn, inst):
        eager = fn(torch.zeros(3), torch.ones(3))
        got = scorch.compile(fn)(torch.zeros(3), torch.ones(3))
        for e, c in zip(eager if isinstance(eager, tuple) else (eager,),
                        got if isinstance(got, tuple) else (got,)):
            torch.testing.assert_close(c.to_dense() if isinstance(c, scorch.SparseTensor)
                                       else c, e.to_dense() if
                                       isinstance(e, scorch.SparseTensor) else e)

    def emb(w):
        p = M * (w @ torch.ones(2, 2))[:3]
        F.embedding(torch.tensor([0, 1]), w, max_norm=0.5)
        return p

    w = _dense((4, 2), torch.float32, 6)
    torch.testing.assert_close(scorch.compile(emb)(w.clone()).to_dense(),
                               emb(w.clone()).to_dense())


def test_what_is_returned_is_computed_in_any_container():
    import dataclasses
    import types

    @dataclasses.dataclass(frozen=True)
    class Out:
        scores: torch.Tensor
        n: int = 1

    @dataclasses.dataclass
    class State:
        y: torch.Tensor
        cache: dict = dataclasses.field(init=False)   # (not set: left alone)

    class Pair(tuple):
        pass

    Q, K = _dense((4, 3), torch.float32, 7), _dense((5, 3), torch.float32, 8)
    p = Q @ K.T
    got = scorch.compile(lambda Q, K: (Out(Q @ K.T), types.SimpleNamespace(s=Q @ K.T),
                                       Pair((Q @ K.T, Q)), torch.max(Q @ K.T, 1)))(Q, K)
    out, ns, pair, mx = got
    assert type(out) is Out and type(out.scores) is torch.Tensor and out.n == 1
    assert type(ns.s) is torch.Tensor and type(pair) is Pair and type(pair[0]) is torch.Tensor
    assert type(mx).__name__ == "max" and type(mx.values) is torch.Tensor
    for t in (out.scores, ns.s, pair[0]):
        torch.testing.assert_close(t, p)
    st = scorch.compile(lambda Q, K: State(Q @ K.T))(Q, K)
    assert type(st.y) is torch.Tensor and not hasattr(st, "cache")
    torch.testing.assert_close(mx.values, p.max(1).values)


def test_a_zero_scale_is_not_folded():
    """A product times 0 is computed as written: eager's inf * 0 is nan."""
    Q, K = torch.tensor([[3e38, 3e38]]), torch.tensor([[1., 1.]])
    M = scorch.to_sparse(torch.ones(1, 1), "csr")
    f = lambda Q, K, M: M * (Q @ K.T) * 0   # noqa: E731
    assert torch.isnan(scorch.compile(f)(Q, K, M).values()).all()
    assert torch.isnan(f(Q, K, M).values()).all()
