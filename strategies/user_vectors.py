"""What PerFedRec and FedFast share on the server: a global table G (FedCA's one-user harness:
the item table, with NCF's tower) and a server-held 1 × d user vector per client (``U``, the
vector each client starts from until it uploads one, ``one_user_init``), re-clustered by K-means
after every round (``labels``). The training upload is G's arrays and the client's user vector."""
from __future__ import annotations

from logging import WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.models.factory import one_user_init, shared_init
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Phase
from strategies.base import ClientResult, CorollaStrategy


class UserVectorStrategy(CorollaStrategy):
    hold_uploads = True
    counted_phases = ("train",)

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.G: dict[str, np.ndarray] = {}
        self.U: dict[int, np.ndarray] = {}
        self.labels: dict[int, int] | None = None   # of the last K-means: the next round's

    def setup(self) -> None:
        if not self.G:
            self.G = shared_init(self.cfg, self.n_items)
        for c in self.clients:
            self.U.setdefault(c, one_user_init(self.cfg, c))

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        if phase != Phase.TRAIN:
            return {}
        out = {k: ArraySpec(v.shape, "float32") for k, v in self.G.items()}
        out["user.weight"] = ArraySpec((1, int(self.cfg["dim"])), "float32")
        return out

    def held_uploads(self, rnd: int) -> dict[int, ClientResult]:
        """The round's valid uploads (empty: a warning, nothing is aggregated)."""
        uploads = self.take_uploads()
        if not uploads:
            log(WARNING, "round %d: no valid upload; nothing is aggregated", rnd)
        return uploads


def mean_train_loss(results: dict[int, ClientResult]) -> float:
    """The mean of the replies' ``train-loss`` (NaN when none reported one)."""
    losses = [r.metrics["train-loss"] for r in results.values() if "train-loss" in r.metrics]
    return float(np.mean(losses)) if losses else float("nan")
