"""Client side base: the logical-client base class and a phase's result.

A method's client side subclasses :class:`LogicalClient` and implements one method per phase
(``phase_<name>``), each returning the payload to upload, metrics, and the new state. The node
that hosts logical clients is :class:`client_app.host.NodeHost`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corolla import methods
from corolla import metrics as M
from corolla.config import int_list
from corolla.data import Federation
from corolla.round import DEFAULT_CONTROL, Control


@dataclass
class PhaseResult:
    payload: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    state: dict[str, np.ndarray] | None = None   # None: unchanged


class LogicalClient:
    """One logical client (a user or a silo of users) of a method.

    Subclasses implement ``init_state()`` and ``phase_<name>(rnd, state, shared, personal)``;
    ``evaluate`` is provided: it calls :meth:`scores` and computes the protocol's per-user metrics.
    """

    uses_torch = True   # False: the node does not import torch for this client (GF-CF)
    control: Control = DEFAULT_CONTROL   # this message's typed fields for the client (``corolla.round``)

    def __init__(self, cfg: dict[str, Any], fed: Federation, cid: int, users: np.ndarray, device,
                 data_dir: str | None = None, params=None):
        self.cfg, self.fed, self.cid, self.users, self.device = cfg, fed, cid, users, device
        self.p = params if params is not None else methods.run_params(cfg)   # the method's, typed
        self.data_dir = data_dir   # the node's dataset folder (side files: profiles, ...)
        self.ks = int_list(cfg, "topk")
        self.item_mask = fed.owned_items(fed.group_of(cid))   # None: every item its own

    # --- to implement
    def init_state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def scores(self, state, shared, personal, local_users: np.ndarray, items: np.ndarray | None) -> np.ndarray:
        """Scores of ``local_users`` (indices into ``self.users``) on ``items`` (2-D, per user) or on
        all items (``items is None``)."""
        raise NotImplementedError

    # --- provided
    @property
    def num_train(self) -> int:
        return self.fed.count("train", self.users)

    def phase_evaluate(self, rnd: int, state, shared, personal) -> PhaseResult:
        out: dict[str, Any] = {}
        for split in ("valid", "test"):
            for k, v in self.evaluate_split(state, shared, personal, split).items():
                out[f"{split}/{k}"] = v.tolist()
        return PhaseResult(metrics=out)

    def evaluate_split(self, state, shared, personal, split: str) -> dict[str, np.ndarray]:
        fed, cfg = self.fed, self.cfg
        has = np.array([len(fed.rows(split, u)) > 0 for u in self.users.tolist()], bool)
        local = np.flatnonzero(has)
        if not len(local):
            return {}
        if cfg["protocol"] == "loo":
            neg = fed.neg_valid if split == "valid" else fed.neg_test
            gu = self.users[local]
            pos = np.array([fed.rows(split, u)[0] for u in gu.tolist()], np.int64)
            cand = np.concatenate([neg[gu], pos[:, None]], 1)
            s = self.scores(state, shared, personal, local, cand)
            res = M.loo_user_metrics(s[:, -1], s[:, :-1], self.ks)
            if cfg["compat-ties-against-positive"]:
                for k, v in M.loo_user_metrics(s[:, -1], s[:, :-1], self.ks, True).items():
                    res[f"ties:{k}"] = v
            return res
        block = full_rank_block(len(local), fed.n_items)
        parts = []
        for a in range(0, len(local), block):
            rows = local[a:a + block]
            s = self.scores(state, shared, personal, rows, None).astype(np.float64)
            parts.append(full_rank_metrics(s, fed, self.users[rows].tolist(), split, self.ks,
                                           cfg["compat-fedcia-metrics"], [self.item_mask] * len(rows),
                                           cfg["test-mask-valid"], cfg["compat-sigmoid-ranking"]))
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def phase_topk(self, rnd: int, state, shared, personal) -> PhaseResult:
        """Top-K of every hosted user with train and validation items masked."""
        k = int(self.cfg["export-topk"])
        s = self.scores(state, shared, personal, np.arange(len(self.users)), None).astype(np.float64)
        for row, u in enumerate(self.users.tolist()):
            s[row, self.fed.rows("train", u)] = -np.inf
            s[row, self.fed.rows("valid", u)] = -np.inf
        top = M.top_k(s, k)
        out = {"users": self.users.tolist()}
        for row in range(len(self.users)):
            out[f"top/{row}"] = top[row].tolist()
        return PhaseResult(metrics=out)


FULL_RANK_ENTRIES = 1 << 26   # users × items a client scores at once in full ranking (512 MB as float64)


def full_rank_block(n_users: int, n_items: int) -> int:
    """Users a client scores together in its full-ranking evaluation: all of them while
    ``n_users × n_items`` fits in ``FULL_RANK_ENTRIES`` (every preset on ML-100K, Lastfm-2K,
    FilmTrust: one block, as before), else blocks of that size (Gowalla's 4 subgraph clients held
    up to 19 GB scoring every user at once). Per-user metrics do not depend on the blocks."""
    return max(1, min(n_users, FULL_RANK_ENTRIES // max(1, n_items))) if n_users else 1


def full_rank_metrics(s: np.ndarray, fed, users: list[int], split: str, ks: list[int], fedcia: bool,
                      item_masks=None, mask_valid: bool = True, sigmoid32: bool = False) -> dict[str, np.ndarray]:
    """Per-user full-ranking metrics of the scores ``s`` (float64, one row per user of ``users``;
    changed in place): each user's train items masked, for test its valid items too (unless
    ``mask_valid`` is false: the ``test-mask-valid`` key), and the items
    its client does not own (``item_masks[row]``, None: all its own), then
    ``corolla.metrics.full_rank_user_metrics`` against its ``split`` items. The silo harness's
    evaluation and the one-user harness's batched one (``client_app.oneuser``) both rank with it.
    ``sigmoid32`` (``compat-sigmoid-ranking``): rank the float32 sigmoid of the scores instead, as
    FedCIA's code does, so scores that round to 1.0 tie."""
    if sigmoid32:
        s[:] = M.sigmoid_f32(s)
    truth = []
    for row, u in enumerate(users):
        s[row, fed.rows("train", u)] = -np.inf
        if split == "test" and mask_valid:
            s[row, fed.rows("valid", u)] = -np.inf
        if item_masks is not None and item_masks[row] is not None:
            s[row, ~item_masks[row]] = -np.inf
        truth.append(fed.rows(split, u))
    return M.full_rank_user_metrics(s, truth, ks, fedcia=fedcia)
