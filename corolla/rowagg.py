"""Row-wise aggregation of embedding tables (Dist-FedAvg and its baselines; docs/methods/distfedavg.md;
Dist-FedAvg paper §3.3, §4, Eq. 1, 3–9; Algorithm 2). Pure numpy.

Each selected client c uploads copies of some rows of a global table (its anchor user a_c and its
expanded neighbours U_c for the user table; the items of its local graph for the item table).
A row is aggregated over the clients that hold it ("holders"); rows nobody holds keep their
previous value.

* FedAvg (Eq. 1): Σ_c n_c w_c / Σ_c n_c over the holders (n_c: the client's local edges);
* SimpleAvg: the unweighted mean;
* FedMedian (Yin et al. 2018): the coordinate-wise median;
* FedAtt (Ji et al. 2019) per row: att = softmax_c(‖w_prev − w_c‖_ord),
  w = w_prev − ε Σ_c att_c (w_prev − w_c) + dp·N(0, I);
* Dist-FedAvg for user rows (Eq. 3–7): an expanded copy E_u^c of a non-anchor user u is weighted
  by W_uc = 1 / (D_uc + ε), D a Minkowski distance (Eq. 3) in one of three readings
  (``distance-mode``, docs/methods/distfedavg.md: ``B`` d(E_u^{r−1}, E_{a_c}^{r−1}) user to anchor on the previous
  table, ``A`` d(E_u^c, E_u^{r−1}) the copy's drift, ``C`` d(E_u^c, E_{a_c}^{r−1}) the copy to
  the anchor); Ē_u = Σ_c W_uc E_u^c / Σ_c W_uc (Eq. 5–6); if u's own client was selected,
  E_u = α_r E_u^u + (1 − α_r) Ē_u (Eq. 7), else Ē_u (α = 0); with no expanded copy, the anchor's
  own copy; α_r from :func:`alpha` (Eq. 8–9).
"""

from __future__ import annotations

import numpy as np

from corolla.composite import fedatt_weights


def minkowski(x: np.ndarray, y: np.ndarray, p: float) -> np.ndarray:
    """Row-wise (Σ_k |x_k − y_k|^p)^(1/p) (Eq. 3)."""
    return np.power(np.sum(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** p, -1), 1.0 / p)


def alpha(rnd: int, schedule: str, alpha0: float = 1.0, alpha_min: float = 0.0, delta: float = 0.0,
          period: int = 1, fixed: float = 1.0, warmup: int = 0) -> float:
    """α_r of Eq. 7: ``fixed``; ``arithmetic`` max(α_min, α_0 − δ·⌊r/T⌋) (Eq. 8); ``geometric``
    max(α_min, α_0·δ^⌊r/T⌋) (Eq. 9); 1 during ``warmup`` rounds."""
    if rnd <= warmup:
        return 1.0
    steps = rnd // max(period, 1)
    if schedule == "fixed":
        return float(fixed)
    if schedule == "arithmetic":
        return float(max(alpha_min, alpha0 - delta * steps))
    if schedule == "geometric":
        return float(max(alpha_min, alpha0 * delta ** steps))
    raise ValueError(f"alpha-schedule: expected 'fixed', 'arithmetic' or 'geometric', got {schedule!r}")


def mean_rows(copies: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Weighted (FedAvg) or plain (SimpleAvg) mean of the copies of one row (holders × d)."""
    if weights is None:
        return copies.mean(0)
    w = np.asarray(weights, np.float64)
    if w.sum() <= 0:
        return copies.mean(0)
    return (w[:, None] * copies).sum(0) / w.sum()


def median_rows(copies: np.ndarray) -> np.ndarray:
    """Coordinate-wise median (FedMedian)."""
    return np.median(copies, axis=0)


def fedatt_row(prev: np.ndarray, copies: np.ndarray, epsilon: float, ord_: float, dp: float,
               g: np.random.Generator | None, weights: str = "softmax") -> np.ndarray:
    """FedAtt (fed-att src/agg/aggregate.py) on one row: larger distance → larger attention
    (``weights``: as ``corolla.composite.fedatt_weights``)."""
    diff = prev[None, :] - copies
    s = np.linalg.norm(diff, ord=ord_, axis=1)
    att = fedatt_weights(s, weights)
    out = prev - epsilon * (att[:, None] * diff).sum(0)
    if dp > 0 and g is not None:
        out = out + g.normal(0.0, dp, prev.shape)
    return out


def dist_fedavg_row(u: int, prev: np.ndarray, copies: np.ndarray, holders: list[int], anchors: list[int],
                    a_r: float, mode: str, p: float, eps: float) -> np.ndarray:
    """Dist-FedAvg's new embedding of user ``u`` from its copies (``holders[k]`` the client of copy k,
    ``anchors[k]`` that client's anchor user); ``prev`` is the previous global user table."""
    own = [k for k, a in enumerate(anchors) if a == u]
    other = [k for k, a in enumerate(anchors) if a != u]
    bar = None
    if other:
        if mode == "B":
            d = minkowski(prev[u][None, :], prev[[anchors[k] for k in other]], p)
        elif mode == "A":
            d = minkowski(copies[other], prev[u][None, :], p)
        elif mode == "C":
            d = minkowski(copies[other], prev[[anchors[k] for k in other]], p)
        else:
            raise ValueError(f"distance-mode: expected 'A', 'B' or 'C', got {mode!r}")
        w = 1.0 / (d + eps)                                          # Eq. 4
        bar = (w[:, None] * copies[other]).sum(0) / w.sum()          # Eq. 5-6
    if own:
        mine = copies[own[0]]
        return mine if bar is None else a_r * mine + (1.0 - a_r) * bar   # Eq. 7
    return bar if bar is not None else prev[u]


def aggregate_rows(rule: str, prev: np.ndarray, rows: dict[int, list[tuple[int, np.ndarray]]],
                   weights: dict[int, float] | None = None, anchors: dict[int, int] | None = None,
                   a_r: float = 0.0, mode: str = "B", p: float = 2.0, eps: float = 1e-8,
                   fedatt: tuple[float, float, float] = (1.0, 2.0, 0.001),
                   g: np.random.Generator | None = None, fedatt_weights: str = "softmax") -> np.ndarray:
    """The new table: each row in ``rows`` ({row: [(client, copy), ...]}, clients in id order)
    aggregated by ``rule`` (``distfedavg``, ``fedavg``, ``simpleavg``, ``fedmedian``,
    ``fedatt``); every other row keeps ``prev``."""
    out = np.array(prev, np.float64, copy=True)
    for r in sorted(rows):
        held = sorted(rows[r], key=lambda t: t[0])
        clients = [c for c, _ in held]
        copies = np.stack([np.asarray(v, np.float64) for _, v in held])
        if rule == "distfedavg":
            out[r] = dist_fedavg_row(r, prev, copies, clients, [anchors[c] for c in clients], a_r, mode, p, eps)
        elif rule == "fedavg":
            out[r] = mean_rows(copies, [weights[c] for c in clients])
        elif rule == "simpleavg":
            out[r] = mean_rows(copies)
        elif rule == "fedmedian":
            out[r] = median_rows(copies)
        elif rule == "fedatt":
            out[r] = fedatt_row(np.asarray(prev[r], np.float64), copies, *fedatt, g, fedatt_weights)
        else:
            raise ValueError(f"aggregation rule: expected distfedavg, fedavg, simpleavg, fedmedian or fedatt, got {rule!r}")
    return out.astype(np.float32)
