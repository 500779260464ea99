"""PFedRec's client model (Zhang et al., IJCAI'23; PF mlp.py:5-20, docs/methods/ufgraphfr.md).

An item table ``item`` (M × d) and a score function ``affine`` = Linear(d, 1) on the item
embedding, sigmoid output; there is no user embedding — the score function is the user's
personal part. The batched trainer is :func:`corolla.models.stacked.train_pfedrec_stacked`; this
class is its one-user reference (:func:`corolla.models.stacked.train_pfedrec_one`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from corolla.util import stable_seed


class PFedRecModel(nn.Module):
    def __init__(self, n_items: int, dim: int):
        super().__init__()
        self.item = nn.Embedding(n_items, dim)
        self.affine = nn.Linear(dim, 1)

    def forward(self, items: torch.Tensor) -> torch.Tensor:   # logits
        return self.affine(self.item(items)).squeeze(-1)

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {n: p.detach().cpu().numpy().copy() for n, p in self.named_parameters()}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        params = dict(self.named_parameters())
        with torch.no_grad():
            for k, v in arrays.items():
                if k not in params or tuple(params[k].shape) != tuple(v.shape):
                    raise ValueError(f"PFedRec parameter '{k}': unexpected name or shape {tuple(v.shape)}")
                params[k].copy_(torch.from_numpy(np.ascontiguousarray(v)))


def pfedrec_init(n_items: int, dim: int, std: float, seed: int) -> dict[str, np.ndarray]:
    """The shared initial model: item table N(0, std²) (PyTorch's default for std=1), the score
    function as PyTorch's default Linear init (uniform ±1/√d), from one seed."""
    g = torch.Generator().manual_seed(stable_seed(seed, "pfedrec-init"))
    bound = 1.0 / np.sqrt(dim)
    return {"item.weight": (torch.randn(n_items, dim, generator=g) * std).numpy(),
            "affine.weight": ((torch.rand(1, dim, generator=g) * 2 - 1) * bound).numpy(),
            "affine.bias": ((torch.rand(1, generator=g) * 2 - 1) * bound).numpy()}
