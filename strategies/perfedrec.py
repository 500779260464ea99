"""PerFedRec server side (Luo et al., CIKM 2022; the authors' code sichunluo/PerFedRec@4d0c8f0,
``PerFedRec/PerFedRec.py:36-206``; docs/methods/perfedrec.md) on FedCA's one-user harness.

State: the global shared parameters G (item table, NCF tower), the K cluster models C_k (from the
end of round 2), the server's copy U of every client's user vector (a client not heard from yet:
its initial vector, which the server can compute), the labels of the last K-means and those the
last cluster models were built with.

Round t (the code's ``epoch`` t − 1):

1. clients (:meth:`PerFedRec.sample`): round 1 ``clients-per-round`` uniformly; later
   (``perfedrec-sampling = code``) a share uniformly without replacement and the rest with
   replacement ∝ the size of the user's cluster, de-duplicated and topped up uniformly
   (``PerFedRec.py:191-201``: :func:`code_sample`), or ⌈m/K⌉ per cluster (``per-cluster``);
2. download (from round ``perfedrec-cluster-from``, the code's ``epoch > 1``, ``:82-84``): G and every
   C_k once per node, each client its label of the last K-means; earlier rounds G only;
3. aggregation (``:119-132``, :func:`mean_tables`, :func:`cluster_means`): G = the mean of the
   uploads (unweighted as the code's ``FedAvg``, ``:27-33``); U[u] = the uploaded user vectors;
   from round 2, C_k = the mean of the uploads of the clients whose label (of the K-means before
   this round) is k, G where there is none (``:126-132``); then K-means (K, ``random_state`` = seed,
   ``corolla.kmeans``) over U of every client (``:183-187``);
4. evaluation of every client (``:135-180``), with the next round's message: G and the C_k it
   built, each client the label its upload was filed under; the client scores its candidates with
   the mean of the three models (``client_app.perfedrec``).

As in the code, the labels a client starts round t + 1 with come from the K-means run after round
t, while the cluster models they index were built with the labels before it (``:82`` indexes
``w_cluster_avg`` of epoch t with ``clu_result`` of epoch t).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from corolla.kmeans import kmeans, per_cluster_sample
from corolla.round import Download
from corolla.util import rng
from strategies.aggregation import weighted_mean
from strategies.user_vectors import UserVectorStrategy, mean_train_loss


def cluster_key(k: int, name: str) -> str:
    """The download name of cluster k's tensor ``name``."""
    return f"cluster{k}.{name}"


def mean_tables(uploads: list[dict[str, np.ndarray]], names, weights: list[float] | None = None) -> dict[str, np.ndarray]:
    """The (weighted) mean of ``names`` over ``uploads``, in list order (the code's ``FedAvg``)."""
    # no weights, or weights a client set to 0 (num-examples = 0 passes the exchange): the plain mean
    w = [1.0] * len(uploads) if weights is None or sum(weights) <= 0 else weights
    return weighted_mean([{k: u[k] for k in names} for u in uploads], w)


def cluster_means(uploads: dict[int, dict[str, np.ndarray]], labels: dict[int, int] | np.ndarray, k: int,
                  fallback: dict[str, np.ndarray], names, weights: dict[int, float] | None = None
                  ) -> list[dict[str, np.ndarray]]:
    """C_j = the mean of the uploads of the clients labelled j (client order); ``fallback`` (the
    global model) for a cluster with none (``PerFedRec.py:126-132``). A client without a label (it
    joined after the K-means) is in no cluster's mean."""
    if isinstance(labels, dict):
        uploads = {c: u for c, u in uploads.items() if c in labels}
    out = []
    for j in range(k):
        mem = [c for c in sorted(uploads) if int(labels[c]) == j]
        if mem:
            out.append(mean_tables([uploads[c] for c in mem], names, None if weights is None else [weights[c] for c in mem]))
        else:
            out.append({n: fallback[n] for n in names})
    return out


def code_sample(available: list[int], labels, m: int, share: float, g: np.random.Generator) -> list[int]:
    """The code's draw (``PerFedRec.py:189-201``): ``int(m·share)`` uniformly without replacement,
    ``int(m·(1 − share))`` with replacement with probability ∝ the size of the client's cluster
    (a cluster is drawn ∝ size²), the union, topped up with uniform draws until ``m``; sorted."""
    avail = np.array(sorted(int(c) for c in available))
    if m >= len(avail):
        return avail.tolist()
    lab = np.array([int(labels[c]) for c in avail])
    sizes = np.bincount(lab)[lab].astype(np.float64)
    chosen = set(avail[g.choice(len(avail), size=int(m * share), replace=False)].tolist())
    chosen |= set(avail[g.choice(len(avail), size=int(m * (1 - share)), replace=True, p=sizes / sizes.sum())].tolist())
    while len(chosen) < m:
        chosen.add(int(avail[g.integers(len(avail))]))
    return sorted(chosen)


class PerFedRec(UserVectorStrategy):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.C: list[dict[str, np.ndarray]] | None = None
        self.built_with: dict[int, int] | None = None    # the labels the cluster models were built with

    @property
    def names(self) -> list[str]:
        return list(self.G)

    def uses_clusters(self, rnd: int) -> bool:
        return self.C is not None and rnd >= self.p.perfedrec_cluster_from

    # -------------------------------------------------------------- train
    def sample(self, rnd, available):
        m = self.round_size(len(available))
        if self.labels is None or m >= len(available):
            return super().sample(rnd, available)
        g = rng(self.cfg["seed"], "sample", rnd)
        known = {c: self.labels.get(c, 0) for c in available}
        if self.p.perfedrec_sampling == "per-cluster":
            return per_cluster_sample(available, known, m, g)
        return code_sample(available, known, m, self.p.perfedrec_uniform_share, g)

    def tables(self, rnd: int) -> dict[str, np.ndarray]:
        """The shared download of round ``rnd``: G, and the cluster models once they are used."""
        out = dict(self.G)
        if self.uses_clusters(rnd):
            for k, ck in enumerate(self.C):
                out.update({cluster_key(k, n): v for n, v in ck.items()})
        return out

    def configure_phase(self, phase, rnd, targets):
        personal = {}
        if self.uses_clusters(rnd):
            personal = {c: {"cluster": np.array([self.labels.get(c, 0)], np.int64)} for c in targets}
        return Download(self.tables(rnd), personal)


    def aggregate_phase(self, phase, rnd, results):
        uploads = self.held_uploads(rnd)
        if not uploads:
            return {"clients": len(results)}
        t0 = time.perf_counter()
        cids = sorted(uploads)
        pay = {c: uploads[c].payload for c in cids}
        w = {c: float(uploads[c].metrics["num-examples"]) if self.p.perfedrec_weighted else 1.0 for c in cids}
        self.G = mean_tables([pay[c] for c in cids], self.names, [w[c] for c in cids])
        for c in cids:
            self.U[c] = np.asarray(pay[c]["user.weight"], np.float32)
        if self.labels is not None:   # the code: from epoch 1, filed under the labels of the K-means before
            self.built_with = dict(self.labels)
            self.C = cluster_means(pay, self.built_with, self.p.perfedrec_clusters, self.G, self.names, w)
        order = sorted(self.U)
        lab = kmeans(np.concatenate([self.U[c] for c in order]), self.p.perfedrec_clusters, int(self.cfg["seed"]),
                     self.p.perfedrec_kmeans_init)
        self.labels = {c: int(x) for c, x in zip(order, lab)}
        sizes = np.bincount(lab, minlength=self.p.perfedrec_clusters)
        return {"clients": len(results), "train-loss": mean_train_loss(results),
            "clusters": int((sizes > 0).sum()), "largest-cluster": int(sizes.max()), "server-s": time.perf_counter() - t0}

    # -------------------------------------------------------------- evaluate
    def evaluate_download(self, rnd, targets):
        """G and the cluster models of round ``rnd``; each client the label its upload was filed
        under (the code evaluates before it re-clusters, ``PerFedRec.py:135-180``)."""
        personal = {}
        if self.uses_clusters(rnd) and self.built_with is not None:
            personal = {c: {"cluster": np.array([self.built_with.get(c, 0)], np.int64)} for c in targets}
        return Download(self.tables(rnd), personal)

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        out = {f"global/{k}": v for k, v in self.G.items()}
        for k, ck in enumerate(self.C or []):
            out.update({f"cluster/{k}/{n}": v for n, v in ck.items()})
        order = sorted(self.U)
        out["users/ids"] = np.array(order, np.int64)
        out["users/vectors"] = np.concatenate([self.U[c] for c in order]) if order else np.zeros((0, 1), np.float32)
        for name, lab in (("labels", self.labels), ("built-with", self.built_with)):
            if lab is not None:
                out[f"{name}/ids"] = np.array(sorted(lab), np.int64)
                out[f"{name}/values"] = np.array([lab[c] for c in sorted(lab)], np.int64)
        return out

    def load_state_dict(self, state):
        self.G = {k[len("global/"):]: v for k, v in state.items() if k.startswith("global/")}
        clusters: dict[int, dict[str, np.ndarray]] = {}
        for key, v in state.items():
            if key.startswith("cluster/"):
                _, k, n = key.split("/", 2)
                clusters.setdefault(int(k), {})[n] = v
        self.C = [clusters[k] for k in sorted(clusters)] or None
        if "users/ids" in state:
            self.U = {int(c): state["users/vectors"][j:j + 1] for j, c in enumerate(state["users/ids"])}
        self.labels = self.built_with = None
        if "labels/ids" in state:
            self.labels = {int(c): int(x) for c, x in zip(state["labels/ids"], state["labels/values"])}
        if "built-with/ids" in state:
            self.built_with = {int(c): int(x) for c, x in zip(state["built-with/ids"], state["built-with/values"])}
