"""FedFast server side (Muhammad et al., KDD 2020, Algorithm 1 with ActvSAMP and ActvAGG
(Algorithm 2); no code was published; docs/methods/fedfast.md) on FedCA's one-user harness.

State: the global shared parameters G (item table, NCF tower), the server's copy U of every
user's vector (a client not heard from yet: its initial vector) and the labels of the last
K-means.

Round t:

1. ActvSAMP (:meth:`FedFast.sample`): round 1 — or ``fedfast-sampling = uniform`` — FedAvg's
   uniform draw of ``clients-per-round``; later ⌈m/p⌉ uniformly from each of the p clusters
   (``corolla.kmeans.per_cluster_sample``);
2. download: G once per node, each sampled client its U[u];
3. ActvAGG over the valid uploads S (:func:`actvagg`): the tower's tensors ← the ``num-examples``
   weighted mean (Algorithm 2 l.3); each item row i ← Σ_k q_k[i] Q_k[i] / Σ_k q_k[i] with q_k[i]
   the norm of delegate k's change of that row from G (``fedfast-item-weight``; rows no delegate
   changed stay, l.6-12); the delegates' user vectors are copied into U (l.15); all of U is
   re-clustered (l.18); the other users of each cluster c with delegates S_c get
   U[s] += γ_t · mean_{k ∈ S_c}(p_k − U_old[k]) (l.20-30), γ_t = γ₀·decay^(t−1);
4. evaluation (``fedfast-eval = global``, with the next round's message): every client with G and
   its U[u].
"""

from __future__ import annotations

import time

import numpy as np

from corolla.kmeans import kmeans, per_cluster_sample
from corolla.models.factory import one_user_init
from corolla.round import Download
from corolla.util import rng
from strategies.aggregation import weighted_mean
from strategies.user_vectors import UserVectorStrategy, mean_train_loss


def row_weights(new: np.ndarray, old: np.ndarray, how: str) -> np.ndarray:
    """q[i] of one delegate's table: the L1 or L2 norm of its change of row i, or 1 if it
    changed it (``count``)."""
    diff = np.asarray(new, np.float64) - np.asarray(old, np.float64)
    if how == "l1":
        return np.abs(diff).sum(1)
    if how == "l2":
        return np.sqrt((diff * diff).sum(1))
    if how == "count":
        return (diff != 0).any(1).astype(np.float64)
    raise ValueError(f"fedfast-item-weight: expected 'l1', 'l2' or 'count', got {how!r}")


def active_items(tables: list[np.ndarray], base: np.ndarray, how: str) -> np.ndarray:
    """ActvAGG's item rule: row i = Σ_k q_k[i] T_k[i] / Σ_k q_k[i], ``base[i]`` where Σ_k q_k[i] = 0."""
    num = np.zeros(base.shape, np.float64)
    den = np.zeros(base.shape[0], np.float64)
    for t in tables:
        q = row_weights(t, base, how)
        num += q[:, None] * t
        den += q
    out = np.array(base, np.float64, copy=True)
    moved = den > 0
    out[moved] = num[moved] / den[moved, None]
    return out.astype(base.dtype)


def propagate(users: dict[int, np.ndarray], old: dict[int, np.ndarray], labels: dict[int, int], gamma: float
              ) -> dict[int, np.ndarray]:
    """ActvAGG's user rule after the delegates' vectors are copied into ``users``: every user s
    that is not a delegate (not in ``old``) gets users[s] + γ · mean of its cluster's delegate
    updates (users[k] − old[k]); clusters without a delegate are unchanged."""
    delta: dict[int, list[np.ndarray]] = {}
    for k in sorted(old):
        delta.setdefault(labels[k], []).append(np.asarray(users[k], np.float64) - old[k])
    mean = {c: np.mean(v, 0) for c, v in delta.items()}
    out = dict(users)
    if gamma == 0:
        return out
    for s in sorted(users):
        if s not in old and labels[s] in mean:
            out[s] = (users[s] + gamma * mean[labels[s]]).astype(np.float32)
    return out


class FedFast(UserVectorStrategy):

    def gamma(self, rnd: int) -> float:
        return float(self.p.fedfast_gamma) * float(self.p.fedfast_gamma_decay) ** (rnd - 1)

    # -------------------------------------------------------------- train
    def sample(self, rnd, available):
        m = self.round_size(len(available))
        if self.p.fedfast_sampling == "uniform" or self.labels is None or m >= len(available):
            return super().sample(rnd, available)
        return per_cluster_sample(available, {c: self.labels.get(c, 0) for c in available}, m,
                                  rng(self.cfg["seed"], "sample", rnd))

    def configure_phase(self, phase, rnd, targets):
        return Download(dict(self.G), {c: {"user.weight": self.U[c]} for c in targets if c in self.U})


    def aggregate_phase(self, phase, rnd, results):
        uploads = self.held_uploads(rnd)
        if not uploads:
            return {"clients": len(results)}
        t0 = time.perf_counter()
        cids = sorted(uploads)
        pay = [uploads[c].payload for c in cids]
        n = [float(uploads[c].metrics["num-examples"]) for c in cids]
        tower = [k for k in self.G if k != "item.weight"]
        new = weighted_mean([{k: p[k] for k in tower} for p in pay], n if sum(n) > 0 else [1.0] * len(n)) if tower else {}
        new["item.weight"] = active_items([p["item.weight"] for p in pay], self.G["item.weight"],
                                          self.p.fedfast_item_weight)
        moved = int((new["item.weight"] != self.G["item.weight"]).any(1).sum())
        self.G = {k: new[k] for k in self.G}
        for c in cids:   # a client that joined after setup: the vector it started from (one_user_init)
            self.U.setdefault(c, one_user_init(self.cfg, c))
        old = {c: np.asarray(self.U[c], np.float64) for c in cids}
        for c, p in zip(cids, pay):
            self.U[c] = np.asarray(p["user.weight"], np.float32)
        order = sorted(self.U)
        lab = kmeans(np.concatenate([self.U[c] for c in order]), self.p.fedfast_clusters, int(self.cfg["seed"]),
                     self.p.fedfast_kmeans_init)
        self.labels = {c: int(x) for c, x in zip(order, lab)}
        self.U = propagate(self.U, old, self.labels, self.gamma(rnd))
        return {"clients": len(results), "train-loss": mean_train_loss(results), "moved-rows": moved,
            "clusters": int(len(set(lab.tolist()))), "server-s": time.perf_counter() - t0}

    # -------------------------------------------------------------- evaluate
    def evaluate_download(self, rnd, targets):
        """G once per node and each client its user vector as the server holds it."""
        return Download(dict(self.G), {c: {"user.weight": self.U[c]} for c in targets if c in self.U})

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        out = {f"global/{k}": v for k, v in self.G.items()}
        order = sorted(self.U)
        out["users/ids"] = np.array(order, np.int64)
        out["users/vectors"] = np.concatenate([self.U[c] for c in order]) if order else np.zeros((0, 1), np.float32)
        if self.labels is not None:
            out["labels/values"] = np.array([self.labels[c] for c in order], np.int64)
        return out

    def load_state_dict(self, state):
        self.G = {k[len("global/"):]: v for k, v in state.items() if k.startswith("global/")}
        ids = [int(c) for c in state.get("users/ids", [])]
        self.U = {c: state["users/vectors"][j:j + 1] for j, c in enumerate(ids)}
        self.labels = ({c: int(x) for c, x in zip(ids, state["labels/values"])} if "labels/values" in state else None)
