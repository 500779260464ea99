"""FedFast's client (Muhammad et al., KDD 2020, Algorithm 1's ClientUpdate; docs/methods/fedfast.md)
on FedCA's one-user harness: a one-user PMF/NCF client (``client_app.pmf``) that starts a round
from the global item table (+ tower) and the user vector the server holds for it (FedFast's model
is one global model with every user's embedding), trains as the harness does, and uploads the
trained table, its user vector and ``num-examples``. It keeps only its user vector. It is
evaluated (``fedfast-eval = global``) with the global table and the user vector the server sends,
after the server's aggregation, with the next round's message; with ``own`` the round's clients
send their post-training metrics with the upload (FedCA's harness rule).
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.base import PhaseResult
from client_app.oneuser import evaluate_stacked, global_scorer
from client_app.pmf import OneUserClient


class FedFastClient(OneUserClient):
    def init_state(self) -> dict[str, np.ndarray]:
        return {"user.weight": super().init_state()["user.weight"]}

    def reply_evaluates(self, rnd: int) -> bool:
        return self.p.fedfast_eval == "own" and super().reply_evaluates(rnd)

    def start_params(self, state, shared, personal) -> dict[str, np.ndarray]:
        return {"user.weight": personal.get("user.weight", state["user.weight"]), **shared}

    def upload(self, new, rows, personal) -> dict[str, np.ndarray]:
        return {k: v for k, v in new.items()}   # the shared parameters and the user vector

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        results = OneUserClient.batch_train(clients, rnd, states, shared, personals)
        for r in results:
            r.state = {"user.weight": r.state["user.weight"]}
        return results

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        users = [p.get("user.weight", s["user.weight"]) for s, p in zip(states, personals)]
        evals = evaluate_stacked(clients, global_scorer(users, shared, clients[0].device))
        return [PhaseResult(metrics=ev, state={"user.weight": u} if "user.weight" in p else None)
                for ev, u, p in zip(evals, users, personals)]

    def scores(self, state, shared, personal, local_users, items):
        it = np.arange(self.fed.n_items)[None] if items is None else np.asarray(items).reshape(1, -1)
        score = global_scorer([personal.get("user.weight", state["user.weight"])], shared, self.device)
        return score(torch.zeros(1, dtype=torch.long), torch.as_tensor(it)).reshape(len(local_users), -1)

