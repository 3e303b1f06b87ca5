"""Small datasets shipped with scorch, so examples run offline."""
from __future__ import annotations

import os

import numpy as np
import torch

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def cora():
    """Cora citation graph (Planetoid split): a dict with ``edge_index`` ([2, 10556] int64,
    both directions of 5,278 undirected edges), ``features`` (2708 x 1433 float32 dense,
    binary bag of words), ``labels`` (int64, 7 classes) and index tensors ``train`` (140),
    ``val`` (500), ``test`` (1000)."""
    z = np.load(os.path.join(_DATA, "cora.npz"))
    shape = tuple(int(s) for s in z["feat_shape"])
    feats = torch.zeros(shape, dtype=torch.float32)
    feats[torch.from_numpy(z["feat_row"]).long(), torch.from_numpy(z["feat_col"]).long()] = 1.0
    return {
        "edge_index": torch.from_numpy(z["edge_index"]).long(),
        "features": feats,
        "labels": torch.from_numpy(z["labels"]).long(),
        "train": torch.from_numpy(z["train"]).long(),
        "val": torch.from_numpy(z["val"]).long(),
        "test": torch.from_numpy(z["test"]).long(),
        "num_nodes": shape[0],
    }
