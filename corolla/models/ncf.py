"""NCF as an MLP over concat(p_u, q_i) (FedNCF; FedCA's ``model/model.py:66-78``, FedCIA's ``model/MLP.py``).

``layers`` = [2·dim, h1, h2, ...]: Linear+ReLU between consecutive widths, then Linear(h_last, 1).
FedCA's NCF is layers [32, 16, 8] with dim 16; FedCIA's MLP is [2d, 32].

``arch = "neumf"`` is the GMF ⊕ MLP network of FedCIA's ``model/NCF.py`` (He et al.'s NeuMF): the
user and item tables are 2·dim wide, their first halves are multiplied element-wise (GMF), their
second halves go through the tower (Linear+ReLU between the ``layers`` widths, no output layer),
and ``predict`` = Linear(dim + h_last, 1) scores concat(GMF, tower). The code keeps four tables
(``embedding_{user,item}_{GMF,MLP}``); here each pair is one table, so that the private user table
stays ``user`` and every other parameter is shared, as the code's FedAvg shares every parameter
whose name has no ``user``.

``mlp_reg = "sum-squares"`` adds FedCIA's tower regulariser to the loss: ``weight_decay · Σ p²``
over every weight and bias of the tower, not divided by the batch (FedCIA ``model/MLP.py``,
``loss``: ``reg_loss += torch.sum(param ** 2)`` for the ``dnn_layer`` parameters, then
``loss + reg_loss * weight_decay``); the embeddings' ``½·wd·‖·‖²/B`` term is the base class's.
``"none"`` (the default) leaves the tower unregularised.
"""

from __future__ import annotations

import torch
from torch import nn

from corolla.models.base import RecModel


class NCF(RecModel):
    def __init__(self, n_users: int, n_items: int, dim: int, layers: list[int], loss: str, weight_decay: float,
                 mlp_reg: str = "none", arch: str = "mlp"):
        if arch not in ("mlp", "neumf"):
            raise ValueError(f"ncf-arch must be 'mlp' or 'neumf', got {arch!r}")
        super().__init__(n_users, n_items, dim if arch == "mlp" else 2 * dim, loss, weight_decay)
        if mlp_reg not in ("none", "sum-squares"):
            raise ValueError(f"mlp-reg must be 'none' or 'sum-squares', got {mlp_reg!r}")
        self.mlp_reg, self.arch, self.half = mlp_reg, arch, dim
        if layers[0] != 2 * dim:
            raise ValueError(f"mlp-layers must start with 2*dim={2 * dim}, got {layers[0]}")
        if arch == "neumf" and len(layers) < 2:
            raise ValueError(f"ncf-arch 'neumf' needs at least one hidden width in mlp-layers, got {layers}")
        mods: list[nn.Module] = []
        for a, b in zip(layers[:-1], layers[1:]):
            mods += [nn.Linear(a, b), nn.ReLU()]
        if arch == "mlp":
            mods.append(nn.Linear(layers[-1], 1))
        else:
            self.predict = nn.Linear(dim + layers[-1], 1)
        self.mlp = nn.Sequential(*mods)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u, i = self.user(users), self.item(items)
        if self.arch == "mlp":
            return self.mlp(torch.cat([u, i], -1)).squeeze(-1)
        d = self.half
        gmf = u[..., :d] * i[..., :d]
        tower = self.mlp(torch.cat([u[..., d:], i[..., d:]], -1))
        return self.predict(torch.cat([gmf, tower], -1)).squeeze(-1)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        base = super().loss(batch)
        if self.mlp_reg == "none":
            return base
        return base + self.weight_decay * sum(p.pow(2).sum() for p in self.mlp.parameters())
