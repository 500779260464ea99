"""Model base class, losses, factory and the deterministic shared initialisation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from corolla.config import int_list
from corolla.util import stable_seed


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
            # FedCIA code (spec A3): element-wise MSE on the un-summed product u ⊙ i
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


def build_model(cfg: dict[str, Any], n_users: int, n_items: int) -> RecModel:
    from corolla.models.mf import MF
    from corolla.models.ncf import NCF

    if cfg["model"] == "mf":
        return MF(n_users, n_items, cfg["dim"], cfg["loss"], cfg["weight-decay"])
    if cfg["model"] == "lightgcn":
        from corolla.models.lightgcn import LightGCN

        return LightGCN(n_users, n_items, cfg["dim"], cfg["gcn-layers"], cfg["loss"], cfg["weight-decay"])
    return NCF(n_users, n_items, cfg["dim"], int_list(cfg, "mlp-layers"), cfg["loss"], cfg["weight-decay"])


def init_params(model: RecModel, std: float, seed: int, names: list[str], mlp_init: str = "xavier") -> None:
    """Initialise ``names`` deterministically: embeddings N(0, std²); Linear layers Xavier-uniform
    weights and zero biases (``xavier``) or PyTorch's default U(±1/√fan_in) for both
    (``torch-default``, as the FedCA code's untouched ``nn.Linear``)."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            p = params[n]
            if n.startswith(("user.", "item.")):
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif mlp_init == "torch-default":
                fan_in = p.shape[1] if p.dim() == 2 else params[n[:-len("bias")] + "weight"].shape[1]
                bound = 1.0 / float(np.sqrt(fan_in))
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            elif p.dim() == 2:
                bound = float(np.sqrt(6.0 / (p.shape[0] + p.shape[1])))
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            else:
                p.zero_()


def shared_init(cfg: dict[str, Any], n_items: int) -> dict[str, np.ndarray]:
    """The shared parameters every logical client and the server start from (same seed -> same)."""
    m = build_model(cfg, 1, n_items)
    init_params(m, cfg["init-std"], stable_seed(cfg["seed"], "shared-init"), m.shared_names(),
                cfg.get("mlp-init", "xavier"))
    return m.get_arrays(m.shared_names())


def user_init(model: RecModel, cfg: dict[str, Any], cid: int) -> None:
    init_params(model, cfg["init-std"], stable_seed(cfg["seed"], "user-init", cid), ["user.weight"])
