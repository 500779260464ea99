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
