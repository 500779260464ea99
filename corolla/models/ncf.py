"""NCF as an MLP over concat(p_u, q_i) (FedNCF; FedCA's ``model/model.py:66-78``, FedCIA's ``model/MLP.py``).

``layers`` = [2·dim, h1, h2, ...]: Linear+ReLU between consecutive widths, then Linear(h_last, 1).
FedCA's NCF is layers [32, 16, 8] with dim 16; FedCIA's MLP is [2d, 32].
"""

from __future__ import annotations

import torch
from torch import nn

from corolla.models.base import RecModel


class NCF(RecModel):
    def __init__(self, n_users: int, n_items: int, dim: int, layers: list[int], loss: str, weight_decay: float):
        super().__init__(n_users, n_items, dim, loss, weight_decay)
        if layers[0] != 2 * dim:
            raise ValueError(f"mlp-layers must start with 2*dim={2 * dim}, got {layers[0]}")
        mods: list[nn.Module] = []
        for a, b in zip(layers[:-1], layers[1:]):
            mods += [nn.Linear(a, b), nn.ReLU()]
        mods.append(nn.Linear(layers[-1], 1))
        self.mlp = nn.Sequential(*mods)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([self.user(users), self.item(items)], -1)).squeeze(-1)
