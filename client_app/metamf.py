"""MetaMF's client (Lin et al., SIGIR'20, Fig. 1; TempSDU/MetaMF bbfdf0b; docs/methods/metamf.md) on the
one-user harness (``client_app.oneuser``). It holds its data only: every round it receives its
private item table Q_u and RP weights, generated for it by the server, and keeps nothing.

Round t, per client (one user):

1. rows: the harness's round rows (every train positive, label 1, and ``num-negatives`` fresh
   never-interacted negatives, label 0), or a seeded subset of ``metamf-rows-per-round`` of them;
2. ŷ = ReLU(q_i W₀ + b₀) W₁ + b₁ for each row (MetaMF.py:104-109), the loss ℓ_u = the mean over its
   rows of (ŷ − y)² (``metamf-loss = mse``, MetaMF.py:113-115) or of BCE(σ(ŷ), y);
3. upload: ∂ℓ_u/∂Q_u on the rows of its items (``grad.item@rows`` ids, ``grad.item@vals``), the
   gradients of W₀, b₀, W₁, b₁ and ``num-examples`` = its rows. Nothing is updated on the client.

Evaluation: the held-out item among its negatives, scored by the RP model with the table received
in the evaluation download (raw ŷ, or σ(ŷ) in float32 with ``metamf-loss = bce``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from client_app.base import PhaseResult
from client_app.oneuser import OneUserBase, evaluate_stacked, round_samples
from corolla.models.metamf import rp_predict
from corolla.protocol import row_keys
from corolla.util import rng

RP = ("rp.w0", "rp.b0", "rp.w1", "rp.b1")


def client_gradients(params: dict[str, np.ndarray], items: np.ndarray, labels: np.ndarray, loss: str):
    """(mean loss, ids of the rows used, ∂ℓ/∂ those rows of Q_u, {name: ∂ℓ/∂ RP weight})."""
    ids, inv = np.unique(items, return_inverse=True)
    q = torch.as_tensor(params["item.weight"][ids]).requires_grad_(True)
    rp = {k: torch.as_tensor(params[k]).requires_grad_(True) for k in RP}
    y = torch.as_tensor(labels, dtype=torch.float32)
    pred = rp_predict(q[torch.as_tensor(inv)], rp["rp.w0"], rp["rp.b0"], rp["rp.w1"], rp["rp.b1"])
    ell = ((pred - y) ** 2).mean() if loss == "mse" else F.binary_cross_entropy_with_logits(pred, y)
    ell.backward()
    return float(ell.detach()), ids, q.grad.numpy(), {k: v.grad.numpy() for k, v in rp.items()}


class MetaMFClient(OneUserBase):
    def init_state(self) -> dict[str, np.ndarray]:
        return {}

    def rows(self, sample: dict[str, np.ndarray], rnd: int) -> dict[str, np.ndarray]:
        k = int(self.p.metamf_rows_per_round)
        if k <= 0 or k >= len(sample["item"]):
            return sample
        pick = np.sort(rng(self.cfg["seed"], "metamf-rows", self.cid, rnd).choice(len(sample["item"]), k, replace=False))
        return {key: v[pick] for key, v in sample.items()}

    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        samples, _ = round_samples(clients, rnd)
        rk, vk = row_keys("grad.item")
        out = []
        for c, s, pers in zip(clients, samples, personals):
            s = c.rows(s, rnd)
            loss, ids, grow, grp = client_gradients(pers, s["item"], s["label"], c.p.metamf_loss)
            payload = {rk: ids.astype(np.int32), vk: grow, **{f"grad.{k}": v for k, v in grp.items()}}
            out.append(PhaseResult(payload=payload, metrics={"num-examples": len(s["item"]), "train-loss": loss},
                                   state={}))   # nothing is kept (saved: the round it trained)
        return out

    def phase_evaluate(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_evaluate([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        sigmoid = clients[0].p.metamf_loss == "bce"

        def score(idx, items):   # on the CPU, as the client's gradients: the tables arrive as numpy
            out = []
            with torch.no_grad():
                for j, cand in zip(idx.tolist(), items.cpu()):
                    p = {k: torch.as_tensor(v) for k, v in personals[j].items()}
                    y = rp_predict(p["item.weight"][cand], p["rp.w0"], p["rp.b0"], p["rp.w1"], p["rp.b1"])
                    out.append(torch.sigmoid(y) if sigmoid else y)
            return torch.stack(out).numpy().astype(np.float32)

        return [PhaseResult(metrics=ev) for ev in evaluate_stacked(clients, score)]

    def scores(self, state, shared, personal, local_users, items):
        q = personal["item.weight"] if items is None else personal["item.weight"][np.asarray(items).reshape(-1)]
        p = {k: torch.as_tensor(personal[k]) for k in RP}
        with torch.no_grad():
            y = rp_predict(torch.as_tensor(q), p["rp.w0"], p["rp.b0"], p["rp.w1"], p["rp.b1"]).numpy()
        return y.astype(np.float32).reshape(len(local_users), -1)
