"""F.scaled_dot_product_attention with a SparseTensor attn_mask: the positions stored
attend, with the stored value added to the score as a float mask is; the positions not
stored take no part (-inf, as torch.sparse.softmax reads them).  Checked against torch's
dense SDPA with that float mask, forward and gradients of query, key, value and mask."""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import scorch

FORMATS_2D = ["csr", "csc", "coo", "dcsr"]


def _sparse(m, fmt):
    if m.dim() > 2 and fmt not in ("coo", "csf"):
        fmt = "d" * (m.dim() - 2) + {"csr": "dc", "csc": "dc", "dcsr": "cc"}[fmt]
    return scorch.to_sparse(m, fmt)


def _dense_mask(M):
    """The float mask torch's SDPA takes for M: its values where stored, else -inf."""
    stored = torch.ones_like(M).to_dense() != 0
    return torch.where(stored, M.to_dense(), -math.inf)


def _mask(shape, dtype, density=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=g) < density
    return torch.where(keep, torch.randn(shape, generator=g, dtype=dtype), 0)


def _compare(q, k, v, M, atol=1e-10, **kw):
    """Forward and every gradient (mask values included when M requires grad)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=M, **kw)
    D = _dense_mask(M.detach()).requires_grad_(M.requires_grad)
    qe, ke, ve = q, k, v
    if not kw.get("enable_gqa"):   # (torch's SDPA does not broadcast the query to a
        batch = torch.broadcast_shapes(*(t.shape[:-2] for t in (q, k, v, D)))  # mask
        qe, ke, ve = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))  # of more dims)
    ref = F.scaled_dot_product_attention(qe, ke, ve, attn_mask=D, **kw)
    assert type(out) is torch.Tensor and out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, atol=atol, rtol=atol)
    if out.numel() == 0:
        return
    g = torch.randn_like(ref)
    ins = (q, k, v) + ((M.values(),) if M.requires_grad else ())
    got = torch.autograd.grad(out, ins, g, allow_unused=True)
    want = torch.autograd.grad(ref, (q, k, v) + ((D,) if M.requires_grad else ()), g,
                               allow_unused=True)
    for a, b in zip(got[:3], want[:3]):
        torch.testing.assert_close(a, b, atol=atol, rtol=atol)
    if M.requires_grad:
        stored = torch.ones_like(M.detach()).to_dense() != 0
        dm = torch.zeros_like(D).masked_scatter(stored, want[3][stored])
        M_grad = M.detach().with_values(got[3]).to_dense()
        torch.testing.assert_close(M_grad.masked_fill(~stored, 0), dm, atol=atol, rtol=atol)


@pytest.mark.parametrize("fmt", FORMATS_2D)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_dense_float_mask(fmt, dtype):
    torch.manual_seed(0)
    L, S, E, Ev = 9, 7, 5, 3
    q, k, v = torch.randn(L, E, dtype=dtype), torch.randn(S, E, dtype=dtype), \
        torch.randn(S, Ev, dtype=dtype)
    m = _mask((L, S), dtype)
    m[4] = 0   # (a row attending nothing: 0, as torch's)
    m[0, 0] = 0.0
    M = _sparse(m, fmt)
    atol = 1e-5 if dtype == torch.float32 else 1e-10
    _compare(q, k, v, M, atol=atol)
    _compare(q, k, v, M.requires_grad_(), atol=atol)


@pytest.mark.parametrize("shapes", [
    ((2, 4, 6, 3), (2, 4, 5, 3), (2, 4, 5, 2), (6, 5)),         # one mask for all heads
    ((2, 4, 6, 3), (2, 4, 5, 3), (2, 4, 5, 2), (4, 6, 5)),      # a mask per head
    ((2, 4, 6, 3), (2, 4, 5, 3), (2, 4, 5, 2), (2, 1, 6, 5)),   # per batch, size-1 heads
    ((2, 4, 6, 3), (1, 4, 5, 3), (2, 1, 5, 2), (1, 6, 5)),      # broadcast q / k / v
    ((6, 3), (5, 3), (5, 2), (3, 6, 5)),                        # batch from the mask only
    ((3, 6, 3), (3, 5, 3), (3, 5, 2), (2, 3, 6, 5)),
])
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_batched_and_broadcast(shapes, fmt):
    torch.manual_seed(1)
    qs, ks, vs, ms = shapes
    q, k, v = (torch.randn(s, dtype=torch.float64) for s in (qs, ks, vs))
    M = _sparse(_mask(ms, torch.float64, seed=2), fmt).requires_grad_()
    _compare(q, k, v, M)


def test_grouped_query_heads_and_scale():
    torch.manual_seed(2)
    q = torch.randn(2, 6, 5, 4, dtype=torch.float64)
    k, v = torch.randn(2, 3, 7, 4, dtype=torch.float64), torch.randn(2, 3, 7, 2, dtype=torch.float64)
    M = _sparse(_mask((5, 7), torch.float64), "csr")
    _compare(q, k, v, M, enable_gqa=True)
    _compare(q, k, v, M, enable_gqa=True, scale=0.3)
    with pytest.raises(RuntimeError, match="enable_gqa"):
        F.scaled_dot_product_attention(q[:, :5], k, v, attn_mask=M, enable_gqa=True)


@pytest.mark.parametrize("value", [1.0, 0.0, -2.5])
def test_a_mask_of_one_value_is_its_pattern(value):
    """A mask of ones (``to_sparse(m.float())``) attends its pattern; so does any one
    finite value, which shifts every score alike (and explicit zeros are stored)."""
    torch.manual_seed(3)
    q, k, v = torch.randn(8, 4), torch.randn(6, 4), torch.randn(6, 3)
    pattern = torch.rand(8, 6) < 0.4
    M = scorch.to_sparse(pattern.float(), "csr")
    M = M.with_values(torch.full_like(M.values(), value))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=M)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=pattern)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    _compare(q, k, v, M.requires_grad_(), atol=1e-5)


def test_rows_of_only_negative_infinity_give_zero_and_finite_gradients():
    """A row whose stored values are all -inf attends nothing: 0, and no nan in any
    gradient (the softmax's -inf - -inf had made every gradient of q and k nan)."""
    torch.manual_seed(8)
    q, k, v = (torch.randn(3, 4, dtype=torch.float64) for _ in range(3))
    ninf = -math.inf
    vals = torch.tensor([0.0, 0.5, 0.0, ninf, ninf, ninf, 0.0, ninf, 1.0], dtype=torch.float64)
    M = scorch.to_sparse(torch.ones(3, 3, dtype=torch.float64), "csr").with_values(vals)
    _compare(q, k, v, M.requires_grad_())
    out = F.scaled_dot_product_attention(q.requires_grad_(), k, v, attn_mask=M.detach())
    out.sum().backward()
    assert out[1].abs().max() == 0 and q.grad.isfinite().all()


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.float64])
def test_a_mask_of_another_float_dtype_is_converted(mask_dtype):
    """torch's SDPA takes a float mask with a bfloat16 query (autocast gives one)."""
    torch.manual_seed(9)
    q, k, v = (torch.randn(2, 5, 4).bfloat16() for _ in range(3))
    allowed = torch.rand(5, 5) < 0.5
    allowed[:, 0] = True
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=scorch.to_sparse(allowed.to(mask_dtype), "csr"))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


def test_duplicates_are_summed_and_negative_infinity_masks():
    torch.manual_seed(4)
    q, k, v = (torch.randn(4, 3, dtype=torch.float64) for _ in range(3))
    M = scorch.from_components(   # (0, 1) twice; rows 1 and 3 all -inf; (2, 3) -inf
        (4, 4), "coo", pos=[torch.tensor([0, 6]), None],
        crd=[torch.tensor([0, 0, 1, 2, 2, 3]), torch.tensor([1, 1, 2, 0, 3, 3])],
        values=torch.tensor([0.5, 0.25, -math.inf, 1.0, -math.inf, -math.inf],
                            dtype=torch.float64))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=M)
    dense = torch.full((4, 4), -math.inf, dtype=torch.float64)
    dense[0, 1], dense[2, 0] = 0.75, 1.0
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    torch.testing.assert_close(out, ref)
    assert out[1].abs().max() == 0 and out[3].abs().max() == 0 and not out.isnan().any()


@pytest.mark.parametrize("L,S", [(0, 4), (4, 0), (0, 0), (1, 1)])
def test_empty_and_one_by_one(L, S):
    q, k, v = torch.randn(L, 3), torch.randn(S, 3), torch.randn(S, 2)
    M = scorch.to_sparse(torch.ones(L, S), "csr")
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=M)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(L, S, dtype=torch.bool))
    assert out.shape == ref.shape == (L, 2)
    torch.testing.assert_close(out, ref.nan_to_num(0.0))


@pytest.mark.parametrize("shape", [(4, 5), (3, 4, 5)])
def test_a_mask_in_an_all_dense_format_attends_everywhere(shape):
    """A mask of format dense stores every position (the SDDMM over it comes back from
    the compiler as a plain tensor, which the softmax refused)."""
    torch.manual_seed(13)
    q, k, v = torch.randn(3, 4, 3), torch.randn(3, 5, 3), torch.randn(3, 5, 2)
    m = torch.randn(shape)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=scorch.to_sparse(m, "dense"))
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=m))


def test_a_size_one_dimension_stored_by_a_sparse_level_keeps_the_pattern():
    """A mask whose size-1 batch dimension a compressed level stores under a dense one:
    dropping it by select kept the dense level, storing (and attending) every place of
    its rows (off by 1.5)."""
    torch.manual_seed(15)
    m2 = torch.tensor([[1., 0, 2], [0, 3, 0], [4, 0, 0], [0, 0, 0], [5, 6, 0]])
    M = scorch.to_sparse(m2.T.unsqueeze(-1).contiguous(), "cdc").permute(2, 1, 0)
    q, k, v = torch.randn(1, 5, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 2)
    _compare(q.double(), k.double(), v.double(), M.double())


def test_nothing_stored_attends_nothing():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    M = scorch.to_sparse(torch.zeros(3, 5), "csr")
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=M)
    assert out.shape == (3, 2) and out.abs().max() == 0


def test_half_types_compute_in_float32():
    torch.manual_seed(5)
    q, k, v = (torch.randn(6, 4, dtype=torch.bfloat16) for _ in range(3))
    M = _sparse(_mask((6, 6), torch.bfloat16, density=0.5), "csr")
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=M)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                         attn_mask=_dense_mask(M).float())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_dropout_drops_attention_weights():
    q, k, v = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 3)
    M = scorch.to_sparse(torch.ones(5, 5), "csr")
    assert F.scaled_dot_product_attention(q, k, v, attn_mask=M, dropout_p=1.0).abs().max() == 0
    torch.manual_seed(6)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=M, dropout_p=0.5)
    torch.manual_seed(6)
    b = F.scaled_dot_product_attention(q, k, v, attn_mask=M, dropout_p=0.5)
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, F.scaled_dot_product_attention(q, k, v, attn_mask=M))


def test_the_callers_mask_is_not_changed():
    m = _mask((5, 5), torch.float32)
    M = scorch.to_sparse(m, "coo")
    before = M.values().clone()
    F.scaled_dot_product_attention(torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3),
                                   attn_mask=M)
    assert torch.equal(M.values(), before) and not M.requires_grad


def test_bad_calls_are_named():
    q, k, v = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5, 2)
    M = scorch.to_sparse(torch.ones(4, 5), "csr")
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=M, is_causal=True)
    with pytest.raises(RuntimeError, match=r"must end in \(L, S\) = \(4, 5\)"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=scorch.to_sparse(torch.ones(5, 4), "csr"))
    with pytest.raises(RuntimeError, match="must be floating"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=M.to(torch.int32))
    with pytest.raises(RuntimeError, match=r"key \(\.\.\., S, E\)"):
        F.scaled_dot_product_attention(q, k[:, :2], v, attn_mask=M)
    with pytest.raises(NotImplementedError, match="only attn_mask may be a SparseTensor"):
        F.scaled_dot_product_attention(M, k, v)


def test_multihead_attention_without_weights():
    """nn.MultiheadAttention(need_weights=False) goes through SDPA and takes the mask."""
    torch.manual_seed(7)
    n, d = 10, 8
    x = torch.randn(3, n, d)
    pattern = (torch.rand(n, n) < 0.3) | torch.eye(n, dtype=torch.bool)
    M = scorch.to_sparse(pattern.float(), "csr")
    mha = torch.nn.MultiheadAttention(d, 2, batch_first=True)
    out, w = mha(x, x, x, attn_mask=M, need_weights=False)
    ref, _ = mha(x, x, x, attn_mask=~pattern, need_weights=False)
    assert w is None
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("average", [True, False])
def test_multihead_attention_with_its_weights(batch_first, padding, average):
    """need_weights=True (torch's default) adds the mask to the scores with baddbmm: for
    a sparse mask, the scores at its entries plus its values (refused before); the
    weights are the dense mean over heads, or a SparseTensor per head; gradients too."""
    torch.manual_seed(14)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    x = torch.randn(2, 4, 8) if batch_first else torch.randn(4, 2, 8)
    x.requires_grad_()
    allowed = torch.rand(4, 4) < 0.6
    allowed[:, 0] = True
    kpm = torch.tensor([[0, 0, 0, 1], [0, 1, 0, 0]], dtype=torch.bool) if padding else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, w = mha(x, x, x, attn_mask=scorch.to_sparse(allowed.float(), "csr"),
                     key_padding_mask=kpm, average_attn_weights=average)
        (out.sum() + w.sum()).backward()
        g = x.grad.clone()
        x.grad = None
        ref, rw = mha(x, x, x, attn_mask=torch.where(allowed, 0.0, -math.inf),
                      key_padding_mask=kpm, average_attn_weights=average)
        (ref.sum() + rw.sum()).backward()
    assert isinstance(w, scorch.SparseTensor) != average
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w.to_dense() if not average else w, rw, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(g, x.grad, atol=1e-5, rtol=1e-5)


def test_transformer_encoder_and_decoder_take_a_sparse_mask():
    """nn.TransformerEncoder / Decoder compare the mask with a causal one (==) to detect
    causality: a sparse mask compares as the dense tensor it stands for, so it is not
    taken for torch's causal mask and is used as given (it raised at aten.eq)."""
    torch.manual_seed(10)
    pattern = torch.ones(6, 6).tril().bool()
    pattern[5, 1] = False
    M = scorch.to_sparse(pattern.float(), "csr")
    dense = torch.where(pattern, 0.0, -math.inf)
    x = torch.randn(2, 6, 16)
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False)
    torch.testing.assert_close(enc(x, mask=M), enc(x, mask=dense), atol=1e-5, rtol=1e-5)
    dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(
        16, 4, 32, dropout=0.0, batch_first=True), 2)
    torch.testing.assert_close(dec(x, x, tgt_mask=M), dec(x, x, tgt_mask=dense),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("L", [1, 4])
@pytest.mark.parametrize("per_head", [False, True])
def test_multihead_attention_with_a_key_padding_mask(L, per_head):
    """attn_mask + key_padding_mask, as torch merges them, keeps the sparse mask's
    entries with the padding's -inf added: the unstored places stay unattended (the
    tensor sum attended them, silently wrong where the shapes agreed, L = 1 with a
    per-head mask; refused elsewhere)."""
    torch.manual_seed(11)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q, kv = torch.randn(2, L, 8), torch.randn(2, 5, 8)
    allowed = torch.rand(L, 5) < 0.6
    allowed[:, 0] = True
    dense = torch.where(allowed, 0.0, -math.inf)
    M = scorch.to_sparse(allowed.float(), "csr")
    if per_head:
        dense = dense.expand(4, L, 5)
        M = scorch.to_sparse(allowed.float().expand(4, L, 5).contiguous(), "csf")
    kpm = torch.tensor([[0, 0, 0, 0, 1], [0, 1, 0, 0, 0]], dtype=torch.bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (torch's: a bool padding mask, a float mask)
        got = mha(q, kv, kv, attn_mask=M, key_padding_mask=kpm, need_weights=False)[0]
        want = mha(q, kv, kv, attn_mask=dense, key_padding_mask=kpm, need_weights=False)[0]
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("padding", [False, True])
def test_encoder_layer_inference_path(norm_first, padding):
    """In eval without grad, nn.TransformerEncoderLayer takes torch's fused path: it
    expands the mask to (batch, heads, L, L), adds the padding mask, and calls one fused
    op, which scorch writes out with the sparse-mask SDPA (each step was refused)."""
    torch.manual_seed(12)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True,
                                             norm_first=norm_first, activation="gelu").eval()
    pattern = torch.ones(6, 6).tril().bool()
    pattern[5, 2] = False
    M = scorch.to_sparse(pattern.float(), "csr")
    dense = torch.where(pattern, 0.0, -math.inf)
    x = torch.randn(2, 6, 16)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[1, 4:] = True
    kpm = kpm if padding else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = layer(x, src_mask=M, src_key_padding_mask=kpm)
        want = layer(x, src_mask=dense, src_key_padding_mask=kpm)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        M3 = scorch.to_sparse(pattern.float().expand(8, 6, 6).contiguous(), "coo")
        torch.testing.assert_close(layer(x, src_mask=M3), layer(x, src_mask=dense.expand(8, 6, 6)),
                                   atol=1e-5, rtol=1e-5)


def test_mask_merging_is_torchs_attention_code_only():
    """The mask merge applies inside torch's attention functions only: a user's function
    of the same name adds as tensors do."""
    A = scorch.to_sparse(torch.tensor([[1., 0], [0, 2.]]), "csr")
    D = torch.tensor([[10., 20], [30, 40]])

    def merge_masks(a, b):
        return a + b
    assert torch.equal(merge_masks(A, D), A.to_dense() + D)


@pytest.mark.parametrize("which", ["out_proj", "in_proj", "both", "separate"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_with_sparse_projection_weights(which, batch_first):
    """Pruned projections of nn.MultiheadAttention (a sparse in_proj_weight, out_proj
    weight, or separate q/k/v weights): self- and cross-attention, the weights and the
    gradients as the dense module's with the same weights (gradients on the pattern); it
    was refused at aten.t inside torch's function, which ran with scorch's handlers off."""
    torch.manual_seed(0)
    kdim = 24 if which == "separate" else None
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first, kdim=kdim, vdim=kdim)
    ref = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first, kdim=kdim, vdim=kdim)
    ref.load_state_dict(mha.state_dict())

    def prune(module, name, fmt):
        w = getattr(module, name).detach()
        s = scorch.to_sparse(w * (w.abs() > 0.1), fmt)
        setattr(module, name, torch.nn.Parameter(s))
        return s.to_dense()

    names = {"out_proj": [], "in_proj": ["in_proj_weight"], "both": ["in_proj_weight"],
             "separate": ["q_proj_weight", "k_proj_weight"]}[which]
    for name in names:
        with torch.no_grad():
            getattr(ref, name).copy_(prune(mha, name, "coo"))
    if which in ("out_proj", "both"):
        with torch.no_grad():
            ref.out_proj.weight.copy_(prune(mha.out_proj, "weight", "csr"))
    q, kv = torch.randn(2, 5, 32), torch.randn(2, 7, kdim or 32)
    if not batch_first:
        q, kv = q.transpose(0, 1), kv.transpose(0, 1)
    calls = [(kv, kv)] if kdim else [(q, q), (kv, kv)]
    for k, v in calls:
        out, w = mha(q, k, v)
        want, want_w = ref(q, k, v)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(w, want_w)
        out.square().sum().backward()
        want.square().sum().backward()
    for name in names:
        g, gd = getattr(mha, name).grad, getattr(ref, name).grad
        torch.testing.assert_close(g.to_dense(), gd * (getattr(mha, name).to_dense() != 0))


def test_transformer_layer_with_a_sparse_in_projection_trains_and_infers():
    """nn.TransformerEncoderLayer whose attention in_proj_weight is sparse: training and
    the eval path (torch's fused path is not taken with a SparseTensor argument) agree."""
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    w = layer.self_attn.in_proj_weight.detach()
    layer.self_attn.in_proj_weight = torch.nn.Parameter(scorch.to_sparse(w * (w.abs() > .1),
                                                                         "csr"))
    x = torch.randn(2, 6, 32)
    y = layer(x)
    y.sum().backward()
    assert layer.self_attn.in_proj_weight.grad.nnz == layer.self_attn.in_proj_weight.nnz
    layer.eval()
    with torch.no_grad():
        torch.testing.assert_close(layer(x), y.detach())
