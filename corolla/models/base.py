"""Model base class, losses, factory and the deterministic shared initialisation."""

from __future__ import annotations


import numpy as np
import torch
from torch import nn
from torch.nn import functional as F



class RecModel(nn.Module):
    """Base: a private ``user`` embedding table and shared parameters.

    Subclasses implement :meth:`forward` (a logit per (user, item) pair).
    """

    def __init__(self, n_users: int, n_items: int, dim: int, loss: str, weight_decay: float):
        super().__init__()
        self.n_users, self.n_items, self.dim = n_users, n_items, dim
        self.loss_name, self.weight_decay = loss, weight_decay
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)

    # -- interface
    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:  # logits
        raise NotImplementedError

    def score(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.forward(users, items)

    def full_sort_scores(self, users: torch.Tensor) -> torch.Tensor:
        n = len(users)
        items = torch.arange(self.n_items, device=users.device)
        return self.forward(users.repeat_interleave(self.n_items), items.repeat(n)).view(n, self.n_items)

    def reg(self, *embs: torch.Tensor) -> torch.Tensor:
        b = embs[0].shape[0]
        return self.weight_decay * 0.5 * sum(e.pow(2).sum() for e in embs) / b

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Loss of a batch of triples (``user``, ``pos``, ``neg``) or rows (``user``, ``item``, ``label``)."""
        u = batch["user"]
        if "label" in batch:
            if self.loss_name != "bce":
                raise ValueError(f"loss '{self.loss_name}' needs (user, pos, neg) triples")
            logit = self.forward(u, batch["item"])
            return F.binary_cross_entropy_with_logits(logit, batch["label"]) + \
                self.reg(self.user(u), self.item(batch["item"]))
        p, n = batch["pos"], batch["neg"]
        reg = self.reg(self.user(u), self.item(p), self.item(n))
        if self.loss_name == "fedcia-mse":
            # FedCIA code (model/MF.py:28-39): element-wise MSE on the un-summed product u ⊙ i
            eu, ep, en = self.user(u), self.item(p), self.item(n)
            return 0.5 * (F.mse_loss(eu * ep, torch.ones_like(ep)) + F.mse_loss(eu * en, torch.zeros_like(en))) + reg
        sp, sn = self.forward(u, p), self.forward(u, n)
        if self.loss_name == "bpr":
            return F.softplus(sn - sp).mean() + reg
        # bce on triples: ½[BCE(pos, 1) + BCE(neg, 0)]
        return 0.5 * (F.softplus(-sp).mean() + F.softplus(sn).mean()) + reg

    # -- parameters as numpy
    def shared_names(self) -> list[str]:
        return [n for n, _ in self.named_parameters() if not n.startswith("user.")]

    def get_arrays(self, names: list[str] | None = None) -> dict[str, np.ndarray]:
        sd = dict(self.named_parameters())
        names = names if names is not None else list(sd)
        return {n: sd[n].detach().cpu().numpy().copy() for n in names}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        sd = dict(self.named_parameters())
        with torch.no_grad():
            for n, a in arrays.items():
                if n not in sd:
                    raise KeyError(f"model has no parameter '{n}'")
                if tuple(sd[n].shape) != tuple(a.shape):
                    raise ValueError(f"parameter '{n}': expected shape {tuple(sd[n].shape)}, got {tuple(a.shape)}")
                sd[n].copy_(torch.from_numpy(np.ascontiguousarray(a)))
