"""Filters, train/valid/test splits and evaluation negatives (pure functions on arrays).

Split labels: 0 = train, 1 = valid, 2 = test.

* ``loo``: leave-one-out by timestamp (FedCA's ``utils/data.py:75-91``, UFGraphFR's ``data.py:74-93``): per user the latest
  interaction is test, the second latest validation, the rest train; among equal timestamps
  the row that comes first in the file counts as the later one (pandas
  ``rank(method='first', ascending=False)``).
* ``ratio``: per-user random split with fractions (train, valid, test); a user with n >= 2
  interactions gets ``max(1, int(f_test*n))`` test items and, if at least two remain,
  ``max(1, int(f_valid*n))`` validation items (the LPSFed / Dist-FedAvg style).
* evaluation negatives for ``loo``: drawn once per user without replacement from the items the
  user never interacted with (any split): by a numpy generator (:func:`sample_eval_negatives`),
  or exactly as the PFedRec / GPFedRec / UFGraphFR ``data.py`` draws them
  (:func:`sample_eval_negatives_python`).
"""

from __future__ import annotations

import numpy as np

from corolla.data.loaders import Interactions, first_appearance_rank

TRAIN, VALID, TEST = 0, 1, 2


def filter_interactions(inter: Interactions, threshold: float = 0.0, min_user: int = 0) -> Interactions:
    """Keep ``rating >= threshold`` (if > 0), then users with at least ``min_user`` interactions.

    Users and items are re-indexed densely (raw-id order preserved). Applied once, not iterated
    to a k-core.
    """
    keep = np.ones(len(inter), bool)
    if threshold > 0:
        keep &= inter.rating >= threshold
    if min_user > 0:
        counts = np.bincount(inter.user[keep], minlength=inter.n_users)
        keep &= counts[inter.user] >= min_user
    if keep.all():
        return inter
    users, u = np.unique(inter.user[keep], return_inverse=True)
    items, i = np.unique(inter.item[keep], return_inverse=True)
    return Interactions(u.astype(np.int64), i.astype(np.int64), inter.rating[keep], inter.ts[keep],
                        inter.user_ids[users], inter.item_ids[items])


def first_users(inter: Interactions, n: int) -> Interactions:
    """Keep the first ``n`` users (dense index order, i.e. raw-id order) and re-index the items
    they touch densely (``max-users``; 0 or ``n`` >= the users: unchanged)."""
    if n <= 0 or n >= inter.n_users:
        return inter
    keep = inter.user < n
    items, i = np.unique(inter.item[keep], return_inverse=True)
    return Interactions(inter.user[keep].astype(np.int64), i.astype(np.int64), inter.rating[keep], inter.ts[keep],
                        inter.user_ids[:n], inter.item_ids[items])


def split_loo(user: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Leave-one-out labels by timestamp; ties broken by file order (earlier row = later)."""
    pos = np.arange(len(user))
    # order: by user, then timestamp descending, then file position ascending
    order = np.lexsort((pos, -ts, user))
    labels = np.zeros(len(user), np.int8)
    u_sorted = user[order]
    first = np.r_[True, u_sorted[1:] != u_sorted[:-1]]
    rank = np.arange(len(order)) - np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    labels[order[rank == 0]] = TEST
    labels[order[rank == 1]] = VALID
    return labels


def split_ratio(user: np.ndarray, ratios: tuple[float, float, float], rng: np.random.Generator) -> np.ndarray:
    """Per-user random split; see the module docstring for the counts."""
    _, f_valid, f_test = ratios
    labels = np.zeros(len(user), np.int8)
    order = np.argsort(user, kind="stable")
    bounds = np.flatnonzero(np.r_[True, user[order][1:] != user[order][:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = order[a:b]
        n = len(idx)
        if n < 2:
            continue
        perm = idx[rng.permutation(n)]
        n_test = max(1, int(f_test * n)) if f_test > 0 else 0
        rest = n - n_test
        n_valid = max(1, int(f_valid * n)) if (f_valid > 0 and rest >= 2) else 0
        labels[perm[:n_test]] = TEST
        labels[perm[n_test:n_test + n_valid]] = VALID
    return labels


def split_valid_from_train(user: np.ndarray, labels: np.ndarray, f_valid: float,
                           rng: np.random.Generator) -> np.ndarray:
    """Move ``max(1, int(f_valid*n_train))`` train items of each user (n_train >= 2) to validation."""
    labels = labels.copy()
    if f_valid <= 0:
        return labels
    tr = np.flatnonzero(labels == TRAIN)
    order = tr[np.argsort(user[tr], kind="stable")]
    us = user[order]
    bounds = np.flatnonzero(np.r_[True, us[1:] != us[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = order[a:b]
        if len(idx) < 2:
            continue
        k = max(1, int(f_valid * len(idx)))
        labels[idx[rng.permutation(len(idx))[:k]]] = VALID
    return labels


def sample_eval_negatives(user: np.ndarray, item: np.ndarray, n_users: int, n_items: int,
                          n_neg: int, disjoint: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Evaluation negatives per user, drawn once from the never-interacted items.

    Returns ``(neg_valid, neg_test)`` of shape (n_users, n_neg). With ``disjoint`` 2·n_neg items
    are drawn and split (first half valid, second half test); otherwise both are the same draw.
    """
    need = 2 * n_neg if disjoint else n_neg
    seen = [set() for _ in range(n_users)]
    for u, i in zip(user.tolist(), item.tolist()):
        seen[u].add(i)
    out = np.empty((n_users, need), np.int64)
    all_items = np.arange(n_items)
    for u in range(n_users):
        mask = np.ones(n_items, bool)
        mask[list(seen[u])] = False
        pool = all_items[mask]
        if len(pool) < need:
            raise ValueError(f"user {u} has only {len(pool)} uninteracted items; eval-negatives needs {need}")
        out[u] = rng.choice(pool, size=need, replace=False)
    if disjoint:
        return out[:, :n_neg], out[:, n_neg:]
    return out, out


def sample_eval_negatives_python(user: np.ndarray, item: np.ndarray, n_users: int, n_items: int,
                                 n_neg: int, disjoint: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The PFedRec / GPFedRec / UFGraphFR ``data.py`` draw (``_sample_negative``): the code re-indexes
    users and items by first appearance in the file, calls ``random.seed(0)`` and then, for each
    user in that order, ``random.sample(sorted(item_pool - interacted), 2·n_neg)`` (first half
    validation, second half test). ``user``/``item`` in file order; ``seed`` plays ``0``.
    Returns (neg_valid, neg_test) in this module's dense ids.
    """
    import random

    need = 2 * n_neg if disjoint else n_neg
    u_rank = first_appearance_rank(user, n_users)
    i_rank = first_appearance_rank(item, n_items)
    by_rank = np.argsort(i_rank)              # dense item id at each first-appearance position
    seen = [set() for _ in range(n_users)]
    for u, i in zip(user.tolist(), i_rank[item].tolist()):
        seen[u].add(i)
    present = set(np.unique(i_rank[item]).tolist())   # the code's item_pool: items that occur
    gen = random.Random(seed)
    out = np.empty((n_users, need), np.int64)
    for u in np.argsort(u_rank).tolist():
        pool = sorted(present - seen[u])
        if len(pool) < need:
            raise ValueError(f"user {u} has only {len(pool)} uninteracted items; eval-negatives needs {need}")
        out[u] = by_rank[gen.sample(pool, need)]
    if disjoint:
        return out[:, :n_neg], out[:, n_neg:]
    return out, out
