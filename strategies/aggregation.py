"""Pure aggregation kernels (no Flower): weighted and unweighted means in a fixed order."""

from __future__ import annotations

import numpy as np


def weighted_mean(tables: list[dict[str, np.ndarray]], weights: list[float]) -> dict[str, np.ndarray]:
    """Σ_k w_k x_k / Σ_k w_k for every key, accumulated in float64 in list order.

    FedAvg (McMahan et al. 2017) with weights = examples; FCF / SimpleAvg with equal weights.
    """
    if not tables:
        raise ValueError("weighted_mean: no tables to aggregate")
    w = np.asarray(weights, np.float64)
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weighted_mean: weights must be >= 0 with a positive sum, got {weights}")
    out = {}
    for k in tables[0]:
        acc = np.zeros(tables[0][k].shape, np.float64)
        for t, wk in zip(tables, w):
            acc += wk * t[k]
        out[k] = (acc / w.sum()).astype(tables[0][k].dtype)
    return out


def weighted_mean_rows(base: np.ndarray, parts: list[tuple[np.ndarray, np.ndarray]],
                       weights: list[float]) -> np.ndarray:
    """:func:`weighted_mean` of tables that equal ``base`` except in some rows, from those rows
    alone (``item-upload = rows``): ``parts[k] = (rows_k, values_k)``, rows sorted and distinct.

    Σ_k w_k T_k / Σ_k w_k = base + Σ_k w_k (T_k − base)[rows_k] / Σ_k w_k, accumulated in float64:
    the same mean up to float64 rounding (then cast to ``base``'s dtype), in O(Σ|rows_k|) instead
    of O(k · rows · d).
    """
    if not parts:
        raise ValueError("weighted_mean_rows: no tables to aggregate")
    w = np.asarray(weights, np.float64)
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weighted_mean_rows: weights must be >= 0 with a positive sum, got {weights}")
    b64 = base.astype(np.float64)
    acc = np.zeros(base.shape, np.float64)
    for (rows, vals), wk in zip(parts, w):
        acc[rows] += wk * (vals.astype(np.float64) - b64[rows])
    return (b64 + acc / w.sum()).astype(base.dtype)


class RunningMean:
    """Streaming unweighted mean of same-shape arrays: O(size) memory however many are added.

    Used by FedCIA (``fedcia_param.py:54``, ``fedcia_gsp.py:32``: ``C_s`` and ``F_agg`` are plain means over the clients), where each
    M×M upload is folded in as its reply arrives and then dropped.
    """

    def __init__(self) -> None:
        self.sum: np.ndarray | None = None
        self.n = 0

    def add(self, x: np.ndarray) -> None:
        if self.sum is None:
            self.sum = np.zeros(x.shape, np.float64)
        elif x.shape != self.sum.shape:
            raise ValueError(f"RunningMean: expected shape {self.sum.shape}, got {x.shape}")
        self.sum += x
        self.n += 1

    def add_sum(self, total: np.ndarray, n: int) -> None:
        """Fold in ``total``, already the sum of ``n`` arrays (a node's pre-summed uploads)."""
        if self.sum is None:
            self.sum = np.zeros(total.shape, np.float64)
        elif total.shape != self.sum.shape:
            raise ValueError(f"RunningMean: expected shape {self.sum.shape}, got {total.shape}")
        self.sum += total
        self.n += n

    def pop(self, dtype=np.float32) -> tuple[np.ndarray | None, int]:
        """(mean or None when nothing was added, count), and reset."""
        out = None if self.n == 0 else (self.sum / self.n).astype(dtype)
        n = self.n
        self.sum, self.n = None, 0
        return out, n
