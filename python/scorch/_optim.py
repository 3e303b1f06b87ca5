"""torch.optim on a SparseTensor parameter: an elementwise optimizer steps its stored values.

``nn.Parameter(scorch.to_sparse(w))`` is a SparseTensor leaf whose values tensor carries
the gradient (``A.grad`` is that gradient on A's pattern).  An optimizer's step on the
SparseTensor itself would run its update rule on the sparse tensor: Adam's state starts
as ``zeros_like(p)``, which stores nothing, and its ``denom.add_(eps)`` would have to store
every place.  Instead, a global step pre-hook hands the optimizer each such parameter's
values tensor (a dense 1-D leaf whose ``.grad`` is the gradient's values), in place of
the parameter in its group, with the parameter's state; the post-hook puts the parameter
back.  The step then is the optimizer's own dense update of the stored values, which for
an optimizer that updates each element from that element's history (and global norms)
is exactly the dense optimizer on the dense tensor with the gradient masked to the
pattern (an unstored place has gradient 0 and stays 0).  Optimizers that read the
parameter's shape (Adafactor's factored moments, Muon's orthogonalisation) are not
elementwise, and neither is a third party's unknown one: those step the SparseTensor
itself, as before (in-place ops that keep its entries, others refused by name).

The state is one value per stored entry.  Where the parameter's pattern changes between
steps (``copy_`` / ``load_state_dict`` of another pattern: pruning again), each state
tensor follows the coordinates: an entry kept keeps its state, a new one starts at 0.
"""
import weakref

import torch

from ._tensor import SparseTensor, _ops

# torch.optim's optimizers whose update is elementwise (with global norms or scalars)
_ELEMENTWISE = tuple(getattr(torch.optim, n) for n in (
    "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta",
    "ASGD", "Rprop", "LBFGS") if hasattr(torch.optim, n))

# optimizer -> {id(values): the SparseTensor parameter} while its step runs
_SWAPPED = weakref.WeakKeyDictionary()
# optimizer -> {id(parameter): (its state dict, in values form, and the pattern it is of)}
_STATES = weakref.WeakKeyDictionary()


def _pattern(p):
    return p._shape, p._format, list(p._pos), list(p._crd), p.nnz


def _same_pattern(rec, p):
    shape, fmt, pos, crd, _ = rec
    return shape == p._shape and fmt == p._format and all(
        x is y for x, y in zip(pos + crd, p._pos + p._crd))


def _values_in_place(optimizer, args, kwargs):
    _parameters_back(optimizer, args, kwargs)   # (what a step that raised left swapped)
    if not isinstance(optimizer, _ELEMENTWISE):
        if isinstance(optimizer, torch.optim.SparseAdam) and any(
                isinstance(p, SparseTensor) for g in optimizer.param_groups
                for p in g["params"]):
            raise RuntimeError(
                "SparseAdam: a SparseTensor parameter's gradient is its values, one per "
                "stored entry, which Adam steps as SparseAdam would (torch.optim.Adam)")
        return
    found = [(group["params"], k, p) for group in optimizer.param_groups
             for k, p in enumerate(group["params"]) if isinstance(p, SparseTensor)]
    if not found:
        return
    swapped = {}
    name = type(optimizer).__name__
    for _, _, p in found:
        if id(p._vals) in swapped:
            raise RuntimeError(
                f"{name}: two SparseTensor parameters share one values tensor (one is a "
                f"view of the other, as A and A.t()); optimize one of them")
        if p.grad is not None and _ops().has_duplicates(p):
            raise RuntimeError(
                f"{name}: a SparseTensor parameter of shape {tuple(p.shape)} stores "
                f"repeated coordinates, each of which would be stepped as a place of its "
                f"own; make it the parameter after A.coalesce()")
        swapped[id(p._vals)] = p
    states = _states_of(optimizer)
    per_entry = not isinstance(optimizer, torch.optim.LBFGS)   # (LBFGS's state is global)
    _SWAPPED[optimizer] = swapped       # (first: what is swapped below goes back)
    for params, k, p in found:
        v = p._vals
        params[k] = v     # (in place: LBFGS keeps this list as its own)
        st = optimizer.state.pop(p, None)
        if st is None:
            continue
        optimizer.state[v] = st
        if not per_entry:
            continue
        rec = states.get(id(p))
        if rec is None or rec[0] is not st:   # (made at construction, or loaded)
            for key, x in st.items():
                st[key] = _at_stored(x, p)
        else:
            _follow(st, rec, p)
        bad = next((key for key, x in st.items() if isinstance(x, torch.Tensor) and
                    x.dim() and x.shape != v.shape), None)
        if bad is not None:
            _parameters_back(optimizer, args, kwargs)
            raise RuntimeError(
                f"{name}: the state {bad!r} of a SparseTensor parameter holds "
                f"{tuple(st[bad].shape)} values where the parameter stores {v.numel()} "
                f"(a state loaded for another pattern); load the state saved with this "
                f"pattern, or start the optimizer again")


def _states_of(optimizer):
    """The optimizer's records of the states kept in values form (made at its first
    step, with state_dict's pre-hook that moves them after a prune)."""
    states = _STATES.get(optimizer)
    if states is None:
        states = _STATES[optimizer] = {}
        optimizer.register_state_dict_pre_hook(_states_followed)
    return states


def _follow(st, rec, p):
    """A state dict in values form, kept for the pattern rec[1], moved onto p's pattern
    where p stores another one now (each entry's state to its coordinate)."""
    if not _same_pattern(rec[1], p):
        for key, x in st.items():
            st[key] = _followed(x, rec[1], p)
        rec[1] = _pattern(p)


def _states_followed(optimizer):
    """state_dict's pre-hook: the states of parameters pruned again since the last step
    follow their coordinates now, so that a checkpoint taken between the prune and the
    next step holds them on the pattern saved with the model."""
    if isinstance(optimizer, torch.optim.LBFGS):
        return
    states = _STATES.get(optimizer, {})
    for group in optimizer.param_groups:
        for p in group["params"]:
            rec = states.get(id(p)) if isinstance(p, SparseTensor) else None
            if rec is not None and optimizer.state.get(p) is rec[0]:
                _follow(rec[0], rec, p)


def _at_stored(x, p):
    """A state entry made outside a step (Adagrad's ``full_like(p, init)`` at construction,
    a dense optimizer's state loaded) as the values tensor's: its values at p's stored
    entries; entries of another shape (the step count, a state already per entry) as
    they are."""
    if not isinstance(x, torch.Tensor) or x.shape != p.shape or (
            type(x) is not SparseTensor and x.shape == p._vals.shape):
        return x      # (the last: a 1-D p storing every place, a state already per entry)
    return _ops().align_values(x.detach(), p).to(p._vals.dtype, copy=True)


def _followed(x, old, p):
    """A state tensor of one value per entry of the pattern ``old`` on p's pattern: the
    value of each entry p still stores, 0 for the new ones."""
    shape, fmt, pos, crd, nnz = old
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.shape[0] != nnz:
        return x
    return _ops().align_values(SparseTensor(shape, fmt, pos, crd, x, checked=True), p)


def _parameters_back(optimizer, args, kwargs):
    swapped = _SWAPPED.pop(optimizer, None)
    if not swapped:
        return
    states = _states_of(optimizer)
    for group in optimizer.param_groups:
        params = group["params"]
        for k, v in enumerate(params):
            p = swapped.get(id(v))
            if p is not None:
                params[k] = p
                st = optimizer.state.pop(v, None)
                if st is not None:
                    optimizer.state[p] = st
                    states[id(p)] = [st, _pattern(p)]


def install():
    """Register the hooks (once, at import)."""
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    register_optimizer_step_pre_hook(_values_in_place)
    register_optimizer_step_post_hook(_parameters_back)
