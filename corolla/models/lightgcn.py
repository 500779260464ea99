"""LightGCN (He et al., SIGIR'20) on a client's own bipartite training graph.

As in FedCIA's code (``model/LightGCN.py``): the symmetric-normalised adjacency D^{-½} A D^{-½} of the
(n_users + M)-node bipartite graph built from the client's training matrix, ``layers``
propagation steps, the mean over layers 0..L as final embeddings, score = u_L · i_L, BPR loss
with the regulariser on the ego (layer-0) embeddings. FedCIA's item similarity uses the ego item
embeddings (``item.weight``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from corolla.models.base import RecModel


def normalized_adjacency(n_users: int, n_items: int, users: np.ndarray, items: np.ndarray) -> torch.Tensor:
    """Sparse D^{-½} A D^{-½} of the bipartite graph with edges (u, i); isolated nodes get 0."""
    n = n_users + n_items
    rows = np.concatenate([users, n_users + items])
    cols = np.concatenate([n_users + items, users])
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    with np.errstate(divide="ignore"):
        dinv = np.where(deg > 0, deg ** -0.5, 0.0)
    vals = dinv[rows] * dinv[cols]
    return torch.sparse_coo_tensor(np.vstack([rows, cols]), vals.astype(np.float32), (n, n),
                                   check_invariants=True).coalesce()


class _SymmetricMM(torch.autograd.Function):
    """y = A x for a symmetric sparse A: the gradient is A g, no transpose needed."""

    @staticmethod
    def forward(ctx, a, x):
        ctx.a = a
        return a @ x

    @staticmethod
    def backward(ctx, g):
        return None, ctx.a @ g


def propagate(adj: torch.Tensor, x: torch.Tensor, layers: int) -> torch.Tensor:
    """LightGCN (He et al. 2020, Eq. 4): the mean over layers 0..K of ``D^-½ A D^-½`` propagations
    of ``x``. ``adj`` is a COO tensor (one client's graph) or a CSR one (many clients' graphs
    stacked block-diagonally, Dist-FedAvg's batched training: its symmetric product needs no
    transpose in the backward pass)."""
    mm = _SymmetricMM.apply if adj.layout == torch.sparse_csr else torch.sparse.mm
    acc, h = x, x
    for _ in range(layers):
        h = mm(adj, h)
        acc = acc + h
    return acc / (layers + 1)


class LightGCN(RecModel):
    def __init__(self, n_users: int, n_items: int, dim: int, layers: int, loss: str, weight_decay: float):
        super().__init__(n_users, n_items, dim, loss, weight_decay)
        self.layers = layers
        self.graph: torch.Tensor | None = None

    def set_graph(self, users: np.ndarray, items: np.ndarray) -> None:
        self.graph = normalized_adjacency(self.n_users, self.n_items, users, items).to(self.user.weight.device)

    def propagate(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.graph is None:
            raise RuntimeError("LightGCN: call set_graph() with the client's training edges first")
        out = propagate(self.graph, torch.cat([self.user.weight, self.item.weight]), self.layers)
        return out[: self.n_users], out[self.n_users:]

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u, i = self.propagate()
        return (u[users] * i[items]).sum(-1)

    def full_sort_scores(self, users: torch.Tensor) -> torch.Tensor:
        u, i = self.propagate()
        return u[users] @ i.T

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        u, i = self.propagate()
        us, p, n = batch["user"], batch["pos"], batch["neg"]
        sp = (u[us] * i[p]).sum(-1)
        sn = (u[us] * i[n]).sum(-1)
        return F.softplus(sn - sp).mean() + self.reg(self.user(us), self.item(p), self.item(n))
