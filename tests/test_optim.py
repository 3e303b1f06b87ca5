"""torch.optim on a SparseTensor parameter (``nn.Parameter(scorch.to_sparse(w))``): every
optimizer steps the stored values as it steps a dense tensor, restricted to the pattern.

The reference is the same optimizer on the dense tensor whose gradient is masked to the
stored places (an unstored place then never moves): the values agree after several steps,
the pattern (the index arrays) is the same objects, the state is keyed by the parameter
outside the step and round-trips through state_dict / torch.save / load_state_dict."""
import io

import pytest
import torch

import scorch
from conftest import make_dense, seed_of

OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True,
                                      weight_decay=0.01),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.05, weight_decay=0.01),
    "Adam amsgrad": lambda ps: torch.optim.Adam(ps, lr=0.05, amsgrad=True),
    "Adam foreach": lambda ps: torch.optim.Adam(ps, lr=0.05, foreach=True),
    "Adam fused": lambda ps: torch.optim.Adam(ps, lr=0.05, fused=True),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.05),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, initial_accumulator_value=0.1),
    "Adamax": lambda ps: torch.optim.Adamax(ps, lr=0.05),
    "NAdam": lambda ps: torch.optim.NAdam(ps, lr=0.05),
    "RAdam": lambda ps: torch.optim.RAdam(ps, lr=0.05),
    "Adadelta": lambda ps: torch.optim.Adadelta(ps, lr=1.0),
    "LBFGS": lambda ps: torch.optim.LBFGS(ps, lr=0.1, max_iter=3),
}

CASES = [("csr", (7, 5)), ("csc", (7, 5)), ("coo", (7, 5)), ("dcsr", (7, 5)),
         ("cd", (7, 5)), ("dense", (4, 3)), ("csf", (3, 4, 5)), ("coo", (9,))]


def _loss(W, X):
    if W.dim() == 1:
        return (W * X[: W.shape[0], 0]).sin().sum() + (W * W).sum()
    y = torch.einsum("ij,jk->ik", W, X) if W.dim() == 2 else \
        torch.einsum("ijk,kl->ijl", W, X)
    return y.square().sum()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("fmt,shape", CASES, ids=[f"{f}-{len(s)}d" for f, s in CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_steps_as_the_dense_optimizer_on_the_pattern(name, fmt, shape, dtype):
    x = make_dense(shape, dtype, seed_of("optim", name, fmt, len(shape)), "empty_rows")
    X = torch.randn(shape[-1], 3, dtype=dtype, generator=torch.Generator().manual_seed(2))
    A = torch.nn.Parameter(scorch.to_sparse(x, fmt))
    stored = torch.zeros(shape, dtype=torch.bool)
    stored[tuple(A.indices())] = True
    D = torch.nn.Parameter(x.clone())
    arrays = [t for t in A._pos + A._crd if t is not None]
    opt_a, opt_d = OPTIMIZERS[name]([A]), OPTIMIZERS[name]([D])

    def closure_a():
        opt_a.zero_grad()
        loss = _loss(A, X)
        loss.backward()
        return loss

    def closure_d():
        opt_d.zero_grad()
        loss = _loss(D, X)
        loss.backward()
        D.grad *= stored           # (the gradient on the pattern)
        return loss

    for _ in range(4):
        if name == "LBFGS":
            opt_a.step(closure_a)
            opt_d.step(closure_d)
        else:
            closure_a()
            closure_d()
            opt_a.step()
            opt_d.step()
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(A.to_dense().detach(), D.detach(), **tol)
    assert not torch.equal(D.detach(), x)                  # (it moved)
    assert [t for t in A._pos + A._crd if t is not None] == arrays   # (same objects)
    assert opt_a.param_groups[0]["params"][0] is A
    assert all(k is A for k in opt_a.state)


def test_state_is_the_parameters_and_round_trips():
    """The state is keyed by the SparseTensor parameter between steps, its tensors of
    nnz values; state_dict goes through torch.save(weights_only) and loads into a new
    optimizer over a mixed model, whose next step is the first one's."""
    x = make_dense((6, 5), torch.float32, seed_of("optim-state"))
    X = torch.randn(5, 3)
    model = torch.nn.ModuleDict({"lin": torch.nn.Linear(3, 2)})
    model.W = torch.nn.Parameter(scorch.to_sparse(x, "coo"))

    def loss():
        return model.lin(model.W @ X).square().sum()

    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    for _ in range(2):
        opt.zero_grad()
        loss().backward()
        opt.step()
        sched.step()
    assert opt.state[model.W]["exp_avg"].shape == (model.W.nnz,)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    again = torch.optim.AdamW(model.parameters(), lr=0.01)
    again.load_state_dict(saved)
    before = [p.detach().clone() for p in model.parameters()]
    after = []
    for o in (opt, again):
        with torch.no_grad():
            for p, b in zip(model.parameters(), before):
                (p.values() if isinstance(p, scorch.SparseTensor) else p).copy_(
                    b.values() if isinstance(b, scorch.SparseTensor) else b)
        o.zero_grad()
        loss().backward()
        o.step()
        after.append(model.W.values().detach().clone())
    torch.testing.assert_close(after[1], after[0], rtol=0, atol=0)
    assert not torch.equal(after[0], before[0].values())
    assert int(again.state[model.W]["step"]) == 3


def test_a_failing_step_leaves_a_working_optimizer():
    """A closure that raises leaves the values in the group (the post-hook does not run);
    the next step runs and puts the parameter back."""
    A = torch.nn.Parameter(scorch.to_sparse(torch.eye(3), "csr"))
    opt = torch.optim.Adam([A], lr=0.1)

    def boom():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        opt.step(boom)
    (A @ torch.ones(3, 2)).sum().backward()
    opt.step()
    assert opt.param_groups[0]["params"][0] is A
    torch.testing.assert_close(A.to_dense(), torch.eye(3) * 0.9)


def test_two_parameters_sharing_values_are_refused():
    A = torch.nn.Parameter(scorch.to_sparse(torch.eye(3), "csr"))
    (A @ torch.ones(3, 2)).sum().backward()
    opt = torch.optim.SGD([A, A.t()], lr=0.1)
    with pytest.raises(RuntimeError, match="share one values tensor"):
        opt.step()
    assert torch.equal(A.to_dense(), torch.eye(3))
    assert opt.param_groups[0]["params"][0] is A


def test_state_follows_the_coordinates_when_the_pattern_changes():
    """Pruning again (copy_ of another pattern, as load_state_dict does) between steps:
    each state entry follows its coordinate, a new entry starts at 0; the momentum built
    at (1, 1) had been applied at (1, 2), which had no gradient."""
    W1 = torch.tensor([[1., 0, 0], [0, 1, 0]])
    layer = torch.nn.Linear(3, 2, bias=False)
    layer.weight = torch.nn.Parameter(scorch.to_sparse(W1, "csr"))
    D = torch.nn.Parameter(W1.clone())
    opt, opt_d = (torch.optim.SGD([w], lr=1., momentum=1.) for w in (layer.weight, D))
    for W, x in ((None, [[0., 5, 0]]), (torch.tensor([[1., 0, 0], [0, 0, 1]]), [[0., 0, 0]]),
                 (torch.tensor([[1., 2, 0], [3, 0, 1]]), [[1., 1, 1]])):
        if W is not None:
            with torch.no_grad():
                layer.weight.copy_(W)
                D.copy_(W)
        for o, w in ((opt, layer.weight), (opt_d, D)):
            o.zero_grad()
            (torch.tensor(x) @ w.t()).sum().backward()
        D.grad *= layer.weight.to_dense() != 0
        opt.step()
        opt_d.step()
        # (the dense reference keeps momentum at the places the pattern dropped)
        torch.testing.assert_close(layer.weight.to_dense().detach(),
                                   D.detach() * (layer.weight.to_dense() != 0))
    assert opt.state[layer.weight]["momentum_buffer"].shape == (4,)


def test_lbfgs_state_over_several_parameters_is_left_as_it_is():
    """LBFGS keeps one state for all its parameters (flat vectors of their total size)
    under the first: it is not read per entry, even where its length is the first
    parameter's numel."""
    A = torch.nn.Parameter(scorch.to_sparse(torch.tensor([1., 0, 2, 0, 0, 3, 0, 0, 4]), "coo"))
    b = torch.nn.Parameter(torch.linspace(-1, 1, 5))
    Ad, bd = torch.nn.Parameter(A.to_dense().detach().clone()), torch.nn.Parameter(b.detach().clone())
    opts = [torch.optim.LBFGS(ps, max_iter=2) for ps in ([A, b], [Ad, bd])]
    stored = A.to_dense() != 0

    def closure(o, x, y):
        def run():
            o.zero_grad()
            loss = (x * x).sum() + (y * y).sum()
            loss.backward()
            if x is Ad:
                x.grad *= stored
            return loss
        return run

    for _ in range(3):
        opts[0].step(closure(opts[0], A, b))
        opts[1].step(closure(opts[1], Ad, bd))
    torch.testing.assert_close(A.to_dense().detach(), Ad.detach())


def test_a_leftover_swap_is_undone_before_the_next_step():
    A, B = (torch.nn.Parameter(scorch.to_sparse(torch.eye(3), "csr")) for _ in range(2))
    opt = torch.optim.Adam([A], lr=0.1)
    with pytest.raises(ZeroDivisionError):
        opt.step(lambda: 1 / 0)
    opt.add_param_group({"params": [B]})
    ((A + B) @ torch.ones(3, 2)).sum().backward()
    opt.step()
    assert all(g["params"][0] is p for g, p in zip(opt.param_groups, (A, B)))
    assert all(k is A or k is B for k in opt.state)


def test_repeated_coordinates_are_refused():
    """A coo parameter storing one place twice would have each copy stepped as a place
    (SGD moves the sum twice as far as dense): refused, naming coalesce."""
    S = scorch.from_components((2, 3), "coo", pos=[torch.tensor([0, 2]), None],
                               crd=[torch.tensor([0, 0]), torch.tensor([1, 1])],
                               values=torch.tensor([1., 2.]))
    A = torch.nn.Parameter(S)
    (A * torch.ones(2, 3)).sum().backward()
    with pytest.raises(RuntimeError, match=r"repeated coordinates.*coalesce"):
        torch.optim.SGD([A], lr=0.1).step()
    assert torch.equal(A.values().detach(), torch.tensor([1., 2.]))
    C = torch.nn.Parameter(S.coalesce())
    (C * torch.ones(2, 3)).sum().backward()
    torch.optim.SGD([C], lr=0.1).step()
    assert torch.equal(C.to_dense().detach(), torch.tensor([[0., 2.9, 0], [0, 0, 0]]))


@pytest.mark.skipif(not hasattr(torch.optim, "Adafactor"), reason="no Adafactor")
def test_an_optimizer_that_reads_the_shape_steps_the_sparse_tensor():
    """Adafactor factors its moments over a matrix's rows and columns: not elementwise,
    so it is not handed the values (its step would differ from dense); it meets the
    SparseTensor and is refused by name."""
    A = torch.nn.Parameter(scorch.to_sparse(torch.eye(3), "csr"))
    (A @ torch.ones(3, 2)).sum().backward()
    with pytest.raises(NotImplementedError, match="SparseTensor"):
        torch.optim.Adafactor([A]).step()
    assert torch.equal(A.to_dense().detach(), torch.eye(3))


def _model(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 3))
    w = torch.randn(3, 5) * (torch.rand(3, 5) < 0.5)
    m[1].weight = torch.nn.Parameter(scorch.to_sparse(w, "csr"))
    d = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 3))
    d.load_state_dict({k: v.to_dense() if isinstance(v, scorch.SparseTensor) else v
                       for k, v in m.state_dict().items()})
    return m, d


def test_foreach_paths_as_the_single_tensor_ones():
    """The foreach forms (an EMA's _foreach_lerp_, clip_grad_norm_ / clip_grad_value_
    with foreach=True, zero_grad through _foreach_zero_) take a SparseTensor as their
    single-tensor ops do: the same numbers as the dense model's on the pattern."""
    m, d = _model(0)
    stored = m[1].weight.to_dense() != 0
    avg = torch.optim.swa_utils.get_ema_multi_avg_fn(0.9)
    ema_m = torch.optim.swa_utils.AveragedModel(m, multi_avg_fn=avg)
    ema_d = torch.optim.swa_utils.AveragedModel(d, multi_avg_fn=avg)
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    for net in (m, d):
        net(x).square().sum().backward()
    d[1].weight.grad *= stored
    norms = [torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5, foreach=True)
             for net in (m, d)]
    torch.testing.assert_close(norms[0], norms[1])
    for net in (m, d):
        torch.nn.utils.clip_grad_value_(net.parameters(), 0.01, foreach=True)
    torch.testing.assert_close(m[1].weight.grad.to_dense(), d[1].weight.grad)
    for net, ema in ((m, ema_m), (d, ema_d)):
        with torch.no_grad():
            net[1].weight.mul_(2)
        ema.update_parameters(net)
        ema.update_parameters(net)
    torch.testing.assert_close(ema_m.module[1].weight.to_dense(), ema_d.module[1].weight)
    opt = torch.optim.Adam(m.parameters(), foreach=True)
    opt.zero_grad(set_to_none=False)
    assert m[1].weight.grad.nnz == m[1].weight.nnz and not m[1].weight.grad.values().any()


def test_lerp_of_sparse_tensors():
    x = torch.tensor([[1., 0, 2], [0, 0, 3]])
    y = torch.tensor([[0., 4, 2], [0, 0, -1]])
    A, B = scorch.to_sparse(x, "csr"), scorch.to_sparse(y, "coo")
    torch.testing.assert_close(torch.lerp(A, B, 0.25).to_dense(), torch.lerp(x, y, 0.25))
    C = scorch.to_sparse(x * 3, "csr")
    A.lerp_(C, 0.5)           # (same entries: in place)
    torch.testing.assert_close(A.to_dense(), x * 2)
    with pytest.raises(NotImplementedError, match="lerp_"):
        A.lerp_(B, 0.5)       # (other entries)
    with pytest.raises(NotImplementedError, match="torch.lerp"):
        torch.lerp(A, y, 0.5)
    with pytest.raises(NotImplementedError, match="exp_"):
        torch._foreach_exp_([A])


def test_foreach_checks_and_refusals_as_torch():
    """The foreach router repeats torch's list checks (unequal lengths, an empty list),
    hands addcmul / addcdiv's scalars to each call as its value (a refusal then names
    the op), and writes the SparseTensors of an in-place op first, so that a refusal
    leaves the dense tensors of the list unwritten."""
    A = scorch.to_sparse(torch.tensor([[0., 1.], [2., 0.]]), "csr")
    d = torch.ones(3)
    with pytest.raises(RuntimeError, match="same number of tensors, got 1 and 2"):
        torch._foreach_add([A], [A, d])
    with pytest.raises(RuntimeError, match="same number of tensors, got 1 and 0"):
        torch._foreach_add([A], [])
    with pytest.raises(NotImplementedError, match="addcmul_"):
        torch._foreach_addcmul_([A.clone()], [A], [A], [0.5])
    with pytest.raises(NotImplementedError, match="add_"):
        torch._foreach_add_([d, A], 1.0)
    assert torch.equal(d, torch.ones(3))
    assert torch.equal(torch._foreach_mul([d, A], [2.0, 3.0])[1].to_dense(), 3 * A.to_dense())


def test_a_state_loaded_for_another_pattern_is_refused_clearly():
    x = torch.tensor([[1., 0, 2], [0, 3, 0]])
    A = torch.nn.Parameter(scorch.to_sparse(x, "csr"))
    opt = torch.optim.Adam([A])
    (A @ torch.ones(3, 1)).sum().backward()
    opt.step()
    saved = opt.state_dict()
    B = torch.nn.Parameter(scorch.to_sparse(torch.ones(2, 3), "csr"))
    (B @ torch.ones(3, 1)).sum().backward()
    other = torch.optim.Adam([B])
    other.load_state_dict(saved)
    with pytest.raises(RuntimeError, match=r"holds \(3,\) values where the parameter stores 6"):
        other.step()
    other.state.clear()               # (starting again; the next step puts B back)
    other.step()
    assert other.param_groups[0]["params"][0] is B
    assert not torch.equal(B.values().detach(), torch.ones(6))


def test_more_refusals_leave_the_optimizer_as_it_was():
    """A state of another pattern is refused with the parameter back in its group;
    SparseAdam is refused naming Adam; foreach's scalar-first and scalars= forms reach
    the op's own refusal."""
    A = torch.nn.Parameter(scorch.to_sparse(torch.tensor([[1., 0, 2], [0, 3, 0]]), "csr"))
    opt = torch.optim.Adam([A])
    (A @ torch.ones(3, 1)).sum().backward()
    opt.step()
    B = torch.nn.Parameter(scorch.to_sparse(torch.ones(2, 3), "csr"))
    (B @ torch.ones(3, 1)).sum().backward()
    other = torch.optim.Adam([B])
    other.load_state_dict(opt.state_dict())
    with pytest.raises(RuntimeError, match="another pattern"):
        other.step()
    assert other.param_groups[0]["params"][0] is B and B in other.state
    with pytest.raises(RuntimeError, match="SparseAdam.*torch.optim.Adam"):
        torch.optim.SparseAdam([B]).step()
    S = scorch.to_sparse(torch.tensor([[0., 1.], [2., 0.]]), "csr")
    with pytest.raises(NotImplementedError, match="torch.pow"):
        torch._foreach_pow(2.0, [S])
    with pytest.raises(NotImplementedError, match="addcmul"):
        torch._foreach_addcmul([S], [S], [S], scalars=[0.5])


def test_a_checkpoint_between_a_prune_and_the_next_step_resumes_exactly():
    """state_dict() taken after the weight is pruned again (before the next step) holds
    the state on the new pattern, so a resumed run matches the uninterrupted one (the
    new entry had inherited a removed one's momentum, the patterns having equal nnz)."""
    P1 = torch.tensor([[1., 0.], [2., 3.]])
    P2 = torch.tensor([[1., 4.], [0., 3.]])
    G = torch.arange(1., 5.).view(2, 2)

    def step(W, o):
        o.zero_grad()
        (W * G).sum().backward()
        o.step()

    W = torch.nn.Parameter(scorch.to_sparse(P1, "csr"))
    opt = torch.optim.Adam([W], 0.1)
    step(W, opt)
    with torch.no_grad():
        W.copy_(scorch.to_sparse(P2, "csr"))
    saved = io.BytesIO()
    torch.save(opt.state_dict(), saved)
    saved.seek(0)
    W2 = torch.nn.Parameter(scorch.to_sparse(P2, "csr"))
    opt2 = torch.optim.Adam([W2], 0.1)
    opt2.load_state_dict(torch.load(saved, weights_only=True))
    step(W, opt)
    step(W2, opt2)
    torch.testing.assert_close(W2.to_dense(), W.to_dense(), rtol=0, atol=0)
    torch.testing.assert_close(opt2.state[W2]["exp_avg"], opt.state[W]["exp_avg"])
