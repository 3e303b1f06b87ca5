"""Pack the Planetoid Cora files into python/scorch/data/cora.npz (shipped with scorch so
the demo runs offline).  Usage: python tools/make_cora.py [PLANETOID_DIR]

Standard Planetoid split (Kipf & Welling): 140 training nodes (x), 500 validation nodes
(the 500 after them), 1000 test nodes (test.index).  Source: kimiyoung/planetoid (MIT).
"""
import os
import pickle
import sys

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "shared", "data",
                                                          "graphs", "planetoid")
OUT = os.path.join(HERE, "..", "python", "scorch", "data", "cora.npz")


def load(name):
    with open(os.path.join(SRC, f"ind.cora.{name}"), "rb") as f:
        return pickle.load(f, encoding="latin1")


def main():
    x, y, tx, ty, allx, ally, graph = (load(n) for n in
                                        ("x", "y", "tx", "ty", "allx", "ally", "graph"))
    test_idx = np.loadtxt(os.path.join(SRC, "ind.cora.test.index"), dtype=np.int64)
    test_sorted = np.sort(test_idx)
    features = sp.vstack((allx, tx)).tolil()
    features[test_idx, :] = features[test_sorted, :]
    labels = np.vstack((ally, ty))
    labels[test_idx, :] = labels[test_sorted, :]
    n = features.shape[0]
    rows, cols = [], []
    for src, dsts in graph.items():
        for d in dsts:
            rows.append(src)
            cols.append(d)
    adj = sp.coo_array((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    adj = ((adj + adj.T) > 0).astype(np.float32).tocoo()   # undirected, no duplicates
    adj.setdiag(0)
    adj.eliminate_zeros()
    adj = adj.tocoo()
    feats = features.tocoo()
    np.savez_compressed(
        OUT,
        edge_index=np.stack([adj.row, adj.col]).astype(np.int32),
        feat_row=feats.row.astype(np.int32), feat_col=feats.col.astype(np.int32),
        feat_shape=np.array(feats.shape, dtype=np.int64),
        labels=labels.argmax(1).astype(np.int8),
        train=np.arange(len(y), dtype=np.int32),
        val=np.arange(len(y), len(y) + 500, dtype=np.int32),
        test=test_idx.astype(np.int32))
    print(f"wrote {OUT}: {n} nodes, {adj.nnz} directed edges, {feats.nnz} feature nonzeros")


if __name__ == "__main__":
    main()
