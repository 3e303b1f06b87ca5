"""A two-layer GCN (Kipf & Welling) on Cora, trained with scorch and with torch.sparse side
by side: ``python examples/gcn.py [--epochs N]`` (the same as ``python -m scorch``).

The model is ordinary PyTorch; the only scorch-specific lines build the normalised
adjacency and convert the features:

    A = scorch.from_edge_index(edge_index, n)
    A_tilde = A + scorch.from_edge_index(torch.arange(n).repeat(2, 1), n)
    dinv = A_tilde.sum(1).pow(-0.5)
    A_hat = A_tilde * dinv[:, None] * dinv[None, :]        # a scorch csr SparseTensor
    X = scorch.to_sparse(features, "csr")
    ... adj @ (F.dropout(X) @ W) ...                       # generated kernels, with autograd

The implementation lives in scorch/_gcn.py so that ``python -m scorch`` runs it from an
installed package.
"""
import warnings

from scorch._gcn import GCN, load, main, normalized_adjacency, train  # noqa: F401

if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        main()
