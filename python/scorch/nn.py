"""Neural-network layers with sparse weights.

``SparseLinear`` keeps a fixed sparsity pattern (index buffers) and trains only the stored
values (one ``nn.Parameter``), so any torch optimizer updates it without ever touching the
pattern.  The forward pass is ``F.linear`` with the weight as a SparseTensor: a generated
kernel, with gradients computed by generated kernels too.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._convert import _from_coords, from_components
from ._format import Format
from ._tensor import SparseTensor, outside_graph
from ._torch_ops import refuse_transforms

__all__ = ["SparseLinear"]


class SparseLinear(nn.Module):
    """``y = x @ W.T + b`` with ``W`` (out_features x in_features) sparse in CSR.

    ``density`` is the fraction of stored weights (a random pattern drawn from ``generator``
    or torch's global generator); values are initialised like ``nn.Linear``'s, scaled for
    the number of stored inputs per output.  ``layer.weight`` is the SparseTensor,
    ``layer.values`` the trainable values.
    """

    def __init__(self, in_features: int, out_features: int, density: float = 0.1,
                 bias: bool = True, *, dtype=None, generator=None):
        super().__init__()
        if not 0.0 <= density <= 1.0:
            raise ValueError(f"density must be in [0, 1], got {density}")
        if in_features < 0 or out_features < 0:
            raise ValueError(f"in_features and out_features must not be negative, got "
                             f"{in_features} and {out_features}")
        dtype = dtype or torch.get_default_dtype()
        device = torch.empty(0).device   # (torch.device(...) as a context sets the default)
        if device.type != "cpu":
            raise ValueError(f"SparseLinear is built on the CPU, where scorch's kernels run; "
                             f"torch's default device is {device}")
        self.in_features, self.out_features = in_features, out_features
        total = in_features * out_features
        k = _kept(total, density)
        flat = _distinct(total, k, generator)
        coords = torch.stack([flat // in_features, flat % in_features])
        bound = 1.0 / math.sqrt(max(1.0, in_features * density))
        vals = (torch.rand(k, generator=generator, dtype=dtype) * 2 - 1) * bound
        b = None
        if bias:
            b = (torch.rand(out_features, generator=generator, dtype=dtype) * 2 - 1) * bound
        self._init_from(coords, vals, b)

    def _init_from(self, coords, vals, bias):
        W = _from_coords((self.out_features, self.in_features), coords, vals, "csr", None,
                         is_sorted=True)
        self.register_buffer("row_ptr", W._pos[1])
        self.register_buffer("col_idx", W._crd[1])
        self.values = nn.Parameter(W._vals.clone())
        self.bias = None if bias is None else nn.Parameter(bias.clone())

    @classmethod
    def from_dense(cls, linear: nn.Linear, density: float = 0.1) -> "SparseLinear":
        """A SparseLinear keeping the ``density`` fraction of ``linear``'s weights with the
        largest magnitude (magnitude pruning); ``linear`` is not modified."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_dense expects an nn.Linear, not {type(linear).__name__}")
        if not 0.0 <= density <= 1.0:
            raise ValueError(f"density must be in [0, 1], got {density}")
        w = linear.weight.detach()
        out_f, in_f = w.shape
        total = w.numel()
        k = _kept(total, density)
        keep = w.abs().reshape(-1).topk(k).indices.sort().values
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = in_f, out_f
        coords = torch.stack([keep // in_f, keep % in_f])
        bias = None if linear.bias is None else linear.bias.detach()
        layer._init_from(coords, w.reshape(-1)[keep].clone(), bias)
        return layer

    @property
    def weight(self) -> SparseTensor:
        """The weight as a SparseTensor (CSR) whose values are ``self.values``.  The index
        buffers are checked (O(nnz)) whenever they changed since the last check: loaded
        from a state dict or written in place, they are input like any other."""
        checked = getattr(self, "_checked", None)   # (the tensors checked, and versions)
        if self.row_ptr.is_inference() or self.col_idx.is_inference():
            checked = versions = None   # (torch counts no versions of these: every time)
        else:
            versions = (self.row_ptr._version, self.col_idx._version, self.values.shape)
        if torch._C._are_functorch_transforms_active():
            refuse_transforms()   # (its values would be functorch's, without storage)
        if checked is None or checked[0] is not self.row_ptr or \
                checked[1] is not self.col_idx or checked[2] != versions:
            from_components((self.out_features, self.in_features), "csr",
                            pos=[None, self.row_ptr], crd=[None, self.col_idx],
                            values=self.values.detach())
            self._checked = (self.row_ptr, self.col_idx, versions)
        it = self.col_idx.dtype
        w = SparseTensor((self.out_features, self.in_features), _CSR, [None, self.row_ptr],
                         [None, self.col_idx], self.values,
                         requires_grad=self.values.requires_grad, index_dtype=it, checked=True)
        w._pattern_owner = "SparseLinear.weight"   # (copy_ of another pattern is refused:
        return w                                   # the layer's buffers hold its pattern)

    def get_extra_state(self) -> dict:
        """The layer's shape, saved in its state dict (``_extra_state``): the pattern's
        arrays alone do not say how many columns it has, and a 4 x 6 layer's checkpoint
        would load into a 4 x 8 layer of the same number of weights."""
        return {"in_features": self.in_features, "out_features": self.out_features}

    def set_extra_state(self, state) -> None:   # (checked in _load_from_state_dict)
        pass

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        key = prefix + "_extra_state"
        state = state_dict.get(key)
        if state is not None:
            shape = ((state.get("out_features"), state.get("in_features"))
                     if isinstance(state, dict) else None)
            if shape != (self.out_features, self.in_features):
                error_msgs.append(
                    f"size mismatch for {prefix}weight: copying a SparseLinear weight of "
                    f"shape {shape} (out_features, in_features), the layer's is "
                    f"{(self.out_features, self.in_features)}")
                return
        # (a pattern of another size: the layer's arrays take its size before torch
        # copies into them, the values Parameter in place (``.data``), so that an
        # optimizer holding it goes on stepping it; its shape is what must agree, and
        # the loaded pattern is checked first, so that a bad one leaves the layer as it
        # was)
        arrays = {n: state_dict.get(prefix + n) for n in ("row_ptr", "col_idx", "values")}
        if any(isinstance(t, torch.Tensor) and t.dim() == 1 and
               t.shape != getattr(self, n).shape for n, t in arrays.items()):
            pos, crd, vals = (t if isinstance(t, torch.Tensor) else getattr(self, n)
                              for n, t in arrays.items())
            try:
                from_components((self.out_features, self.in_features), "csr",
                                pos=[None, pos], crd=[None, crd], values=vals.detach())
            except (ValueError, IndexError, TypeError) as e:
                error_msgs.append(self._not_its_pattern(prefix, e))
                return
            with torch.no_grad():
                self.values.data = torch.empty(vals.shape, dtype=self.values.dtype)
            self.col_idx = torch.empty(crd.shape, dtype=self.col_idx.dtype)
        errors = len(error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)
        if state is None and key in missing_keys:   # (a checkpoint saved before the shape
            missing_keys.remove(key)                # was: its pattern is checked here)
        if len(error_msgs) == errors:
            try:
                self.weight   # (checks the loaded pattern against the layer's shape)
            except (ValueError, IndexError) as e:
                error_msgs.append(self._not_its_pattern(prefix, e))

    def _not_its_pattern(self, prefix, e) -> str:
        return (f"the pattern loaded into {prefix or 'the layer'} is not one of a "
                f"{self.out_features} x {self.in_features} weight: {e}")

    @property
    def density(self) -> float:
        return self.values.numel() / max(1, self.in_features * self.out_features)

    @outside_graph   # (under torch.compile: one graph break, see _tensor.outside_graph)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"density={self.density:.3g}, nnz={self.values.numel()}, "
                f"bias={self.bias is not None}")


_CSR = Format.parse("csr", 2)


def _kept(total: int, density: float) -> int:
    """How many of ``total`` weights a density keeps: at least one where it is above 0."""
    return 0 if density == 0 else min(total, max(1, round(density * total)))


def _distinct(total: int, k: int, generator) -> torch.Tensor:
    """``k`` distinct integers of ``[0, total)`` drawn uniformly, sorted, in O(k log k)
    time and memory where ``k`` is a small part of ``total`` (a permutation of all
    ``total`` would cost a large layer in x out memory for its few stored weights)."""
    if total <= (1 << 20) or 2 * k > total:
        return torch.randperm(total, generator=generator)[:k].sort().values
    got = torch.empty(0, dtype=torch.int64)
    while got.numel() < k:
        more = torch.randint(total, (2 * (k - got.numel()),), generator=generator)
        got = torch.cat([got, more]).unique()
    return got[torch.randperm(got.numel(), generator=generator)[:k]].sort().values
