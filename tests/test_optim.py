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
