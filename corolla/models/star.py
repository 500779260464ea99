"""LightGCN on one user's first-order interaction subgraph: FedLightGCN on the one-user harness.

UFGraphFR's Table 4 (its FedLightGCN row, "the way LightGCN extends to the federated learning
framework in the GPFedRec paper: each client trains local LightGCN using a first-order interaction
subgraph", UFGraphFR §5.2.1) trains LightGCN (He et al., SIGIR'20, Eq. 3-4)
on the graph a one-user client has: its user node u joined to the items P of its training
positives. Every item of P has degree 1 and u has degree n = |P|, so the symmetric normalisation
D^-½ A D^-½ puts w = 1/√n on every edge and the K propagation layers have a closed form:

    u^(0) = e_u,   u^(k) = w Σ_{i∈P} i^(k-1),
    i^(0) = e_i,   i^(k) = w u^(k-1)                       (i ∈ P; k ≥ 1)
    Σ_{i∈P} i^(0) = Σ_{i∈P} e_i,   Σ_{i∈P} i^(k) = n w u^(k-1)   (k ≥ 1)

and the final embeddings are the mean over the layers 0..K (Eq. 4): ū = Σ_k u^(k) / (K+1) and,
for item i, ī = (e_i + [i∈P] c) / (K+1) with c = w Σ_{k=0}^{K-1} u^(k); an item outside the
graph (a sampled negative, a held-out candidate) has no edge, so only its layer 0 counts. The
score of (u, i) is ū · ī, as LightGCN's. :func:`star_embeddings` computes ū and c for many clients
at once (their tables stacked), so that a mini-batch costs one sum over each client's positives
instead of a sparse product over its whole graph; ``tests/test_star.py`` checks it against
``corolla.models.lightgcn.propagate`` on the explicit graph.
"""

from __future__ import annotations

import torch


def star_embeddings(user: torch.Tensor, table: torch.Tensor, pos: torch.Tensor,
                    layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ū, c) of B one-user graphs: ``user`` B × d (layer 0 of each user), ``table`` B × M × d
    (each client's item table), ``pos`` B × M (1 on the items of each client's graph, else 0),
    ``layers`` K ≥ 0. Item i's final embedding is (e_i + pos[i]·c) / (K+1); ū is already the mean.
    A client with no positive has no edge: ū = e_u / (K+1), c = 0."""
    if layers < 0:
        raise ValueError(f"gcn-layers: expected a number of layers >= 0, got {layers}")
    n = pos.sum(1, keepdim=True)                                       # B × 1
    w = torch.where(n > 0, n.clamp(min=1).rsqrt(), torch.zeros_like(n))
    item_sum = torch.bmm(pos[:, None, :].to(table.dtype), table)[:, 0, :]   # Σ_{i∈P} e_i, B × d
    u_k = user
    u_acc = user
    c = torch.zeros_like(user)
    for _ in range(layers):
        c = c + w * u_k                                               # i^(k) = w u^(k-1)
        nxt = w * item_sum                                            # u^(k) = w Σ_P i^(k-1)
        item_sum = n * w * u_k                                        # Σ_P i^(k) = n w u^(k-1)
        u_k = nxt
        u_acc = u_acc + u_k
    return u_acc / (layers + 1), c


def star_logits(user: torch.Tensor, table: torch.Tensor, pos: torch.Tensor, items: torch.Tensor,
                layers: int) -> torch.Tensor:
    """LightGCN logits ū · ī of B one-user graphs on a B × L block of ``items``."""
    u_bar, c = star_embeddings(user, table, pos, layers)
    b, n = items.shape
    q = torch.gather(table, 1, items[..., None].expand(b, n, table.shape[2]))      # B × L × d
    in_graph = torch.gather(pos, 1, items).to(table.dtype)                            # B × L
    q = (q + in_graph[..., None] * c[:, None, :]) / (layers + 1)
    return (u_bar[:, None, :] * q).sum(-1)
