"""A two-layer graph convolutional network (Kipf & Welling, 2017) on Cora, trained with the
adjacency as a scorch CSR SparseTensor and, side by side, as a torch.sparse CSR tensor.

    Â = D^-1/2 (A + I) D^-1/2            built with scorch ops (sparse + sparse, .sum(1),
                                          sparse * dense broadcast)
    H = relu(Â @ (dropout(X) @ W1) + b1)       X: the sparse bag-of-words features
    Y = log_softmax(Â @ (dropout(H) @ W2) + b2)

Hidden size 16, dropout 0.5, Adam with lr 0.01 and weight decay 5e-4 on the first layer,
200 epochs, the Planetoid split (140 training nodes, 1000 test nodes).  As in Kipf's own
implementation the features stay sparse (1.3% nonzero) and dropout on them acts on the
stored values only; with scorch that is plain ``F.dropout(X)`` (zero-preserving, so it is
routed to the values) and ``X @ W1`` is a generated sparse-dense kernel.  Run it with
``python -m scorch`` or ``python examples/gcn.py``.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import scorch
from scorch import datasets


def normalized_adjacency(edge_index, n) -> scorch.SparseTensor:
    """D^-1/2 (A + I) D^-1/2 as a scorch CSR tensor, computed with routed torch ops."""
    A = scorch.from_edge_index(edge_index, n)
    loops = torch.arange(n).repeat(2, 1)
    A_tilde = A + scorch.from_edge_index(loops, n)         # sparse + sparse: a union kernel
    dinv = A_tilde.sum(1).pow(-0.5)                        # a reduction kernel, dense result
    return A_tilde * dinv[:, None] * dinv[None, :]         # stays sparse (same pattern)


class GCNLayer(nn.Module):
    def __init__(self, fan_in, fan_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fan_in, fan_out))
        self.bias = nn.Parameter(torch.zeros(fan_out))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x, adj):
        return adj @ (x @ self.weight) + self.bias


def feature_dropout(x, p, training):
    """Dropout on the stored values of sparse features."""
    if isinstance(x, scorch.SparseTensor):
        return F.dropout(x, p, training)                   # routed by scorch to the values
    return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(),
                                   F.dropout(x.values(), p, training), x.shape)


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout=0.5):
        super().__init__()
        self.gc1, self.gc2, self.dropout = GCNLayer(nfeat, nhid), GCNLayer(nhid, nclass), dropout

    def forward(self, x, adj):
        x = feature_dropout(x, self.dropout, self.training)
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, self.training)
        return F.log_softmax(self.gc2(x, adj), dim=1)


def load(backend: str):
    """(features, adjacency for the backend, data dict)."""
    data = datasets.cora()
    x = data["features"]
    x = x / x.sum(1, keepdim=True).clamp(min=1)            # row-normalised bag of words
    x = scorch.to_sparse(x, "csr")
    adj = normalized_adjacency(data["edge_index"], data["num_nodes"])
    if backend == "torch":
        x, adj = x.to_torch(torch.sparse_csr), adj.to_torch(torch.sparse_csr)
    elif backend != "scorch":
        raise ValueError(f"backend must be 'scorch' or 'torch', not {backend!r}")
    return x, adj, data


class Run:
    """One backend's model, optimizer and random stream (dropout), stepped an epoch at a
    time so that two backends can be trained interleaved with identical random draws."""

    def __init__(self, backend, seed=0, hidden=16, lr=0.01, weight_decay=5e-4):
        self.backend = backend
        self.x, self.adj, data = load(backend)
        self.labels, self.train_idx, self.test_idx = data["labels"], data["train"], data["test"]
        torch.manual_seed(seed)
        self.model = GCN(self.x.shape[1], hidden, int(self.labels.max()) + 1)
        m = self.model
        self.opt = torch.optim.Adam([dict(params=m.gc1.parameters(), weight_decay=weight_decay),
                                     dict(params=m.gc2.parameters(), weight_decay=0.0)], lr=lr)
        self.rng = torch.get_rng_state()
        self.epoch_times, self.loss = [], None

    def step(self):
        outer = torch.get_rng_state()
        torch.set_rng_state(self.rng)
        t0 = time.perf_counter()
        self.model.train()
        self.opt.zero_grad()
        out = self.model(self.x, self.adj)
        loss = F.nll_loss(out[self.train_idx], self.labels[self.train_idx])
        loss.backward()
        self.opt.step()
        self.epoch_times.append(time.perf_counter() - t0)
        self.loss = loss.item()
        self.rng = torch.get_rng_state()
        torch.set_rng_state(outer)

    def accuracy(self):
        self.model.eval()
        with torch.no_grad():
            pred = self.model(self.x, self.adj).argmax(1)
        return (pred[self.test_idx] == self.labels[self.test_idx]).float().mean().item()

    def result(self):
        return dict(accuracy=self.accuracy(), epoch_times=self.epoch_times, loss=self.loss)


def train(backend="scorch", epochs=200, seed=0):
    """Train on one backend; returns dict(accuracy, epoch_times, loss)."""
    return train_side_by_side((backend,), epochs, seed)[backend]


def train_side_by_side(backends=("scorch", "torch"), epochs=200, seed=0):
    """Train one model per backend, epochs interleaved (so that a busy machine slows both
    alike); each backend sees the same initial weights and dropout masks."""
    runs = [Run(b, seed) for b in backends]
    for _ in range(epochs):
        for r in runs:
            r.step()
    return {r.backend: r.result() for r in runs}


def main(argv=None):
    import argparse

    from .__main__ import positive

    ap = argparse.ArgumentParser(description="GCN on Cora: scorch vs torch.sparse (as "
                                             "python -m scorch)")
    ap.add_argument("--epochs", type=positive, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive, default=None,
                    help="torch.set_num_threads (scorch's kernels use the same count)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = datasets.cora()
    adj = normalized_adjacency(data["edge_index"], data["num_nodes"])
    print(f"Cora: {data['num_nodes']} nodes, {data['edge_index'].shape[1]} directed edges, "
          f"{data['features'].shape[1]} features; Â = D^-1/2 (A+I) D^-1/2 is {adj.format} "
          f"with nnz={adj.nnz}")
    print(f"two-layer GCN (hidden 16, dropout 0.5, Adam lr 0.01, wd 5e-4), {args.epochs} "
          f"epochs, {torch.get_num_threads()} thread(s)\n")
    results = train_side_by_side(("scorch", "torch"), args.epochs, args.seed)
    med = {}
    for backend, label in (("scorch", "scorch csr SparseTensor"),
                           ("torch", "torch.sparse CSR")):
        r = results[backend]
        med[backend] = statistics.median(r["epoch_times"])
        print(f"  {label:<24} test accuracy {100 * r['accuracy']:5.1f}%   "
              f"median epoch {med[backend] * 1e3:7.2f} ms   (first epoch "
              f"{r['epoch_times'][0] * 1e3:.1f} ms)")
    print(f"\n  ratio scorch / torch.sparse per epoch: {med['scorch'] / med['torch']:.2f} "
          f"(< 1: scorch faster; epochs interleaved)")


if __name__ == "__main__":
    main()
