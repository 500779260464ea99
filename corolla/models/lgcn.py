"""LGCN (Yu et al., LCFN) as LPSFed's client model (ICLR'26; docs/methods/lpsfed.md;
paper §2.2–§3.1, Eq. 2–10), usable with plain FedAvg of its MLPs as the baseline.

On the client's own bipartite subgraph (its users and its items, training edges only):

* spectral basis (:func:`spectral_basis`): the Φ eigenvectors of the normalised Laplacian
  L = I − D^-½ A D^-½ with the smallest eigenvalues λ_1..λ_Φ (Lanczos on D^-½ A D^-½, once per
  client; the code's combinatorial D − A with its 64 × 64 slicing bug is not reproduced, docs/methods/lpsfed.md);
* layers (Eq. 2–3): E^(l+1) = P diag(k_l) Pᵀ E^(l), kernels k_l ∈ R^Φ learned, E^(0) = [users;
  items] (d = 64, N(0.01, 0.02²)); since PᵀP = I, E^(l) = P diag(k_l ⋯ k_1) Pᵀ E^(0), so a
  mini-batch needs only M = Pᵀ E^(0) (Φ × d) and the rows of P of its nodes;
* pooling MLP (Eq. 4): e = tanh(MLP_pool([E0 ‖ E1 ‖ E2])) — ``lgcn-mlp = paper``: 192→128→64 with
  tanh between (the paper's "two-layer MLPs", LGCN's size rule); ``code``: one 192→64 layer;
* predictive MLP (Eq. 5): R̂_ui = arccos(tanh(MLP_pred([e_u ‖ e_i ‖ e_u ⊙ e_i]))) (paper: 192→64→1
  with tanh; code: 192→1); ``lpsfed-scorer = code`` uses R̂ = arccos(cos(e_u, e_i)) in training
  and ranking instead (the code trains with that and never trains MLP_pred);
* popularity-bias encoders: 11 × 64 user and item tables indexed by the degree bucket
  (≤10, 20, 30, 40, 50, 100, 200, 300, 400, 500, more), xavier-normal; ξ̂_ui = arccos of the cosine
  of the two bias embeddings;
* losses: L_bias (Eq. 7, τ2), the margin M_ui = min(γ ξ̂_ui, π − R̂_ui) (Eq. 8), the BC loss with
  the refined margin fM_ui = ω M_c + (1 − ω) M_ui (Eq. 9, 15; τ1; R̂ + fM clamped to [0, π]), or
  BPR on cos R̂ (LPSFed (BPR), the FedAvg baseline).

Only ``pool.*`` and ``pred.*`` are shared; embeddings, kernels, eigenvectors and bias encoders
stay on the client.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from corolla.util import stable_seed

RANK_ITEM_BLOCK = 4096   # items per block of the pairwise ranking (keeps a block × users × h in cache)
POP_EDGES = np.array([10, 20, 30, 40, 50, 100, 200, 300, 400, 500])   # 11 buckets (LPSFed's fed_data_preprocessing.py:103-114)


def pop_bucket(degree: np.ndarray) -> np.ndarray:
    """LPSFed's popularity bucket of each degree (fed_data_preprocessing.py:103-114)."""
    return np.searchsorted(POP_EDGES, np.asarray(degree), side="left").astype(np.int64)


def spectral_basis(n_users: int, n_items: int, users: np.ndarray, items: np.ndarray, phi: int,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(P, λ): the ``phi`` eigenvectors (N × Φ) of the normalised Laplacian of the bipartite graph
    with the smallest eigenvalues λ (ascending). Isolated nodes have a zero row in D^-½ A D^-½."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigsh

    n = n_users + n_items
    rows = np.concatenate([users, n_users + items])
    cols = np.concatenate([n_users + items, users])
    a = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    a.data[:] = 1.0
    deg = np.asarray(a.sum(1)).ravel()
    dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    norm = sp.diags(dinv) @ a @ sp.diags(dinv)
    k = min(phi, n)
    if n <= max(2 * phi + 1, 64):
        mu, vec = np.linalg.eigh(norm.toarray())
        order = np.argsort(-mu)[:k]
    else:   # the largest eigenvalues of D^-½ A D^-½ are the smallest of L; a fixed start vector
        v0 = np.random.default_rng(seed).standard_normal(n)
        mu, vec = eigsh(norm, k=k, which="LA", v0=v0, tol=1e-8)
        order = np.argsort(-mu)
        vec[deg == 0] = 0.0   # isolated nodes: exact zeros, not v0's round-off (machine dependent)
    lam = 1.0 - mu[order]
    return np.ascontiguousarray(vec[:, order], dtype=np.float32), lam.astype(np.float64)


class LGCN(nn.Module):
    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 2, phi: int = 64,
                 mlp: str = "paper", bias: bool = True):
        super().__init__()
        self.n_users, self.n_items, self.dim, self.layers = n_users, n_items, dim, layers
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)
        self.kernel = nn.Parameter(torch.zeros(layers, phi))
        width = (layers + 1) * dim
        if mlp == "paper":
            self.pool = nn.ModuleList([nn.Linear(width, 2 * dim), nn.Linear(2 * dim, dim)])
            self.pred = nn.ModuleList([nn.Linear(3 * dim, dim), nn.Linear(dim, 1)])
        elif mlp == "code":
            self.pool = nn.ModuleList([nn.Linear(width, dim)])
            self.pred = nn.ModuleList([nn.Linear(3 * dim, 1)])
        else:
            raise ValueError(f"lgcn-mlp: expected 'paper' or 'code', got {mlp!r}")
        if bias:
            self.bias_user = nn.Embedding(len(POP_EDGES) + 1, dim)
            self.bias_item = nn.Embedding(len(POP_EDGES) + 1, dim)
        self.register_buffer("basis", torch.zeros(n_users + n_items, phi), persistent=False)

    # --------------------------------------------------------------------- init
    def init_params(self, seed: int) -> None:
        """Embeddings and kernels N(0.01, 0.02²) (model_LPSFed.py:125-131); MLP weights and biases
        N(0, 0.01²) (:142-150); bias tables xavier-normal (BC-Loss model.py)."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in (self.user.weight, self.item.weight, self.kernel):
                p.copy_(0.01 + 0.02 * torch.randn(p.shape, generator=g))
            for layer in list(self.pool) + list(self.pred):
                layer.weight.copy_(0.01 * torch.randn(layer.weight.shape, generator=g))
                layer.bias.copy_(0.01 * torch.randn(layer.bias.shape, generator=g))
            if hasattr(self, "bias_user"):
                for t in (self.bias_user.weight, self.bias_item.weight):
                    std = math.sqrt(2.0 / (t.shape[0] + t.shape[1]))
                    t.copy_(std * torch.randn(t.shape, generator=g))

    def shared_names(self) -> list[str]:
        return [n for n, _ in self.named_parameters() if n.startswith(("pool.", "pred."))]

    # --------------------------------------------------------------------- forward
    def pooled(self, nodes: torch.Tensor) -> torch.Tensor:
        """Pooled embeddings e of ``nodes`` (indices into users then items) (Eq. 2–4)."""
        e0 = torch.cat([self.user.weight, self.item.weight])
        m = self.basis.T @ e0                                   # Φ × d
        p = self.basis[nodes]
        layers = [e0[nodes]]
        gain = torch.ones_like(self.kernel[0])
        for l in range(self.layers):
            gain = gain * self.kernel[l]
            layers.append(p @ (gain[:, None] * m))
        x = torch.cat(layers, -1)
        for j, layer in enumerate(self.pool):
            x = torch.tanh(layer(x))   # tanh between the layers and on the output (Eq. 4)
        return x

    def cosine(self, eu: torch.Tensor, ei: torch.Tensor, scorer: str) -> torch.Tensor:
        """cos R̂ ∈ [−1, 1] (Eq. 5: tanh of the predictive MLP; ``code``: the cosine of the pooled
        embeddings). Losses that need only cos R̂ (the negatives of Eq. 9, BPR) use this, not
        cos(arccos(·)): the clamp in :meth:`angle` has no gradient where |cos| reaches 1."""
        if scorer == "code":
            return F.cosine_similarity(eu, ei, dim=-1)
        x = torch.cat([eu, ei, eu * ei], -1)
        for j, layer in enumerate(self.pred):
            x = layer(x)
            if j < len(self.pred) - 1:
                x = torch.tanh(x)
        return torch.tanh(x.squeeze(-1))

    def angle(self, eu: torch.Tensor, ei: torch.Tensor, scorer: str) -> torch.Tensor:
        """R̂ = arccos(cos R̂) ∈ [0, π] (Eq. 5)."""
        return torch.arccos(self.cosine(eu, ei, scorer).clamp(-1 + 1e-7, 1 - 1e-7))

    def angle_matrix(self, eu: torch.Tensor, ei: torch.Tensor, scorer: str) -> torch.Tensor:
        """R̂ of every (user, item) pair of ``eu`` (U × d) and ``ei`` (I × d), U × I."""
        return torch.arccos(self.cosine_matrix(eu, ei, scorer).clamp(-1 + 1e-7, 1 - 1e-7))

    def cosine_matrix(self, eu: torch.Tensor, ei: torch.Tensor, scorer: str) -> torch.Tensor:
        """cos R̂ of every (user, item) pair, U × I."""
        s = self.rank_matrix(eu, ei, scorer)
        return s if scorer == "code" else torch.tanh(s)

    def rank_matrix(self, eu: torch.Tensor, ei: torch.Tensor, scorer: str) -> torch.Tensor:
        """The ranking score of every (user, item) pair, U × I, larger first: a strictly
        decreasing function of R̂, so it orders the items as R̂ ascending does (Eq. 5) — cos R̂
        for ``code``, and for ``paper`` the predictive MLP's output x before its tanh
        (cos R̂ = tanh x). Ranking by R̂ itself loses the order: near R̂ = π/2 (an untrained or
        barely trained predictive MLP: on lpsfed-ml100k's clients R̂ lies within 0.02 of π/2 with
        a spread of ~7e-6 over a user's items) float32 R̂ has a spacing of 1.2e-7, i.e. a few
        dozen distinct values per user; near R̂ = π (LPSFed's collapse: x ≈ −4 on lpsfed-ml100k)
        tanh shrinks the differences of x by 1 − tanh² x ≈ 1e-3 before they are rounded, and it
        is exactly ±1 beyond |x| = 9.01 in float32, 19.06 in float64; the clamp merges
        |cos R̂| > 1 − 1e-7. Tied items fall back to the item id. The ranking caller
        (client_app/lpsfed.py) evaluates in float64. The first predictive layer on
        [e_u ‖ e_i ‖ e_u ⊙ e_i] splits as W1 e_u + W2 e_i + (diag(e_u) W3ᵀ)ᵀ e_i, so the
        U × I × 3d input is never built."""
        if scorer == "code":
            return F.normalize(eu, dim=-1) @ F.normalize(ei, dim=-1).T
        # per user u: [e_i ‖ 1] @ [[W2ᵀ + diag(e_u) W3ᵀ]; (W1 e_u + b)ᵀ], one matmul for the chunk
        d = eu.shape[1]
        w, b = self.pred[0].weight, self.pred[0].bias                     # h × 3d
        w1, w2, w3 = w[:, :d], w[:, d:2 * d], w[:, 2 * d:]
        h = w.shape[0]
        per_user = w2.T[None] + eu[:, :, None] * w3.T[None]                 # U × d × h
        row = eu @ w1.T + b                                                # U × h
        rhs = torch.cat([per_user, row[:, None, :]], 1).permute(1, 0, 2).reshape(d + 1, -1)
        out = []
        for a in range(0, ei.shape[0], RANK_ITEM_BLOCK):
            blk = ei[a:a + RANK_ITEM_BLOCK]
            lhs = torch.cat([blk, torch.ones(len(blk), 1, dtype=ei.dtype)], 1)
            x = (lhs @ rhs).view(-1, eu.shape[0], h)                      # I_block × U × h
            for layer in self.pred[1:]:
                x = layer(x.tanh() if torch.is_grad_enabled() else x.tanh_())
            out.append(x.squeeze(-1))
        return torch.cat(out).T

    def bias_cosine(self, pu: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        """cos ξ̂_ui of the L2-normalised bias embeddings (Eq. 7)."""
        bu = F.normalize(self.bias_user(pu), dim=-1)
        bi = F.normalize(self.bias_item(pi), dim=-1)
        return (bu * bi).sum(-1)

    def bias_angle(self, pu: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        return torch.arccos(self.bias_cosine(pu, pi).clamp(-1 + 1e-7, 1 - 1e-7))


def info_nce(pos: torch.Tensor, neg: torch.Tensor, tau: float) -> torch.Tensor:
    """−mean log( e^{pos/τ} / (e^{pos/τ} + e^{neg/τ}) + 1e-10 ) with one negative per row."""
    a, b = torch.exp(pos / tau), torch.exp(neg / tau)
    return -(torch.log(a / (a + b) + 1e-10)).mean()


def bpr(pos_cos: torch.Tensor, neg_cos: torch.Tensor) -> torch.Tensor:
    """BPR on the scores cos R̂ (LPSFed (BPR) and the FedAvg-LGCN baseline)."""
    return F.softplus(-(pos_cos - neg_cos)).mean()


def shared_init(cfg, n_items: int) -> dict[str, np.ndarray]:
    """θ⁰: the pooling and predictive MLPs every client starts from (Alg. 1 line 1)."""
    m = LGCN(1, 1, cfg["dim"], cfg["lgcn-layers"], cfg["lgcn-phi"], cfg["lgcn-mlp"], bias=False)
    m.init_params(stable_seed(cfg["seed"], "lgcn-shared-init"))
    return {k: v.detach().numpy().copy() for k, v in m.named_parameters() if k.startswith(("pool.", "pred."))}
