"""Partitions of users into logical clients (pure functions).

* ``user``: one user per logical client (cross-device).
* ``blocks``: contiguous user blocks in id order, ``floor(U/K)`` users each and the remainder
  on the last client (FedCIA: 943 users, K=100 gives 99 clients of 9 and one of 52).
* ``random``: K silos of a seeded random permutation (sizes differ by at most one).
* ``spectral``: spectral clustering of the bipartite user–item training graph into K subgraphs
  (LPSFed paper App. D.2; why not the authors' code's clustering: docs/methods/lpsfed.md): users and items are embedded jointly from the full
  (U+I)×(U+I) adjacency, labels are assigned with ``cluster_qr`` (Damle et al. 2019), client c
  owns the users and items labelled c, and cross-cluster edges are dropped.
"""

from __future__ import annotations

import numpy as np


def partition_user(n_users: int) -> list[np.ndarray]:
    return [np.array([u], np.int64) for u in range(n_users)]


def partition_blocks(n_users: int, k: int) -> list[np.ndarray]:
    if not 1 <= k <= n_users:
        raise ValueError(f"num-clients={k}: expected 1..{n_users} for {n_users} users")
    size = n_users // k
    starts = [c * size for c in range(k)] + [n_users]
    return [np.arange(starts[c], starts[c + 1], dtype=np.int64) for c in range(k)]


def partition_random(n_users: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    if not 1 <= k <= n_users:
        raise ValueError(f"num-clients={k}: expected 1..{n_users} for {n_users} users")
    perm = rng.permutation(n_users)
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, k)]


def cluster_qr(vectors: np.ndarray) -> np.ndarray:
    """Labels from a spectral embedding by column-pivoted QR (Damle, Minden & Ying 2019; the
    algorithm of scikit-learn's ``assign_labels='cluster_qr'``): pick k pivot rows, rotate the
    embedding onto them, label each row by its largest absolute coordinate. Invariant to the sign
    and rotation of the eigenvectors, deterministic."""
    from scipy.linalg import qr, svd

    k = vectors.shape[1]
    _, _, piv = qr(vectors.T, pivoting=True)
    ut, _, v = svd(vectors[piv[:k], :].T)
    return np.abs(vectors @ (ut @ v.conj())).argmax(axis=1)


def spectral_embedding(a, k: int, seed: int) -> np.ndarray:
    """The k eigenvectors of the smallest eigenvalues of the normalised Laplacian
    L = I − D^{-1/2} A D^{-1/2}, scaled by D^{-1/2} (scikit-learn's ``spectral_embedding`` with
    ``norm_laplacian=True``). Computed as the *largest* eigenvalues of D^{-1/2} A D^{-1/2} with
    plain Lanczos: scikit-learn's default (ARPACK in shift-invert mode around 1) factorises the
    (U+I)×(U+I) matrix, which takes more than ten minutes on Gowalla; this takes seconds and gives
    the same labels (tests/test_data.py)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigsh

    n = a.shape[0]
    if not 1 <= k < n:
        raise ValueError(f"num-clients={k}: expected 1..{n - 1} for a graph of {n} nodes")
    a = sp.csr_matrix(a, dtype=np.float64, copy=True)
    a.setdiag(0.0)   # as scipy's laplacian: self-loops are ignored
    a.eliminate_zeros()
    deg = np.asarray(a.sum(1)).ravel()
    # an isolated node has L_ii = 1 in scikit-learn (its diagonal is set to 1), i.e. eigenvalue 0
    # of the normalised adjacency: its row stays zero and it never spans a leading eigenvector
    dd = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    norm = sp.diags(dd) @ a @ sp.diags(dd)
    v0 = np.random.default_rng(seed).uniform(-1.0, 1.0, n)
    _, vec = eigsh(norm, k=k, which="LA", v0=v0, tol=0.0)
    # an isolated node's row is zero in exact arithmetic; Lanczos leaves round-off from v0 there,
    # which differs between machines (BLAS kernels) and would decide its label: make it exactly 0
    vec[deg == 0] = 0.0
    return vec[:, ::-1] * np.where(deg > 0, dd, 1.0)[:, None]


def partition_spectral(user: np.ndarray, item: np.ndarray, n_users: int, n_items: int, k: int,
                       seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Joint spectral clustering of the bipartite graph; returns user labels, item labels, stats."""
    import scipy.sparse as sp

    n = n_users + n_items
    r = sp.coo_matrix((np.ones(len(user)), (user, n_users + item)), shape=(n, n)).tocsr()
    r.data[:] = 1.0
    a = (r + r.T).tocsr()
    labels = cluster_qr(spectral_embedding(a, k, seed))
    ul, il = labels[:n_users].astype(np.int64), labels[n_users:].astype(np.int64)
    kept = ul[user] == il[item]
    stats = {
        "edges": int(len(user)),
        "edges_kept": int(kept.sum()),
        "edges_dropped": int((~kept).sum()),
        "users_per_client": np.bincount(ul, minlength=k).tolist(),
        "items_per_client": np.bincount(il, minlength=k).tolist(),
        "edges_per_client": np.bincount(ul[user][kept], minlength=k).tolist(),
    }
    return ul, il, stats
