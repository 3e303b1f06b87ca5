"""torch.optim on a SparseTensor parameter: every optimizer steps its stored values.

``nn.Parameter(scorch.to_sparse(w))`` is a SparseTensor leaf whose values tensor carries
the gradient (``A.grad`` is that gradient on A's pattern).  An optimizer's step on the
SparseTensor itself would run its update rule on the sparse tensor: Adam's state starts
as ``zeros_like(p)``, which stores nothing, and its ``denom.add_(eps)`` would have to store
every place.  Instead, a global step pre-hook hands the optimizer each such parameter's
values tensor (a dense 1-D leaf whose ``.grad`` is the gradient's values), in place of
the parameter in its group, with the parameter's state; the post-hook puts the parameter
back.  The step then is the optimizer's own dense update of the stored values: dense
SGD, Adam, AdamW, RMSprop, Adagrad, ... restricted to the pattern, exactly (an unstored
place has gradient 0 and stays 0 under every one of them).  The pattern never changes.
"""
import weakref

import torch

from ._tensor import SparseTensor, _ops

# optimizer -> {id(values): the SparseTensor parameter} while its step runs
_SWAPPED = weakref.WeakKeyDictionary()


def _values_in_place(optimizer, args, kwargs):
    found = [(group["params"], k, p) for group in optimizer.param_groups
             for k, p in enumerate(group["params"]) if type(p) is SparseTensor]
    if not found:
        return
    swapped = {}
    for _, _, p in found:
        if id(p._vals) in swapped:
            raise RuntimeError(
                f"{type(optimizer).__name__}: two SparseTensor parameters share one values "
                f"tensor (one is a view of the other, as A and A.t()); optimize one of them")
        swapped[id(p._vals)] = p
    for params, k, p in found:
        v = p._vals
        params[k] = v     # (in place: LBFGS keeps this list as its own)
        if p in optimizer.state:
            optimizer.state[v] = {key: _at_stored(x, p)
                                  for key, x in optimizer.state.pop(p).items()}
    _SWAPPED[optimizer] = swapped


def _at_stored(x, p):
    """A state entry made from the parameter itself (Adagrad's ``full_like(p, init)`` at
    construction, a state loaded for it) as the values tensor's: its values at p's
    stored entries; other entries (the step count) as they are."""
    if not isinstance(x, torch.Tensor) or x.shape != p.shape or (
            x.shape == p._vals.shape and type(x) is not SparseTensor):
        return x
    if isinstance(x, SparseTensor):
        if _ops()._same_arrays(x, p):
            return x._vals.detach().clone()
        if x.nnz == 0:
            return torch.zeros_like(p._vals)
        x = x.to_dense()
    return x.detach()[tuple(p.indices())].to(p._vals.dtype)


def _parameters_back(optimizer, args, kwargs):
    swapped = _SWAPPED.pop(optimizer, None)
    if not swapped:
        return
    for group in optimizer.param_groups:
        params = group["params"]
        for k, v in enumerate(params):
            p = swapped.get(id(v))
            if p is not None and p._vals is v:
                params[k] = p
                if v in optimizer.state:
                    optimizer.state[p] = optimizer.state.pop(v)


def install():
    """Register the hooks (once, at import)."""
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    register_optimizer_step_pre_hook(_values_in_place)
    register_optimizer_step_post_hook(_parameters_back)
