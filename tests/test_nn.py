"""scorch.nn.SparseLinear: shapes, pattern, density, forward against the dense layer,
magnitude pruning from an nn.Linear, training with SGD and Adam (the loss decreases and
the pattern never changes), state_dict round trip, bad arguments."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import scorch
from scorch.nn import SparseLinear


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_shape_pattern_and_forward():
    layer = SparseLinear(20, 12, density=0.25, generator=gen(1))
    W = layer.weight
    assert isinstance(W, scorch.SparseTensor) and W.format.name == "csr"
    assert W.shape == (12, 20) and W.nnz == 60 and layer.density == pytest.approx(0.25)
    assert W.values() is layer.values
    x = torch.randn(5, 20, generator=gen(2))
    y = layer(x)
    assert type(y) is torch.Tensor and y.shape == (5, 12)
    torch.testing.assert_close(y, F.linear(x, W.to_dense(), layer.bias))
    x3 = torch.randn(2, 3, 20, generator=gen(3))
    torch.testing.assert_close(layer(x3), F.linear(x3, W.detach().to_dense(), layer.bias))
    assert "density=0.25" in repr(layer)
    assert SparseLinear(4, 3, bias=False).bias is None


def test_parameters_are_values_and_bias():
    layer = SparseLinear(8, 6, density=0.5)
    names = {n for n, _ in layer.named_parameters()}
    assert names == {"values", "bias"}
    assert {n for n, _ in layer.named_buffers()} == {"row_ptr", "col_idx"}


def test_from_dense_keeps_largest_magnitudes():
    torch.manual_seed(0)
    lin = nn.Linear(10, 7)
    before = lin.weight.detach().clone()
    layer = SparseLinear.from_dense(lin, density=0.3)
    assert torch.equal(lin.weight.detach(), before)            # not modified
    W = layer.weight.detach().to_dense()
    k = layer.values.numel()
    assert k == 21
    kept = W != 0
    thresh = before.abs().reshape(-1).topk(k).values.min()
    assert (before.abs()[kept] >= thresh).all()
    torch.testing.assert_close(W[kept], before[kept])
    torch.testing.assert_close(layer.bias, lin.bias)
    full = SparseLinear.from_dense(lin, density=1.0)
    x = torch.randn(4, 10)
    torch.testing.assert_close(full(x), lin(x))


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_trains_and_keeps_its_pattern(opt):
    torch.manual_seed(0)
    layer = SparseLinear(16, 4, density=0.3, generator=gen(5))
    pos0, crd0 = layer.row_ptr.clone(), layer.col_idx.clone()
    x = torch.randn(64, 16)
    target = torch.randn(64, 4)
    o = (torch.optim.SGD(layer.parameters(), lr=0.1) if opt == "sgd"
         else torch.optim.Adam(layer.parameters(), lr=0.05))
    losses = []
    for _ in range(30):
        o.zero_grad()
        loss = F.mse_loss(layer(x), target)
        loss.backward()
        assert layer.values.grad is not None and layer.values.grad.shape == (layer.values.numel(),)
        o.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    assert torch.equal(layer.row_ptr, pos0) and torch.equal(layer.col_idx, crd0)
    assert layer.weight.nnz == pos0[-1]


def test_in_a_model_with_double_dtype_and_state_dict():
    torch.manual_seed(1)
    model = nn.Sequential(SparseLinear(12, 8, density=0.4), nn.ReLU(),
                          SparseLinear(8, 3, density=0.5)).double()
    x = torch.randn(5, 12, dtype=torch.float64)
    y = model(x)
    assert y.dtype == torch.float64
    y.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    clone = nn.Sequential(SparseLinear(12, 8, density=0.4), nn.ReLU(),
                          SparseLinear(8, 3, density=0.5)).double()
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone(x), y.detach())


def test_input_gradient_after_loading_another_pattern():
    """load_state_dict writes the index buffers in place: the transposed copy a backward
    kept for the old pattern must not serve the new one."""
    a = SparseLinear(30, 20, density=0.3, generator=gen(1))
    b = SparseLinear(30, 20, density=0.3, generator=gen(2))   # same nnz, other pattern
    x = torch.randn(8, 30, requires_grad=True, generator=gen(3))
    a(x).sum().backward()
    a.load_state_dict(b.state_dict())
    x.grad = None
    a(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(8, 20) @ b.weight.detach().to_dense())


def test_large_sparse_layer_is_built_in_its_stored_size():
    """10^10 weights at density 10^-5: the pattern is drawn without a permutation of all
    of them (80 GB), distinct and sorted."""
    layer = SparseLinear(100_000, 100_000, density=1e-5, bias=False, generator=gen(4))
    W = layer.weight
    assert W.nnz == 100_000 and layer.values.numel() == 100_000
    rows = torch.repeat_interleave(torch.arange(100_000), W._pos[1].diff().long())
    keys = rows * 100_000 + W._crd[1].long()
    assert bool((keys.diff() > 0).all())                    # distinct, in order
    assert 0.3 < float(keys.float().mean()) / 1e10 < 0.7    # spread over the layer


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(in_features=4, out_features=3, density=-0.1), ValueError, "density"),
    (dict(in_features=4, out_features=3, density=1.5), ValueError, "density"),
    (dict(in_features=-1, out_features=3), ValueError, "negative"),
])
def test_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        SparseLinear(**kwargs)


def test_built_on_the_cpu_only():
    with torch.device("meta"):
        with pytest.raises(ValueError, match="default device is meta"):
            SparseLinear(6, 4)


def test_from_dense_needs_a_linear():
    with pytest.raises(TypeError, match="nn.Linear"):
        SparseLinear.from_dense(nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="density"):
        SparseLinear.from_dense(nn.Linear(3, 2), density=2.0)


@pytest.mark.parametrize("shape,density", [((0, 3), 0.5), ((3, 0), 0.5), ((6, 4), 0.0)])
def test_empty_layers_as_nn_linear(shape, density):
    """No weights at all (density 0: a layer a global pruning emptied; or no inputs or no
    outputs, as nn.Linear allows): the output is the bias; from_dense too."""
    lin = nn.Linear(*shape)
    for layer in (SparseLinear(*shape, density=density), SparseLinear.from_dense(lin, density)):
        assert layer.values.numel() == 0 and layer.weight.nnz == 0
        x = torch.randn(5, shape[0], requires_grad=True)
        y = layer(x)
        torch.testing.assert_close(y, layer.bias.detach().expand(5, shape[1]))
        y.sum().backward()
        torch.testing.assert_close(x.grad, torch.zeros(5, shape[0]))
        torch.testing.assert_close(layer.bias.grad, torch.full((shape[1],), 5.0))


def test_loads_a_checkpoint_of_another_density():
    """A checkpoint's pattern of another size loads into a layer of the same shape (the
    layer takes arrays of its size, as a SparseTensor parameter takes the loaded ones);
    weights_only torch.load too.  Another shape is refused by name."""
    import io
    dense = SparseLinear(12, 7, density=0.8, generator=gen(5))
    x = torch.randn(4, 12, generator=gen(6))
    for density in (0.1, 0.0, 1.0):
        layer = SparseLinear(12, 7, density=density, generator=gen(7))
        buf = io.BytesIO()
        torch.save(dense.state_dict(), buf)
        buf.seek(0)
        layer.load_state_dict(torch.load(buf, weights_only=True))
        assert layer.values.numel() == dense.values.numel()
        assert isinstance(layer.values, nn.Parameter) and layer.values.requires_grad
        torch.testing.assert_close(layer(x), dense(x))
        layer(x).sum().backward()
        assert layer.values.grad.shape == layer.values.shape
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        SparseLinear(12, 8, density=0.8).load_state_dict(dense.state_dict())


def test_another_density_keeps_the_optimizers_parameter_and_refuses_bad_patterns():
    """The load resizes `values` in place: an optimizer built before it steps the loaded
    weights.  A bad pattern of another size is an error that leaves the layer as it was
    (it was left with arrays of the bad one)."""
    layer = SparseLinear(16, 8, density=0.1, generator=gen(8))
    opt = torch.optim.SGD(layer.parameters(), lr=1.0)
    values = layer.values
    layer.load_state_dict(SparseLinear(16, 8, density=0.3, generator=gen(9)).state_dict())
    assert layer.values is values and values.numel() == SparseLinear(16, 8, 0.3).values.numel()
    before = values.detach().clone()
    layer(torch.randn(4, 16, generator=gen(10))).sum().backward()
    opt.step()
    assert not torch.equal(before, layer.values.detach())
    x = torch.randn(3, 16, generator=gen(11))
    want = layer(x).detach()
    bad = SparseLinear(16, 8, density=0.6, generator=gen(12)).state_dict()
    bad["col_idx"] = bad["col_idx"].clone()
    bad["col_idx"][0] = 1000
    with pytest.raises(RuntimeError, match="not one of a 8 x 16 weight"):
        layer.load_state_dict(bad)
    torch.testing.assert_close(layer(x), want)


def test_weight_copy_writes_the_values_or_refuses_another_pattern():
    a = SparseLinear(6, 4, density=0.5, generator=gen(1))
    b = SparseLinear(6, 4, density=0.5, generator=gen(2))
    W = a.weight.detach().to_dense()
    with torch.no_grad():
        a.weight.copy_(scorch.to_sparse(2 * W, "csr"))          # same pattern: in place
    torch.testing.assert_close(a.weight.detach().to_dense(), 2 * W)
    with torch.no_grad(), pytest.raises(RuntimeError, match="row_ptr / col_idx"):
        a.weight.copy_(b.weight.detach())
    torch.testing.assert_close(a.weight.detach().to_dense(), 2 * W)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "cd", "dense"])
def test_embedding_with_a_sparse_weight(fmt):
    """F.embedding / nn.Embedding over a pruned table (a tied LM head's weight): the rows
    as dense F.embedding's, for indices of any shape (empty, 0-D), padding_idx (its rows
    pass no gradient, negative counted from the end), the gradient on the pattern; bad
    indices raise torch's errors, max_norm is refused."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn(6, 4, generator=g) * (torch.rand(6, 4, generator=g) < .5)
    W = scorch.to_sparse(w, fmt).requires_grad_()
    D = w.clone().requires_grad_()
    for idx, pad in [(torch.tensor([[0, 2], [5, 5]]), None), (torch.tensor([1, 3, 3, 0]), 3),
                     (torch.tensor([], dtype=torch.int64), None), (torch.tensor(2), -1),
                     (torch.tensor([4, 5], dtype=torch.int32), -2)]:
        out, ref = F.embedding(idx, W, padding_idx=pad), F.embedding(idx, D, padding_idx=pad)
        assert out.shape == ref.shape and torch.equal(out, ref)
        G = torch.randn(ref.shape, generator=g)
        (out * G).sum().backward()
        (ref * G).sum().backward()
    stored = torch.zeros(6, 4, dtype=torch.bool)
    stored[tuple(W.indices())] = True
    torch.testing.assert_close(W.grad.to_dense(), D.grad * stored)
    emb = torch.nn.Embedding(6, 4)
    emb.weight = torch.nn.Parameter(scorch.to_sparse(w, fmt))
    assert torch.equal(emb(torch.tensor([1, 2])), w[[1, 2]])
    for bad, err in ((torch.tensor([6]), IndexError), (torch.tensor([-1]), IndexError),
                     (torch.tensor([0.5]), RuntimeError)):
        with pytest.raises(err):
            F.embedding(bad, W)
    with pytest.raises(NotImplementedError, match="max_norm"):
        F.embedding(torch.tensor([0]), W, max_norm=1.0)


def test_embedding_padding_idx_out_of_range_as_torch():
    W = scorch.to_sparse(torch.eye(6, 4), "csr")
    for pad in (6, -7):
        with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
            F.embedding(torch.tensor([0]), W, padding_idx=pad)
