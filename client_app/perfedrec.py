"""PerFedRec's client (Luo et al., CIKM 2022; the authors' code sichunluo/PerFedRec@4d0c8f0,
``PerFedRec/PerFedRec.py:81-117,135-162``; docs/methods/perfedrec.md) on FedCA's one-user harness:
a one-user PMF/NCF client (``client_app.pmf``) that

* starts a round from its own user vector and the table (+ tower) of its cluster when the server
  sends a cluster id, else the global one (``:82-84``);
* trains as the harness does (the code: one Adam step on all its rows; the FedCA table's rows
  train the harness's PMF/NCF, docs/methods/perfedrec.md);
* uploads the trained table (+ tower) with Laplace(0, ``perfedrec-noise-scale``) noise added to
  ``perfedrec-noise-rows`` rows drawn uniformly with replacement (``:105-109``), its user vector and
  ``num-examples``;
* keeps its user vector and, for its evaluation, its post-training model on its candidate items
  only (the 99 negatives and its held-out items; no table per client);
* is evaluated after the server aggregated (with the next round's message): the score of each
  candidate is the mean of the raw scores (``perfedrec-ensemble = logit``; ``prob``: of the
  probabilities) of the global model, its cluster's model and — if it trained in the evaluated
  round — its own post-training model (``:141-154``), each with its own user vector (the code
  scores each model with the user row inside that model; on the harness the user vector stays
  on the client).
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.base import PhaseResult
from client_app.oneuser import candidate_logits, evaluate_stacked
from client_app.pmf import OneUserClient
from corolla.util import rng

LOCAL = "local."   # prefix of the post-training model's rows (and tower) in the state


def cluster_key(k: int, name: str) -> str:
    return f"cluster{k}.{name}"


class PerFedRecClient(OneUserClient):
    round: int = 0   # the round being trained (its noise is seeded by it)

    def init_state(self) -> dict[str, np.ndarray]:
        """Its user vector: every round starts from a table the server sends."""
        return {"user.weight": super().init_state()["user.weight"], "local.round": np.zeros(1, np.int64)}

    def reply_evaluates(self, rnd: int) -> bool:
        return False   # evaluated with the server's models of the round, after aggregation

    def start_params(self, state, shared, personal) -> dict[str, np.ndarray]:
        names = [k for k in shared if not k.startswith("cluster")]
        k = int(personal["cluster"][0]) if "cluster" in personal else None
        if k is not None and cluster_key(k, names[0]) not in shared:
            raise ValueError(f"logical client {self.cid}: cluster {k} is not in the download")
        src = {n: shared[cluster_key(k, n)] for n in names} if k is not None else {n: shared[n] for n in names}
        return {"user.weight": state["user.weight"], **src}

    def candidates(self) -> np.ndarray:
        """The items it is ever evaluated on: its 99 negatives and held-out items."""
        fed, u = self.fed, int(self.users[0])
        return np.unique(np.r_[fed.neg_valid[u], fed.neg_test[u], fed.rows("valid", u), fed.rows("test", u)]
                         ).astype(np.int64)

    def upload(self, new, rows, personal) -> dict[str, np.ndarray]:
        out = {k: np.array(v, np.float32, copy=True) for k, v in new.items() if not k.startswith("user.")}
        n, scale = int(self.p.perfedrec_noise_rows), float(self.p.perfedrec_noise_scale)
        if n and scale > 0:
            g = rng(self.cfg["seed"], "perfedrec-noise", self.cid, self.round)
            table = out["item.weight"]
            at = g.integers(0, table.shape[0], n)
            np.add.at(table, at, g.laplace(0.0, scale, (n, table.shape[1])).astype(np.float32))
        out["user.weight"] = np.asarray(new["user.weight"], np.float32)
        return out

    def kept(self, new: dict[str, np.ndarray], rnd: int) -> dict[str, np.ndarray]:
        """Its state after training: the user vector and its model on its candidates."""
        ids = self.candidates()
        out = {"user.weight": new["user.weight"], "local.round": np.array([rnd], np.int64), "local.ids": ids,
               "local.item.weight": np.ascontiguousarray(new["item.weight"][ids])}
        out.update({LOCAL + k: v for k, v in new.items() if k.startswith("mlp.")})
        return out

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        for c in clients:
            c.round = rnd
        results = OneUserClient.batch_train(clients, rnd, states, shared, personals)
        for c, r in zip(clients, results):
            r.state = c.kept(r.state, rnd)
        return results

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        evals = evaluate_stacked(clients, ensemble_scorer(clients[0].p, rnd, states, shared, personals,
                                                          clients[0].device))
        return [PhaseResult(metrics=ev) for ev in evals]

    def scores(self, state, shared, personal, local_users, items):
        """Export: its user vector with the global model."""
        it = np.arange(self.fed.n_items)[None] if items is None else np.asarray(items).reshape(1, -1)
        score = ensemble_scorer(self.p, -1, [state], {k: v for k, v in shared.items() if not k.startswith("cluster")},
                                [{}], self.device)
        return score(torch.zeros(1, dtype=torch.long), torch.as_tensor(it)).reshape(len(local_users), -1)


def ensemble_scorer(prm, rnd, states, shared, personals, device):
    """``score(idx, items)`` for :func:`client_app.oneuser.evaluate_stacked`: the mean over the
    global model, the client's cluster model (if it got a cluster id) and its own post-training
    model (if it trained in round ``rnd``) of the logits (``perfedrec-ensemble = logit``, what
    the code averages) or of the probabilities (``prob``)."""
    names = [k for k in shared if not k.startswith("cluster")]
    tower = [k for k in names if k.startswith("mlp.")]

    def model_logits(user, emb, towers):
        t = {k: torch.as_tensor(np.stack([tw[k] for tw in towers]), device=device) for k in tower}
        return candidate_logits(user, torch.as_tensor(emb, device=device), t)

    def score(idx, items):
        jj, it = idx.cpu().numpy(), items.cpu().numpy()
        user = torch.as_tensor(np.stack([states[j]["user.weight"] for j in jj]), device=device)
        parts = [(model_logits(user, shared["item.weight"][it], [shared] * len(jj)), np.ones(len(jj), bool))]
        ks = [int(personals[j]["cluster"][0]) if "cluster" in personals[j] else -1 for j in jj]
        if any(k >= 0 for k in ks):
            src = [{n: shared[cluster_key(k, n)] for n in names} if k >= 0 else shared for k in ks]
            parts.append((model_logits(user, np.stack([s["item.weight"][it[r]] for r, s in enumerate(src)]), src),
                          np.array([k >= 0 for k in ks])))
        own = np.array([int(states[j]["local.round"][0]) == rnd and "local.ids" in states[j] for j in jj])
        if own.any():
            embs, towers = [], []
            for r, j in enumerate(jj):
                st = states[j]
                if own[r]:
                    ids = st["local.ids"]
                    pos = np.searchsorted(ids, it[r])
                    if (pos >= len(ids)).any() or (ids[np.minimum(pos, len(ids) - 1)] != it[r]).any():
                        raise ValueError("an evaluation candidate outside the client's kept rows")
                    embs.append(st["local.item.weight"][pos])
                    towers.append({k: st[LOCAL + k] for k in tower})
                else:
                    embs.append(shared["item.weight"][it[r]])
                    towers.append(shared)
            parts.append((model_logits(user, np.stack(embs), towers), own))
        with torch.no_grad():
            total = torch.zeros(it.shape, dtype=torch.float64, device=device)
            count = torch.zeros(len(jj), dtype=torch.float64, device=device)
            for logits, mask in parts:
                m = torch.as_tensor(mask, dtype=torch.float64, device=device)
                v = logits.double() if prm.perfedrec_ensemble == "logit" else torch.sigmoid(logits).double()
                total += v * m[:, None]
                count += m
            return (total / count[:, None]).cpu().numpy().astype(np.float32)

    return score
