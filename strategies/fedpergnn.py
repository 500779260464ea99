"""FedPerGNN's server and matching party (Wu et al., Nat. Commun. 13:3091, 2022; the authors' code
wuch15/FedPerGNN 9e77e2e ``run.py:25-53``, ``expansion.py:6-63``; docs/methods/fedpergnn.md).

Round 1 has two setup phases before training (every available client):

* ``expand``: each client sends the pseudonyms of its history items and its user vector; the
  **matching party** (:class:`corolla.expansion.MatchingParty`, in the ServerApp process, its state
  kept apart from the aggregation's: the user vectors and the pseudonyms) registers them;
* ``match``: each client receives, per history item, up to ``fedpergnn-neighbours`` user vectors
  of the users holding that pseudonym (itself only with ``fedpergnn-include-self``), shuffled
  with a seed per (client, round) (expansion.py:21-59), as distinct rows and an H × K index.

Each round ``clients-per-round`` clients are sampled (the code's batch of 32 users). ``train``
sends the shared network and the item table (once per node) and each client fresh neighbour rows
built from the latest user vectors the party holds (the code re-expands every epoch with the
current user table, run.py:27-28); each client uploads its (noised) gradients and its new user
vector, which goes to the matching party only. The aggregation is FedSGD, one step per round
(the code's ``train_on_batch`` on the batch's 32 users, run.py:34):

    W ← W − lr · (1/B) Σ_c ∇W_c                     for every network weight
    q_i ← q_i − lr · Σ_c ∇q_{c,i} / B                 ('clients'; 'senders': / |{c sent row i}|)

``fedpergnn-noise-rule = reference`` then adds the code's noise to the new weights
(run.py:38-47): N(0, σ/√(M·B/I)) on every item-table entry, σ the std of the step's change of the
table (the code's ``now_weights[0]`` is the item table: it is written back with
``itemembedding_layer.set_weights``, run.py:42), and Laplace(0, lr·2δ/√B/ε) on every entry of
every network weight and of the item table. Evaluation (every client, with the next round's
message): the network and the item table once per node.
"""

from __future__ import annotations

import time
from logging import INFO

import numpy as np
from flwr.common.logger import log

from corolla.expansion import MatchingParty
from corolla.models import pergnn
from corolla.protocol import ArraySpec, PayloadError
from corolla.round import DEFAULT_CONTROL, Download, Phase
from corolla.util import rng
from strategies.base import ClientResult, CorollaStrategy


def neighbour_arrays(lists: list[list[int]], vectors: dict[int, np.ndarray], d: int,
                     k: int) -> tuple[np.ndarray, np.ndarray]:
    """What the matching party sends a client: the distinct user vectors its lists name (rows, in
    client-id order; no ids) and, per history slot, the indices of its neighbours into them
    (``len(lists)`` × ``k``, −1 = empty; ``k`` ≥ the longest list)."""
    users = sorted({v for lst in lists for v in lst})
    pos = {v: j for j, v in enumerate(users)}
    rows = np.stack([vectors[v] for v in users]).astype(np.float32) if users else np.zeros((0, d), np.float32)
    index = np.full((len(lists), max(1, k)), -1, np.int32)
    for h, lst in enumerate(lists):
        index[h, :len(lst)] = [pos[v] for v in lst]
    return rows, index


class FedPerGNN(CorollaStrategy):
    counted_phases = (Phase.TRAIN,)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.weights: dict[str, np.ndarray] = {}
        self.items: np.ndarray | None = None
        self.party = MatchingParty(cfg["seed"], 0, self.p.fedpergnn_neighbours)
        self.vectors: dict[int, np.ndarray] = {}   # the matching party's user vectors
        self.matched = False

    def setup(self) -> None:
        if self.items is not None:   # resumed
            return
        d = self.cfg["dim"]
        self.weights = pergnn.init_weights(d, rng(self.cfg["seed"], "fedpergnn-weights"))
        self.items = rng(self.cfg["seed"], "fedpergnn-items").uniform(
            -pergnn.EMB_SCALE, pergnn.EMB_SCALE, (self.n_items, d)).astype(np.float32)

    def summary(self) -> None:
        log(INFO, "FedPerGNN: %s", {k: self.cfg[k] for k in self.cfg if k.startswith("fedpergnn-")
                                      or k in ("clients-per-round", "dim", "lr", "num-rounds")})

    # ------------------------------------------------------------------ phases
    def phases(self, rnd):
        return [Phase.TRAIN] if self.matched else [Phase.EXPAND, Phase.MATCH, Phase.TRAIN]

    def phase_targets(self, phase, rnd, sampled):
        return self.available() if phase in (Phase.EXPAND, Phase.MATCH) else sampled

    def neighbours_of(self, cid: int, rnd: int) -> dict[str, np.ndarray]:
        """The matching party's reply to ``cid`` in round ``rnd`` (a query: seeded per client and round)."""
        d = self.cfg["dim"]
        if cid not in self.party.items_of:
            return {"nbr.rows": np.zeros((0, d), np.float32), "nbr.index": np.full((0, 1), -1, np.int32)}
        lists = self.party.per_item(cid, rng(self.cfg["seed"], "fedpergnn-neighbours", cid, rnd),
                                    self.p.fedpergnn_include_self)
        k = self.p.fedpergnn_neighbours or max((len(x) for x in lists), default=1)
        rows, index = neighbour_arrays(lists, self.vectors, d, k)
        return {"nbr.rows": rows, "nbr.index": index}

    def shared(self) -> dict[str, np.ndarray]:
        return {**self.weights, "item.weight": self.items}

    def configure_phase(self, phase, rnd, targets):
        if phase == Phase.EXPAND:
            return Download()
        personal = {c: self.neighbours_of(c, rnd) for c in targets}
        return Download({} if phase == Phase.MATCH else self.shared(), personal)

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        d = self.cfg["dim"]
        if phase == Phase.MATCH:
            return {}
        if phase == Phase.EXPAND:
            n = min(int(self.clients[cid]["train"]), self.p.fedpergnn_history_len)
            return {"hashes": ArraySpec((n,), "int64"), "user.emb": ArraySpec((d,), "float32")}
        out = {k: ArraySpec(v.shape, "float32") for k, v in self.weights.items()}
        out["item.ids"] = ArraySpec((-1,), "int32", max_shape=(self.n_items,))
        out["item.grads"] = ArraySpec((-1, d), "float32", max_shape=(self.n_items, d))
        out["user.emb"] = ArraySpec((d,), "float32")
        return out

    def accept(self, phase, rnd, cid, result: ClientResult) -> ClientResult:
        if phase == Phase.TRAIN:
            ids, rows = result.payload["item.ids"], result.payload["item.grads"]
            if len(ids) != len(rows):
                raise PayloadError(f"'item.ids': {len(ids)} row ids for {len(rows)} gradient rows")
            if len(ids) and (ids[0] < 0 or ids[-1] >= self.n_items or (len(ids) > 1 and (np.diff(ids) <= 0).any())):
                raise PayloadError(f"'item.ids': expected sorted distinct row ids in [0, {self.n_items})")
        return super().accept(phase, rnd, cid, result)

    def aggregate_phase(self, phase, rnd, results):
        if phase == Phase.EXPAND:
            for c in sorted(results):
                self.party.register(c, results[c].payload["hashes"])
                self.vectors[c] = np.asarray(results[c].payload["user.emb"], np.float32)
            return {"expanded": len(results)}
        if phase == Phase.MATCH:
            self.matched = True
            return {}
        if not results:
            return {"clients": 0}
        t0 = time.perf_counter()
        cids = sorted(results)
        b = len(cids)
        lr = float(self.cfg["lr"])
        old_items = self.items.copy()
        for k in self.weights:
            mean = np.mean([results[c].payload[k].astype(np.float64) for c in cids], 0)
            self.weights[k] = (self.weights[k] - lr * mean).astype(np.float32)
        acc = np.zeros(self.items.shape, np.float64)
        cnt = np.zeros(len(self.items), np.float64)
        for c in cids:
            ids = results[c].payload["item.ids"].astype(np.int64)
            np.add.at(acc, ids, results[c].payload["item.grads"].astype(np.float64))
            cnt[ids] += 1
        step = acc / b if self.p.fedpergnn_item_agg == "clients" else acc / np.maximum(cnt, 1)[:, None]
        self.items = (self.items - lr * step).astype(np.float32)
        if self.p.fedpergnn_noise_rule == "reference":
            self.reference_noise(rnd, b, old_items)
        for c in cids:
            self.vectors[c] = np.asarray(results[c].payload["user.emb"], np.float32)
        losses = [results[c].metrics.get("train-loss", np.nan) for c in cids]
        return {"clients": b, "train-loss": float(np.nanmean(losses)), "item-rows": int((cnt > 0).sum()),
                "server-s": time.perf_counter() - t0}

    def reference_noise(self, rnd: int, b: int, old_items: np.ndarray) -> None:
        """The code's noise after a step (run.py:38-47): the pseudo items' Gaussian on the item table,
        then Laplace(lr·2δ/√B/ε) on every weight."""
        g = rng(self.cfg["seed"], "fedpergnn-server-noise", rnd)
        m = self.p.fedpergnn_pseudo_items
        if m > 0:
            sigma = float(np.std(self.items.astype(np.float64) - old_items))
            sd = sigma / np.sqrt(m * b / self.items.shape[0])
            self.items = (self.items + g.normal(0.0, sd, self.items.shape)).astype(np.float32)
        lam = float(self.cfg["lr"]) * 2 * self.p.fedpergnn_clip / np.sqrt(b) / self.p.fedpergnn_epsilon
        self.items = (self.items + g.laplace(0.0, lam, self.items.shape)).astype(np.float32)
        self.weights = {k: (v + g.laplace(0.0, lam, v.shape)).astype(np.float32) for k, v in self.weights.items()}

    def evaluate_download(self, rnd, targets):
        return Download(self.shared())

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self):
        out = {f"w/{k}": v for k, v in self.weights.items()}
        out["items"] = self.items
        out["matched"] = np.array([int(self.matched)])
        for c, h in self.party.items_of.items():
            out[f"hashes/{c}"] = h
        for c, v in self.vectors.items():
            out[f"vector/{c}"] = v
        return out

    def load_state_dict(self, state):
        self.weights = {k[2:]: v for k, v in state.items() if k.startswith("w/")}
        self.items = state.get("items")
        self.matched = bool(state.get("matched", np.array([0]))[0])
        for k, v in state.items():
            if k.startswith("hashes/"):
                self.party.register(int(k.split("/")[1]), v)
            elif k.startswith("vector/"):
                self.vectors[int(k.split("/")[1])] = v
