"""K-means as scikit-learn's ``KMeans(n_clusters, random_state=seed, n_init=n)`` computes it, in
numpy (scikit-learn is a test dependency only): k-means++ seeding with the greedy local trials of
scikit-learn's ``_kmeans_plusplus`` drawn from ``numpy.random.RandomState(seed)``, then Lloyd's
iterations on the mean-centred data until the labels repeat or the squared centre shift is at most
``tol`` × the mean per-feature variance, the best of ``n_init`` runs by inertia (the runs share one
generator, as scikit-learn's). Used by the server sides of PerFedRec (its code clusters the user
table with ``KMeans(n_clusters=5, random_state=0)``, sichunluo/PerFedRec@4d0c8f0
``PerFedRec/PerFedRec.py:186``) and FedFast (k-means over the user embeddings, Muhammad et al.,
KDD'20, ActvSAMP/ActvAGG; docs/methods/fedfast.md).

``tests/test_perfedrec.py`` checks that the labels equal scikit-learn's on random data and on the
user tables of the authors' PerFedRec run (``tests/golden/perfedrec_tiny.npz``). The arithmetic is
float64 (scikit-learn keeps float32 input in float32), so points at a near tie between two centres
could be labelled differently; the tests have none.
"""

from __future__ import annotations

import numpy as np


def _sq_dist(a: np.ndarray, b: np.ndarray, b_sq: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances ``len(a) × len(b)``, clipped at 0 (``‖a‖² − 2ab + ‖b‖²``)."""
    a_sq = np.einsum("ij,ij->i", a, a)
    b_sq = np.einsum("ij,ij->i", b, b) if b_sq is None else b_sq
    d = a_sq[:, None] - 2.0 * (a @ b.T) + b_sq[None, :]
    return np.maximum(d, 0.0)


def kmeans_plusplus(x: np.ndarray, k: int, rs: np.random.RandomState) -> np.ndarray:
    """Initial centres (k × d) by k-means++ with ``2 + int(log k)`` greedy local trials per centre."""
    n = len(x)
    x_sq = np.einsum("ij,ij->i", x, x)
    trials = 2 + int(np.log(k))
    centers = np.empty((k, x.shape[1]))
    first = rs.choice(n, p=np.full(n, 1.0 / n))
    centers[0] = x[first]
    closest = _sq_dist(x[[first]], x, x_sq)[0]
    pot = closest.sum()
    for c in range(1, k):
        vals = rs.uniform(size=trials) * pot
        cand = np.searchsorted(np.cumsum(closest), vals)
        np.clip(cand, None, n - 1, out=cand)
        dist = np.minimum(closest, _sq_dist(x[cand], x, x_sq))
        pots = dist.sum(1)
        best = int(np.argmin(pots))
        pot, closest = pots[best], dist[best]
        centers[c] = x[cand[best]]
    return centers


def _assign(x: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = _sq_dist(x, centers)
    lab = np.argmin(d, 1)
    return lab, d[np.arange(len(x)), lab]


def lloyd(x: np.ndarray, centers: np.ndarray, max_iter: int, tol: float) -> tuple[np.ndarray, float]:
    """Lloyd's iterations from ``centers``; returns (labels, inertia). An empty cluster takes the
    point farthest from its centre (scikit-learn relocates the same way)."""
    k = len(centers)
    labels_old = np.full(len(x), -1)
    strict = False
    for _ in range(max_iter):
        labels, dist = _assign(x, centers)
        new = np.zeros_like(centers)
        counts = np.bincount(labels, minlength=k).astype(float)
        np.add.at(new, labels, x)
        empty = np.flatnonzero(counts == 0)
        if len(empty):
            far = np.argsort(-dist, kind="stable")[:len(empty)]
            for c, i in zip(empty, far):
                new[labels[i]] -= x[i]
                counts[labels[i]] -= 1
                new[c] = x[i]
                counts[c] = 1
                labels[i] = c
        new /= counts[:, None]
        shift = ((new - centers) ** 2).sum()
        centers = new
        if np.array_equal(labels, labels_old):
            strict = True
            break
        if shift <= tol:
            break
        labels_old = labels
    if not strict:
        labels, dist = _assign(x, centers)
    else:
        dist = _assign(x, centers)[1]
    return labels, float(dist.sum())


def _same_clustering(a: np.ndarray, b: np.ndarray, k: int) -> bool:
    """Whether two labellings are the same partition up to a renaming (scikit-learn's check)."""
    mapping = np.full(k, -1)
    for x, y in zip(a, b):
        if mapping[y] == -1:
            mapping[y] = x
        elif mapping[y] != x:
            return False
    return True


def kmeans(x: np.ndarray, k: int, seed: int, n_init: int = 1, max_iter: int = 300, tol: float = 1e-4) -> np.ndarray:
    """Labels (n,) of ``KMeans(n_clusters=k, random_state=seed, n_init=n_init)`` on ``x`` (n × d).
    ``k`` is capped at the number of distinct rows (scikit-learn would warn and leave clusters
    empty)."""
    x = np.asarray(x, np.float64)
    n = len(x)
    k = int(min(k, len(np.unique(x, axis=0)))) if n else 0
    if k <= 1:
        return np.zeros(n, np.int64)
    x = x - x.mean(0)
    tol_abs = float(np.mean(np.var(x, 0)) * tol)
    rs = np.random.RandomState(seed)
    best, best_inertia = None, None
    for _ in range(max(1, int(n_init))):
        labels, inertia = lloyd(x, kmeans_plusplus(x, k, rs), max_iter, tol_abs)
        if best is None or (inertia < best_inertia and not _same_clustering(labels, best, k)):
            best, best_inertia = labels, inertia
    return best.astype(np.int64)


def per_cluster_sample(available: list[int], labels: dict[int, int] | np.ndarray, m: int,
                       g: np.random.Generator) -> list[int]:
    """``m`` of ``available`` drawn cluster by cluster: ⌈m/p⌉ uniformly without replacement from
    each of the p clusters present (all of a smaller one), then trimmed or topped up uniformly to
    ``m``; sorted. FedFast's ActvSAMP (Muhammad et al., KDD'20: "m/p users uniformly from each
    cluster", docs/methods/fedfast.md) and PerFedRec's paper reading ("a few representative users
    from each cluster", docs/methods/perfedrec.md)."""
    avail = sorted(int(c) for c in available)
    if m >= len(avail):
        return avail
    groups: dict[int, list[int]] = {}
    for c in avail:
        groups.setdefault(int(labels[c]), []).append(c)
    per = -(-m // len(groups))
    chosen: list[int] = []
    for k in sorted(groups):
        mem = groups[k]
        take = min(per, len(mem))
        chosen += [mem[i] for i in g.choice(len(mem), size=take, replace=False)]
    if len(chosen) > m:
        chosen = [chosen[i] for i in sorted(g.choice(len(chosen), size=m, replace=False))]
    elif len(chosen) < m:
        rest = sorted(set(avail) - set(chosen))
        chosen += [rest[i] for i in g.choice(len(rest), size=m - len(chosen), replace=False)]
    return sorted(chosen)
