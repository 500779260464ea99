"""SGL (Wu et al., SIGIR'21, "Self-supervised Graph Learning for Recommendation"; the authors'
code wujcan/SGL-Torch c5632881, ``model/general_recommender/SGL.py``): LightGCN with two
stochastic views of the user–item graph per epoch and an InfoNCE term between them.

* **views** (:func:`view_adjacency`, SGL.py:201-243): edge dropout ``ed`` keeps ⌊(1−ρ)·|E|⌋ of
  the training edges drawn without replacement; node dropout ``nd`` drops ⌊ρ·|U|⌋ users and
  ⌊ρ·|I|⌋ items with their edges; random walk ``rw`` is ``ed`` with another mask per layer. Each
  view is re-normalised D^-½ A D^-½ over its own degrees;
* **forward** (SGL.py:61-123): LightGCN's mean over layers 0..L of the propagations, on the
  full graph (the BPR scores) and on each view (L2-normalised: the contrastive embeddings);
* **loss** (SGL.py:265-287), *sums* over the batch as the code (Adam is nearly invariant to the
  scale; with batches of different sizes it is not exactly, so the code's form is kept):
  ``Σ −log σ(s⁺ − s⁻) + ssl_reg · Σ_b [logsumexp_v((z′_u·z″_v − z′_u·z″_u)/τ) + the same for the
  positive item] + reg · Σ ‖ego embeddings of the batch‖²/2``; the InfoNCE denominators run over
  *all* users (items) of the second view, the positive pair included (the code; the paper writes
  the same sum).

``tests/test_central.py`` checks the views, the loss and one Adam step against golden tensors of
the authors' ``_LightGCN`` and loss lines on a tiny graph (``benchmarks/authors_golden.py sgl``).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch.nn import functional as F

from corolla.models.lightgcn import LightGCN, _SymmetricMM, normalized_adjacency, propagate

AUG_TYPES = ("ed", "nd", "rw")


def kept_edges(n_edges: int, ratio: float, g: np.random.Generator) -> np.ndarray:
    """Edge dropout (SGL.py:224-229): ⌊(1−ρ)·|E|⌋ edge indices drawn without replacement."""
    return np.sort(g.choice(n_edges, size=int(n_edges * (1 - ratio)), replace=False))


def kept_by_nodes(users: np.ndarray, items: np.ndarray, n_users: int, n_items: int, ratio: float,
                  g: np.random.Generator) -> np.ndarray:
    """Node dropout (SGL.py:208-223): ⌊ρ·|U|⌋ users and ⌊ρ·|I|⌋ items drawn without replacement
    are dropped with their edges (:func:`edges_without`)."""
    du = g.choice(n_users, size=int(n_users * ratio), replace=False)
    di = g.choice(n_items, size=int(n_items * ratio), replace=False)
    return edges_without(users, items, n_users, n_items, du, di)


def edges_without(users: np.ndarray, items: np.ndarray, n_users: int, n_items: int, drop_users: np.ndarray,
                  drop_items: np.ndarray) -> np.ndarray:
    """The indices of the edges whose user and item are both kept."""
    keep_u = np.ones(n_users, bool)
    keep_i = np.ones(n_items, bool)
    keep_u[drop_users] = False
    keep_i[drop_items] = False
    return np.flatnonzero(keep_u[users] & keep_i[items])


def csr(adj: torch.Tensor) -> torch.Tensor:
    """A symmetric COO adjacency as CSR: its products and their gradients (A·g, no transpose) take an
    eighth of COO's time on a CPU (``corolla.models.lightgcn.propagate``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # "sparse CSR support is in beta"
        return adj.to_sparse_csr()


def view_adjacency(n_users: int, n_items: int, users: np.ndarray, items: np.ndarray, keep: np.ndarray):
    """D^-½ A D^-½ of the sub-graph with the training edges ``keep`` (its own degrees), CSR."""
    return csr(normalized_adjacency(n_users, n_items, users[keep], items[keep]))


def draw_views(n_users: int, n_items: int, users: np.ndarray, items: np.ndarray, aug: str, ratio: float,
               layers: int, g: np.random.Generator) -> list:
    """The kept-edge index sets of one view: one set (``ed``/``nd``) or one per layer (``rw``)."""
    if aug == "nd":
        return [kept_by_nodes(users, items, n_users, n_items, ratio, g)]
    if aug == "ed":
        return [kept_edges(len(users), ratio, g)]
    return [kept_edges(len(users), ratio, g) for _ in range(layers)]


class SGL(LightGCN):
    def __init__(self, n_users: int, n_items: int, dim: int, layers: int, weight_decay: float,
                 ssl_reg: float, ssl_temp: float):
        super().__init__(n_users, n_items, dim, layers, "bpr", weight_decay)
        self.ssl_reg, self.ssl_temp = ssl_reg, ssl_temp
        self.views: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def set_graph(self, users: np.ndarray, items: np.ndarray) -> None:
        super().set_graph(users, items)
        self.graph = csr(self.graph)

    def set_views(self, users: np.ndarray, items: np.ndarray, keep1: list[np.ndarray], keep2: list[np.ndarray]) -> None:
        """The epoch's two views from their kept-edge index sets (one each, or one per layer)."""
        dev = self.user.weight.device
        self.views = tuple([view_adjacency(self.n_users, self.n_items, users, items, k).to(dev) for k in keep]
                           for keep in (keep1, keep2))

    def _view(self, adjs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([self.user.weight, self.item.weight])
        if len(adjs) == 1:
            out = propagate(adjs[0], x, self.layers)
        else:   # rw: another graph per layer (SGL.py:103-107)
            acc, h = x, x
            for a in adjs:
                h = _SymmetricMM.apply(a, h)
                acc = acc + h
            out = acc / (len(adjs) + 1)
        out = F.normalize(out, dim=1)
        return out[: self.n_users], out[self.n_users:]

    def loss_terms(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The code's three sums (SGL.py:273-285) for a batch of (user, pos, neg) triples."""
        if self.views is None:
            raise RuntimeError("SGL: call set_views() with the epoch's two views first")
        u, i = self.propagate()
        us, p, n = batch["user"], batch["pos"], batch["neg"]
        sup = (u[us] * i[p]).sum(-1) - (u[us] * i[n]).sum(-1)
        bpr = -F.logsigmoid(sup).sum()
        reg = sum(e.pow(2).sum() / 2 for e in (self.user(us), self.item(p), self.item(n)))
        u1, i1 = self._view(self.views[0])
        u2, i2 = self._view(self.views[1])
        zu1, zu2, zi1, zi2 = u1[us], u2[us], i1[p], i2[p]
        lu = zu1 @ u2.T - (zu1 * zu2).sum(-1, keepdim=True)
        li = zi1 @ i2.T - (zi1 * zi2).sum(-1, keepdim=True)
        infonce = (torch.logsumexp(lu / self.ssl_temp, 1) + torch.logsumexp(li / self.ssl_temp, 1)).sum()
        return {"bpr": bpr, "infonce": infonce, "reg": reg}

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        t = self.loss_terms(batch)
        return t["bpr"] + self.ssl_reg * t["infonce"] + self.weight_decay * t["reg"]


def xavier_uniform_(table: torch.Tensor, g: torch.Generator) -> None:
    """``nn.init.xavier_uniform_`` of an n × d embedding table (SGL's ``param_init``): U(±√(6/(n+d)))."""
    bound = float(np.sqrt(6.0 / (table.shape[0] + table.shape[1])))
    with torch.no_grad():
        table.copy_((torch.rand(table.shape, generator=g) * 2 - 1) * bound)
