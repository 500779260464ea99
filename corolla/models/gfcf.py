"""GF-CF (Shen et al., CIKM'21) as used by FedCIA's parameter-free path (FedCIA §5.3; its ``model/GFCF.py:13-33``).

Per client with raw 0/1 training matrix R (n × M):

    d_u = R.sum(1)^-½, d_i = R.sum(0)^-½ (inf -> 0)            normalisation
    R̃  = diag(d_u) R diag(d_i)
    V   = the first k right singular vectors of R̃ (rows of Vh of a *full* SVD in the code)
    F   = R̃ᵀR̃ + wp · diag(d_i) VᵀV diag(d_i⁺),   d_i⁺ = 1/d_i (0 for unseen items)

The first term is the linear filter, the second the "ideal low-pass" filter; FedCIA uploads F
(plus Laplace noise) and predicts ``R F_k + β R F_agg`` (paper: Â_k = A_k F_k + β A_k F_agg).

``null_rows``: with n < k the code's full SVD takes k − rank(R̃) rows of the null space, whatever
LAPACK returns (``"lapack"``, reproduces the published numbers); ``"drop"`` keeps only the rows
with a non-zero singular value (well defined; < 0.001 F1 difference measured, docs/methods/fedcia.md).
"""

from __future__ import annotations

import numpy as np


def normalise(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(R̃, d_u, d_i) with zero-degree rows/columns mapped to 0."""
    r = np.asarray(r, np.float32)
    with np.errstate(divide="ignore"):
        du = np.power(r.sum(1), -0.5)
        di = np.power(r.sum(0), -0.5)
    du[~np.isfinite(du)] = 0.0
    di[~np.isfinite(di)] = 0.0
    return (du[:, None] * r * di[None, :]).astype(np.float32), du.astype(np.float32), di.astype(np.float32)


def ideal_basis(rt: np.ndarray, k: int, null_rows: str = "lapack") -> np.ndarray:
    """The first ``k`` rows of Vh of R̃'s SVD (k × M)."""
    if null_rows == "lapack":
        _, _, vh = np.linalg.svd(rt, full_matrices=True)
        return vh[:k].astype(np.float32)
    if null_rows != "drop":
        raise ValueError(f"null_rows: expected 'lapack' or 'drop', got {null_rows!r}")
    _, s, vh = np.linalg.svd(rt, full_matrices=False)
    keep = min(k, int((s > 1e-7 * max(s.max(initial=0.0), 1e-30)).sum()))
    return vh[:keep].astype(np.float32)


def gfcf_filter(r: np.ndarray, k: int, wp: float, null_rows: str = "lapack",
                basis: np.ndarray | None = None) -> np.ndarray:
    """The client's GF-CF filter F (M × M, float32); ``basis``: :func:`ideal_basis` of R̃ when
    already known (the result is the same, bit for bit)."""
    rt, _, di = normalise(r)
    v = ideal_basis(rt, k, null_rows) if basis is None else basis
    di_inv = np.where(di > 0, 1.0 / np.where(di > 0, di, 1.0), 0.0).astype(np.float32)
    linear = rt.T @ rt
    ideal = (di[:, None] * (v.T @ v)) * di_inv[None, :]
    return (linear + wp * ideal).astype(np.float32)
