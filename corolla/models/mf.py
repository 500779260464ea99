"""Matrix factorisation (FedMF / FCF / PMF backbones).

score(u, i) = p_u · q_i (a logit; sigmoid at evaluation does not change rankings).
Losses: BPR (Rendle et al. 2009), BCE, and FedCIA's element-wise MSE (FedCIA's ``model/MF.py:28-39``).
"""

from __future__ import annotations

import torch

from corolla.models.base import RecModel


class MF(RecModel):
    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return (self.user(users) * self.item(items)).sum(-1)

    def full_sort_scores(self, users: torch.Tensor) -> torch.Tensor:
        return self.user(users) @ self.item.weight.T
