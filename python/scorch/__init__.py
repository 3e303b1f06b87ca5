"""scorch: sparse tensors as a property of PyTorch tensors.

    A = scorch.to_sparse(x, "csr")      # a torch.Tensor subclass in any per-level format
    A.to_format("csc"); A.to_dense(); A.to_torch(); A.to_scipy()
    Y = scorch.einsum("ij,jk->ik", A, X)   # any expression, any formats: a compiled kernel

Formats, conversions, validation and the sparse tensor-algebra compiler run in scorch's C
core (scorch._C).
"""
import torch as _torch

from . import _C
from ._C import CompileError
from ._convert import from_components, from_edge_index, to_sparse
from ._format import Format
from ._tensor import SparseTensor, _rebuild
from . import _tensor
from ._compiler import Kernel, Schedule, explain, kernel
from . import _torch_ops  # noqa: F401  (the torch-op routing SparseTensor uses)
from ._torch_ops import einsum
from . import nn
from ._dispatch import disable, enable, enabled, is_enabled
from ._fuse import compile

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "compile",
    "Format",
    "Kernel",
    "Schedule",
    "SparseTensor",
    "einsum",
    "explain",
    "kernel",
    "enable",
    "disable",
    "enabled",
    "is_enabled",
    "nn",
    "from_components",
    "from_edge_index",
    "to_sparse",
]

# torch.load(weights_only=True) may rebuild SparseTensors and Formats.
_torch.serialization.add_safe_globals([_rebuild, SparseTensor])

# Queues, spawned processes and DataLoader workers send the arrays through shared memory
# without moving the sender's (see SparseTensor._reduce_for_processes).
import multiprocessing.reduction as _mp_reduction  # noqa: E402

_mp_reduction.ForkingPickler.register(SparseTensor, SparseTensor._reduce_for_processes)

# torch.optim: an optimizer's step on a SparseTensor parameter steps its values.
from . import _optim  # noqa: E402

_optim.install()

# torch.compile: scorch's ops check whether Dynamo is tracing once torch._dynamo is loaded.
_tensor.watch_for_dynamo()
