"""The GCN demo (scorch/_gcn.py): the normalised adjacency built with scorch ops matches the
dense formula, and a short training run on Cora reaches the expected accuracy with scorch
and agrees with the torch.sparse backend."""
import warnings

import torch

import scorch
from scorch import _gcn, datasets


def test_normalized_adjacency_matches_dense():
    data = datasets.cora()
    n = data["num_nodes"]
    adj = _gcn.normalized_adjacency(data["edge_index"], n)
    assert isinstance(adj, scorch.SparseTensor) and adj.format.name == "csr"
    a = torch.zeros(n, n)
    a[data["edge_index"][0], data["edge_index"][1]] = 1.0
    a = a + torch.eye(n)
    dinv = a.sum(1).pow(-0.5)
    torch.testing.assert_close(adj.to_dense(), dinv[:, None] * a * dinv[None, :])


def test_gcn_trains_on_cora():
    r = _gcn.train("scorch", epochs=60, seed=0)
    assert r["accuracy"] > 0.7, r["accuracy"]
    assert len(r["epoch_times"]) == 60


def test_same_model_on_torch_sparse_agrees():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        a = _gcn.train("torch", epochs=5, seed=1)
    b = _gcn.train("scorch", epochs=5, seed=1)
    assert abs(a["loss"] - b["loss"]) < 1e-4
    assert abs(a["accuracy"] - b["accuracy"]) < 0.01


def test_main_prints_both_backends(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _gcn.main(["--epochs", "2"])
    out = capsys.readouterr().out
    assert "scorch csr SparseTensor" in out and "torch.sparse CSR" in out
    assert "test accuracy" in out and "median epoch" in out
