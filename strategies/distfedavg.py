"""Dist-FedAvg server and its baselines on expanded local graphs (docs/methods/distfedavg.md;
paper §3, Algorithms 1–2 reconstructed, Eq. 1, 3–9).

Round 1 has two setup phases before training:

* ``expand`` (every client): each sends its salted hashed training item ids to the **matching
  party** (the paper's trusted third party) and the plain ids of the rows it will pull. In Corolla
  the matching party is :class:`corolla.expansion.MatchingParty`, a component of the ServerApp process kept apart
  from the aggregation state: it learns, per client, the salted hashes of its items (the salt is
  the run's seed, so a party that knows the item universe could invert them: the hashing protects
  only against an outside observer, as the paper drops FedPerGNN's pseudo-items and noise) and
  which clients share items; the aggregation side learns each client's neighbour ids and the ids of
  the rows it pulls — its training items, so the whole training graph;
* ``match`` (every client): each receives its expanded users U_c and the shared-item edges.

Each round: ``clients-per-round`` clients are sampled; each pulls the rows of {a_c} ∪ U_c and of
its items and requested negatives, trains, and uploads them with ids. Users are aggregated by
``user-agg`` (Dist-FedAvg's inverse-distance rule with α_r, or a baseline rule), items by
``item-agg``, row by row over the clients that hold each row (``corolla.rowagg``); rows nobody
held keep their value. Evaluation: every client ranks all items with its user row and the item
table (sent once per node) — by default LightGCN-propagated over that training graph (docs/methods/distfedavg.md, the
paper's numbers), with ``eval-embeddings = layer0`` the global tables as they are.
"""

from __future__ import annotations

import time
from logging import INFO

import numpy as np
from flwr.common.logger import log

from corolla import rowagg
from corolla.expansion import MatchingParty
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Download, Phase
from corolla.util import rng
from strategies.base import CorollaStrategy


class RowAggregation(CorollaStrategy):
    """Dist-FedAvg (``method = distfedavg``) and the baselines (``fedavg``, ``fcf`` = SimpleAvg,
    ``fedmedian``, ``fedatt``) with ``harness = expanded``: their declarations
    (``corolla/methods/``) set :attr:`rule`."""

    counted_phases = (Phase.TRAIN,)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.users: np.ndarray | None = None          # global user table (rows = logical clients)
        self.items: np.ndarray | None = None
        self.neighbours: dict[int, np.ndarray] = {}
        self.item_ids: dict[int, np.ndarray] = {}     # the client's training items (sorted)
        self.requests: dict[int, np.ndarray] = {}
        self.matched = False
        self.matcher = MatchingParty(cfg["seed"], self.p.max_items, self.p.max_neighbors_per_item)
        self._match: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._train_graph = None    # the training graph the expansion revealed (propagated evaluation)

    def summary(self) -> None:
        keys = ("method", "user-agg", "item-agg", "distance-mode", "minkowski-p", "alpha-schedule",
                "clients-per-round", "local-epochs", "gcn-layers", "dim", "lr")
        log(INFO, "%s: %s", type(self).__name__, {k: self.cfg[k] for k in keys})

    def setup(self) -> None:
        if self.users is not None:   # resumed from a checkpoint
            return
        g = rng(self.cfg["seed"], "global-init")
        n_users = max(self.clients) + 1
        d = self.cfg["dim"]
        self.users = (g.standard_normal((n_users, d)) * self.cfg["init-std"]).astype(np.float32)
        self.items = (g.standard_normal((self.n_items, d)) * self.cfg["init-std"]).astype(np.float32)

    rule: str | None = None   # a baseline's rule for user and item rows (the method table); None: user-agg/item-agg

    @property
    def user_rule(self) -> str:
        return self.rule or self.p.user_agg

    @property
    def item_rule(self) -> str:
        return self.rule or self.p.item_agg

    # -------------------------------------------------------------- phases
    def phases(self, rnd):
        return [Phase.TRAIN] if self.matched else [Phase.EXPAND, Phase.MATCH, Phase.TRAIN]

    def phase_targets(self, phase, rnd, sampled):
        return self.available() if phase in (Phase.EXPAND, Phase.MATCH) else sampled

    def configure_phase(self, phase, rnd, targets):
        if phase == Phase.EXPAND:
            return Download()
        if phase == Phase.MATCH:
            return Download({}, {c: {"neighbours": self._match[c][0], "edges": self._match[c][1]}
                                 for c in targets if c in self._match})
        personal = {}
        for c in targets:
            if c not in self.item_ids:
                continue
            uids = np.concatenate([[c], self.neighbours[c]]).astype(np.int64)
            iids = np.concatenate([self.item_ids[c], self.requests[c]]).astype(np.int64)
            personal[c] = {"user.ids": uids, "user.rows": self.users[uids], "item.ids": iids,
                           "item.rows": self.items[iids]}
        return Download({}, personal)

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        d = self.cfg["dim"]
        if phase == Phase.MATCH:
            return {}
        if phase == Phase.EXPAND:
            n = self.clients[cid]["train"]
            return {"hashes": ArraySpec((n,), "int64"), "items": ArraySpec((n,), "int64"),
                    "request": ArraySpec((len_request(self.p, self.n_items, n),), "int64")}
        nu = 1 + len(self.neighbours.get(cid, []))
        ni = len(self.item_ids.get(cid, [])) + len(self.requests.get(cid, []))
        return {"user.ids": ArraySpec((nu,), "int64"), "user.rows": ArraySpec((nu, d), "float32"),
                "item.ids": ArraySpec((ni,), "int64"), "item.rows": ArraySpec((ni, d), "float32"),
                "request": ArraySpec((len(self.requests.get(cid, [])),), "int64")}

    def aggregate_phase(self, phase, rnd, results):
        if phase == Phase.EXPAND:
            for c in sorted(results):
                self.matcher.register(c, results[c].payload["hashes"])
                self.item_ids[c] = results[c].payload["items"]
                self.requests[c] = results[c].payload["request"]
            t0 = time.perf_counter()
            self._match = self.matcher.match()
            self.neighbours = {c: m[0] for c, m in self._match.items()}
            sizes = [len(v) for v in self.neighbours.values()]
            return {"expanded-users-mean": float(np.mean(sizes)) if sizes else 0.0, "match-s": time.perf_counter() - t0}
        if phase == Phase.MATCH:
            self.matched = True
            return {}
        t0 = time.perf_counter()
        user_rows: dict[int, list] = {}
        item_rows: dict[int, list] = {}
        n_c, anchors = {}, {}
        for c in sorted(results):
            p = results[c].payload
            for uid, row in zip(p["user.ids"].tolist(), p["user.rows"]):
                user_rows.setdefault(int(uid), []).append((c, row))
            for iid, row in zip(p["item.ids"].tolist(), p["item.rows"]):
                item_rows.setdefault(int(iid), []).append((c, row))
            n_c[c] = float(results[c].metrics["num-examples"])
            anchors[c] = c
            self.requests[c] = p["request"]
        cfg = self.cfg
        prm = self.p
        a_r = rowagg.alpha(rnd, prm.alpha_schedule, prm.alpha0, prm.alpha_min, prm.alpha_delta,
                           prm.alpha_period, prm.alpha_fixed, prm.alpha_warmup)
        extra = {}
        if "fedatt" in (self.user_rule, self.item_rule):   # FedAtt's keys: its own declaration's, or named by Dist-FedAvg's
            extra = {"fedatt": (prm.fedatt_epsilon, float(prm.fedatt_ord), prm.fedatt_dp),
                     "g": rng(cfg["seed"], "fedatt-dp", rnd), "fedatt_weights": prm.fedatt_weights}
        self.users = rowagg.aggregate_rows(self.user_rule, self.users, user_rows, n_c, anchors, a_r,
                                           prm.distance_mode, prm.minkowski_p, prm.distance_eps, **extra)
        self.items = rowagg.aggregate_rows(self.item_rule, self.items, item_rows, n_c, anchors, a_r,
                                           prm.distance_mode, prm.minkowski_p, prm.distance_eps, **extra)
        losses = [r.metrics.get("train-loss", np.nan) for r in results.values()]
        return {"clients": len(results), "alpha": a_r, "train-loss": float(np.nanmean(losses)) if losses else np.nan,
                "user-rows": len(user_rows), "item-rows": len(item_rows), "server-s": time.perf_counter() - t0}

    # -------------------------------------------------------------- evaluation
    def evaluation_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The (user, item) tables the clients rank with: ``eval-embeddings = propagated`` (docs/methods/distfedavg.md's
        default) — LightGCN propagation of the global tables over the training graph, which the
        server knows from the expansion (every client sent the ids of its training items);
        ``layer0`` — the global tables as they are."""
        if self.p.eval_embeddings == "layer0":
            return self.users, self.items
        import torch

        from corolla.models.lightgcn import normalized_adjacency, propagate as lightgcn

        if self._train_graph is None:
            us = np.concatenate([np.full(len(v), c, np.int64) for c, v in sorted(self.item_ids.items())])
            its = np.concatenate([v for _, v in sorted(self.item_ids.items())])
            self._train_graph = normalized_adjacency(len(self.users), self.n_items, us, its).to_sparse_csr()
        x = torch.as_tensor(np.concatenate([self.users, self.items]))
        with torch.no_grad():
            p = lightgcn(self._train_graph, x, self.cfg["gcn-layers"]).numpy()
        return p[: len(self.users)], p[len(self.users):]

    def evaluate_download(self, rnd, targets):
        users, items = self.evaluation_tables()
        return Download({"item.table": items}, {c: {"user.row": users[c]} for c in targets})

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        out = {"users": self.users, "items": self.items, "matched": np.array([int(self.matched)])}
        for c in self.item_ids:
            out[f"items-of/{c}"] = self.item_ids[c]
            out[f"requests/{c}"] = self.requests[c]
            out[f"neighbours/{c}"] = self.neighbours.get(c, np.zeros(0, np.int64))
        return out

    def load_state_dict(self, state):
        self.users, self.items = state.get("users"), state.get("items")
        self.matched = bool(state.get("matched", np.array([0]))[0])
        for k, v in state.items():
            if "/" in k:
                kind, c = k.split("/")
                {"items-of": self.item_ids, "requests": self.requests, "neighbours": self.neighbours}[kind][int(c)] = v


def len_request(prm, n_items: int, n_train: int) -> int:
    """How many negative rows a client asks for (bounded by its never-interacted items)."""
    return int(prm.neg_pool_size)
