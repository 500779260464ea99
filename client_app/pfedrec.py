"""PFedRec client (Zhang et al., IJCAI'23 "Dual personalization on federated recommendation";
Zhangcx19/IJCAI-23-PFedRec abc2380; docs/methods/ufgraphfr.md) on the one-user harness.

Model (``corolla.models.pfedrec``): item table + a personal score function Linear(d, 1) (with
``pfedrec-score-layers``, ReLU layers before it: FedCA's NCF-backbone rows), no user embedding.
Round t: the client keeps its own score function and takes the server's global item table (PF
engine.py:99-111); it trains ``local-epochs`` epochs on its positives and ``num-negatives`` fresh
negatives per positive, each mini-batch in two SGD steps: the score function (lr ``lr``), then the
item table (lr ``lr · n_items · pfedrec-lr-eta``); it uploads ``item.weight`` and ``affine.bias``
(the code uploads the bias too, although no client ever loads the averaged bias; the tower's
layers, like the score weight, stay on the client) and evaluates with its own post-training model
(PF engine.py:168-177), fused into the training reply.
"""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
import torch

from client_app.base import PhaseResult
from client_app.oneuser import (OneUserBase, evaluate_stacked, evaluated, round_samples, rows_mode, rows_scorer,
                                rows_upload, without_table)
from corolla.methods.pfedrec import parse_layers
from corolla.models.pfedrec import pfedrec_init
from corolla.models.stacked import pfedrec_probs, pfedrec_table_probs, stack, train_pfedrec_stacked, train_users

UPLOAD = ("item.weight", "affine.bias")


class PFedRecClient(OneUserBase):
    def init_state(self) -> dict[str, np.ndarray]:
        if rows_mode(self.p):   # the score function only: every round starts from the global table
            init = _shared_init(self.fed.n_items, self.cfg["dim"], self.cfg["init-std"], self.cfg["seed"],
                                parse_layers(self.p.pfedrec_score_layers))
            return {k: v.copy() for k, v in init.items() if k != "item.weight"}
        return pfedrec_init(self.fed.n_items, self.cfg["dim"], self.cfg["init-std"], self.cfg["seed"],
                            parse_layers(self.p.pfedrec_score_layers))

    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        cfg, prm, fed, dev = clients[0].cfg, clients[0].p, clients[0].fed, clients[0].device
        starts = []
        for st in states:
            st = dict(st)
            if "item.weight" in shared:
                st["item.weight"] = shared["item.weight"]
            starts.append(st)
        sparse = rows_mode(prm)
        samples, perms = round_samples(clients, rnd)
        lr_item = cfg["lr"] * fed.n_items * prm.pfedrec_lr_eta
        trained, losses = train_users(starts, samples, perms, partial(
            train_pfedrec_stacked, batch_size=cfg["batch-size"], lr=cfg["lr"], lr_item=lr_item), dev,
            dense=not sparse)
        if not evaluated(cfg, rnd):
            evals = [{}] * len(clients)
        elif sparse:
            evals = evaluate_stacked(clients, rows_scorer(trained, shared["item.weight"], dev, pfedrec_scorer,
                                                          pfedrec_table_probs_of))
        else:
            evals = evaluate_stacked(clients, pfedrec_scorer(stack(trained, list(trained[0]), dev)))
        return [PhaseResult(payload=rows_upload(new, UPLOAD) if sparse else {k: new[k] for k in UPLOAD},
                            metrics={"num-examples": len(rows["item"]), "train-loss": float(loss), **ev},
                            state=without_table(new) if sparse else new)
                for new, rows, loss, ev in zip(trained, samples, losses, evals)]

    def scores(self, state, shared, personal, local_users, items):
        """The batched evaluation's forward (:func:`pfedrec_scorer`) on this one client's state."""
        if "item.weight" not in state:   # item-upload = rows: the global table it starts from
            state = {**state, "item.weight": shared["item.weight"]}
        n_items = len(state["item.weight"])
        it = np.asarray(items).reshape(1, -1) if items is not None else np.arange(n_items)[None]
        params = stack([state], list(state), self.device)
        return pfedrec_scorer(params)(torch.zeros(1, dtype=torch.long, device=self.device),
                                      torch.as_tensor(it, device=self.device)).reshape(len(local_users), -1)


@lru_cache(maxsize=2)
def _shared_init(n_items: int, dim: int, std: float, seed: int, layers: tuple[int, ...]) -> dict[str, np.ndarray]:
    """:func:`pfedrec_init` once per node (its draws are the same for every client; the score
    function comes after the table in the generator, so the table is drawn anyway)."""
    return pfedrec_init(n_items, dim, std, seed, layers)


def pfedrec_table_probs_of(personal, table):
    """:func:`client_app.oneuser.rows_scorer`'s full-ranking form: each client's score function
    on every row of the global table."""
    return pfedrec_table_probs(table, {k: v for k, v in personal.items() if k.startswith(("tower.", "affine."))})


def pfedrec_scorer(params):
    """Sigmoid scores of PFedRec's score function on the item embedding (no user vector): the
    stacked trainer's own forward (``corolla.models.stacked``), its ReLU tower if any, then
    Linear(·, 1)."""
    names = [k for k in params if k.startswith(("tower.", "affine."))]

    def score(idx, items):
        with torch.no_grad():
            return pfedrec_probs(params["item.weight"][idx], {k: params[k][idx] for k in names},
                                 items).cpu().numpy().astype(np.float32)

    return score
