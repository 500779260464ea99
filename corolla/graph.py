"""User-relationship graphs of UFGraphFR and GPFedRec (pure numpy; UFGraphFR's ``utils.py:77-146``, GPFedRec's ``utils.py:48-99``; docs/methods/ufgraphfr.md).

Two readings (``graph-mode``):

* ``reference`` — what the authors' code computes (UF utils.py:77-146, GP utils.py:48-99):
  D = cosine **distance** (1 − cos) between the flattened uploads (:func:`cosine_distances`);
  with ``neighborhood-size`` 0, thr = ``neighborhood-threshold`` × mean(D) (diagonal included)
  and row i links to every j with D_ij > thr with weight 1/|{j}| (no j: A_ii = 1)
  (:func:`threshold_graph`); with size K > 0, the K largest distances, weight 1/K
  (:func:`topk_distance_graph`). A is row-stochastic and directed. Note the sign: the code links
  each user to the users *less* similar than average (inherited from GPFedRec's code).
* ``paper`` — the text (UFGraphFR P:283-307, Eq. 22–24): cosine **similarity**, each user's K most
  similar other users, the symmetric union A_ij = 1 if j ∈ N(i) or i ∈ N(j) (Eq. 23), no
  self-loops, Ã = D^-½ A D^-½ (Eq. 24; isolated users get a zero row) (:func:`paper_graph`).

Aggregation is one propagation R = A E (Eq. 25, :func:`propagate`); the paper's global table is
the mean of R's rows (Eq. 26).
"""

from __future__ import annotations

import numpy as np


COLUMN_BLOCK = 1 << 15   # feature columns converted to float64 at a time (N × 32,768 × 8 bytes)


def cosine_similarities(x: np.ndarray, block: int = COLUMN_BLOCK) -> np.ndarray:
    """S_ij = x_i·x_j / (‖x_i‖‖x_j‖) for the rows of ``x`` (N × F), in float64; a zero row has
    similarity 0 to every row (as sklearn), and S_ii = 1 for every non-zero row.

    The rows are normalised and multiplied ``block`` feature columns at a time, so no float64 copy
    of ``x`` is made: GPFedRec's uploads on Lastfm-2K are 1,600 × 398,528 float32 (2.55 GB), whose
    float64 copy and normalised copy were another 10.2 GB at the peak of a round. The sums differ
    from one product over all columns only in their order (float64 rounding)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"cosine_similarities: x must be N × F, got shape {x.shape}")
    n, f = x.shape
    sq = np.zeros(n)
    for a in range(0, f, block):
        xb = np.asarray(x[:, a:a + block], np.float64)
        sq += np.einsum("ij,ij->i", xb, xb)
    norms = np.sqrt(sq)
    safe = np.where(norms > 0, norms, 1.0)[:, None]
    s = np.zeros((n, n))
    for a in range(0, f, block):
        xb = np.asarray(x[:, a:a + block], np.float64) / safe
        s += xb @ xb.T
    return np.clip(s, -1.0, 1.0)


def cosine_distances(x: np.ndarray) -> np.ndarray:
    """D = 1 − S clipped to [0, 2], with a zero diagonal (sklearn ``pairwise_distances(metric='cosine')``)."""
    d = np.clip(1.0 - cosine_similarities(x), 0.0, 2.0)
    np.fill_diagonal(d, 0.0)
    return d


def threshold_graph(d: np.ndarray, threshold: float = 1.0) -> np.ndarray:
    """The code's default selection: row i -> every j with D_ij > threshold · mean(D), equal weights."""
    thr = float(d.mean()) * threshold
    link = d > thr
    counts = link.sum(1)
    a = np.where(link, 1.0 / np.maximum(counts, 1)[:, None], 0.0)
    empty = np.flatnonzero(counts == 0)
    a[empty, empty] = 1.0
    return a


def topk_distance_graph(d: np.ndarray, k: int) -> np.ndarray:
    """The code's top-K selection: row i -> the K columns of largest D_ij (``argsort[-K:]``), 1/K each."""
    n = len(d)
    k = min(k, n)
    a = np.zeros_like(d, dtype=np.float64)
    cols = np.argsort(d, axis=1, kind="stable")[:, n - k:]
    a[np.arange(n)[:, None], cols] = 1.0 / k
    return a


def paper_graph(s: np.ndarray, k: int) -> np.ndarray:
    """The paper's graph: each user's ``k`` most similar others, symmetric union, D^-½ A D^-½."""
    n = len(s)
    k = min(k, n - 1)
    masked = np.array(s, np.float64, copy=True)
    np.fill_diagonal(masked, -np.inf)
    a = np.zeros((n, n))
    if k > 0:
        cols = np.argsort(-masked, axis=1, kind="stable")[:, :k]
        a[np.arange(n)[:, None], cols] = 1.0
    a = np.maximum(a, a.T)
    deg = a.sum(1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    return inv[:, None] * a * inv[None, :]


def build_graph(x: np.ndarray, mode: str, size: int = 0, threshold: float = 1.0) -> np.ndarray:
    """A for the uploads ``x`` (N × F) under ``graph-mode`` (``neighborhood-size``, ``-threshold``)."""
    if mode == "reference":
        d = cosine_distances(x)
        return topk_distance_graph(d, size) if size > 0 else threshold_graph(d, threshold)
    if mode == "paper":
        if size <= 0:
            raise ValueError("graph-mode 'paper' needs neighborhood-size K > 0 (the paper's top-K)")
        return paper_graph(cosine_similarities(x), size)
    raise ValueError(f"graph-mode: expected 'reference' or 'paper', got {mode!r}")


def propagate(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """R = A E (one graph convolution over the stacked, flattened item tables E, N × F), float32
    (the product itself: no second N × F copy)."""
    return np.asarray(a, np.float32) @ np.asarray(e, np.float32)
