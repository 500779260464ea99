"""pFedGraph's client (Ye et al., ICML 2023; the authors' code MediaBrain-SJTU/pFedGraph@4f5f17c,
``pytorch/pfedgraph_cosine.py:18-84``; docs/methods/pfedgraph.md) on FedCA's one-user harness: a
one-user PMF/NCF client (``client_app.pmf``) that

* starts a round from its own user vector and the aggregate θ̄_u the server sent (the code loads
  it into the client's model, ``utils.py:133-134``), or, with ``pfedgraph-eval = aggregated``, has
  it in its state already (it evaluated it and kept it);
* adds to every mini-batch's loss, from the second round on (``pfedgraph_cosine.py:43,64``),
  s·λ·⟨c_u, θ⟩/‖θ‖ over its shared parameters θ (item table, NCF tower; the user vector is
  private and not part of it), s = +1 as the code (``pfedgraph_cosine.py:69``) or −1 as the paper
  (``pfedgraph-sign``); c_u is the target the server sent (``normalized``) or its start θ̄_u
  normalised (``aggregate``). The term has a gradient on every row, so the client trains its
  whole table (``train_users(compact=False)``);
* uploads its shared parameters and ``num-examples``, as every one-user client.
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.pmf import OneUserClient
from corolla.methods.pfedgraph import TARGET


class PFedGraphClient(OneUserClient):
    def start_params(self, state, shared, personal) -> dict[str, np.ndarray]:
        return {**state, **{k: v for k, v in personal.items() if not k.startswith(TARGET)}}

    def evaluation_state(self, state, personal) -> dict[str, np.ndarray]:
        """``pfedgraph-eval = aggregated``: the aggregate θ̄_u replaces its shared parameters (and
        stays: the next round starts from it)."""
        return {**state, **personal} if personal else state

    def reply_evaluates(self, rnd: int) -> bool:
        return self.p.pfedgraph_eval == "trained" and super().reply_evaluates(rnd)

    def target(self, start: dict[str, np.ndarray], personal: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """c_u over the shared parameters, or None (no term for this client this round)."""
        names = [k for k in start if not k.startswith("user.")]
        if self.p.pfedgraph_target == "normalized":
            if not all(TARGET + k in personal for k in names):
                return None
            return {k: personal[TARGET + k] for k in names}
        norm = np.sqrt(sum(float((np.asarray(start[k], np.float64) ** 2).sum()) for k in names))
        return {k: (start[k] / max(norm, 1e-12)).astype(np.float32) for k in names}

    @classmethod
    def train_options(cls, clients, rnd, starts, personals) -> dict:
        prm = clients[0].p
        if rnd <= 1 or prm.pfedgraph_lambda == 0:
            return {}
        targets = [c.target(s, p) for c, s, p in zip(clients, starts, personals)]
        if all(t is None for t in targets):
            return {}
        names = [k for k in starts[0] if not k.startswith("user.")]
        coef = prm.pfedgraph_lambda * (1.0 if prm.pfedgraph_sign == "code" else -1.0)
        dev = clients[0].device

        def penalty_for(part):
            # the targets of the chunk's clients, stacked (zeros: a client without one gets no term)
            c = {k: torch.as_tensor(np.stack([targets[b][k] if targets[b] is not None
                                              else np.zeros_like(starts[b][k]) for b in part]), device=dev)
                 for k in names}
            return partial_penalty(c, names, coef)

        return {"compact": False, "penalty_for": penalty_for}


def similarity_term(theta: dict[str, torch.Tensor], c: dict[str, torch.Tensor], names, coef: float) -> torch.Tensor:
    """coef·⟨c, θ⟩/‖θ‖ per client (leading axis), θ and c over ``names`` jointly (the code's
    ``loss2 = lam * torch.dot(cluster_model, flatten_model) / torch.linalg.norm(flatten_model)``)."""
    dot = sum((c[k] * theta[k]).flatten(1).sum(1) for k in names)
    sq = sum((theta[k] * theta[k]).flatten(1).sum(1) for k in names)
    return coef * dot / sq.sqrt()


def partial_penalty(c: dict[str, torch.Tensor], names, coef: float):
    def penalty(leaf, idx):
        return similarity_term({k: leaf[k] for k in names}, {k: c[k][idx] for k in names}, names, coef)
    return penalty
