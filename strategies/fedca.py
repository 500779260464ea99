"""FedCA server side (FedCA paper §5, Algorithm 1; its code's ``engine.py:74-188``, docs/methods/fedca.md). The per-user baselines
of its harness (FedAvg, FCF, FedAtt, Local with ``harness = one-user``) are the plain strategies
of those methods (``corolla/methods/``).

Round t, phase ``train`` (every client; FedCA's ``engine.py:92-163``): a client's reply carries its item
table Q_u (+ NCF tower), its descriptor X_u (``basis``), ``num-examples`` n_u, and — when round t
is evaluated — its own valid/test metrics with its post-training parameters.

Aggregation (steps 5–9): S = a random ``int(agg-fraction · n)`` of the clients that uploaded
(seeded by round; with ``fedca-upload = subset`` the same draw is made before training over the
round's clients, and only S upload — the result is the same, the bytes a tenth). Over S:
p_v = n_v / Σ n, σ (``fedca-similarity``), c (``fedca-subspace``, ``fedca-matching``), the
weights w_u of the simplex QP (``fedca-weights``, ``fedca-qp``; ``corolla.composite``), and the
personalised Q_g[u] = Σ_v w_uv Q_v (every tower tensor with the same weights).

``fedca-block = B`` (scale; 0 = the paper's exact aggregation): S is cut into seeded random
blocks of at most B clients and each block is aggregated on its own (:meth:`FedCA.blocks`).

Download (step 10): Q_g[u] goes to u ∈ S only. When round t is evaluated it is the evaluation
download of the S clients only: they interpolate ρ·own + (1−ρ)·Q_g[u], keep it as their state
and evaluate with it; every other client's metrics are those it sent with its training reply
(its own post-training parameters, FedCA's ``engine.py:210-221``). With ``fused-evaluation`` (default) that
evaluation travels with round t+1's ``train`` message (the S clients evaluate, then train from
the interpolated state), so a round is one message per node; after the last round it is an
``evaluate`` message of its own. When round t is not evaluated Q_g[u] travels with round t+1's
``train`` message and is interpolated there (FedCA's ``tools.py:180-214``).
"""

from __future__ import annotations

import time
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla import composite
from corolla.models.factory import shared_init
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Control, Download, Phase
from corolla.util import rng
from strategies.base import CorollaStrategy
from strategies.owed import Owed


class FedCA(CorollaStrategy):
    hold_uploads = True
    counted_phases = ("train",)
    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.owed = Owed()   # Q_g[u] until it has reached client u

    def setup(self) -> None:
        self.shapes = {k: v.shape for k, v in shared_init(self.cfg, self.n_items).items()}

    # -------------------------------------------------------------- train
    def draw_subset(self, rnd: int, candidates: list[int]) -> list[int]:
        n = max(1, int(self.p.agg_fraction * len(candidates)))
        pick = rng(self.cfg["seed"], "agg-subset", rnd).choice(sorted(candidates), size=n, replace=False)
        return sorted(int(c) for c in pick)

    def configure_phase(self, phase, rnd, targets):
        """Q_g[u] not yet delivered (a round not evaluated), and with ``fedca-upload = subset`` a
        ``Control(upload=False)`` for every client not drawn for aggregation."""
        personal = self.owed.select(targets)
        control = {}
        if self.p.fedca_upload == "subset":
            drawn = set(self.draw_subset(rnd, targets))
            control = {c: Control(upload=c in drawn) for c in targets}
        return Download({}, personal, control)

    def delivered(self, phase, rnd, cids):
        """Q_g[u] handed to the transport: with a training message it is gone (interpolated there);
        with an evaluation it waits for :meth:`evaluated` (a client that missed it gets it again)."""
        self.owed.handed(phase, cids)

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        if phase != Phase.TRAIN or not control.upload:
            return {}
        out = {k: ArraySpec(s, "float32") for k, s in self.shapes.items()}
        k = self.p.fedca_k
        width = self.cfg["dim"] if self.p.fedca_subspace == "pca" else self.clients[cid]["train"]
        out["basis"] = ArraySpec((k, width), "float32")
        return out


    def blocks(self, rnd: int, subset: list[int]) -> list[list[int]]:
        """``fedca-block = B`` > 0: S in a seeded random order, cut into ceil(|S|/B) blocks of
        near-equal size, each aggregated on its own (the QP, σ and c over the block only): the
        server's cost falls from |S|²·M·d to |S|·B·M·d and it holds one block's tables at a
        time. 0: one block, the paper's exact aggregation."""
        b = int(self.p.fedca_block)
        if b <= 0 or len(subset) <= b:
            return [subset]
        order = rng(self.cfg["seed"], "fedca-block", rnd).permutation(len(subset))
        n = -(-len(subset) // b)
        return [sorted(subset[i] for i in part) for part in np.array_split(order, n)]

    def aggregate_group(self, group: list[int], uploads) -> tuple[dict[int, dict[str, np.ndarray]], float]:
        """Personalised aggregates Q_g[u] of the clients of ``group`` over ``group`` (steps 5–9)
        and the mean self-weight."""
        prm = self.p
        tables = {k: np.stack([uploads[c].payload[k] for c in group]) for k in self.shapes}
        n = np.array([float(uploads[c].metrics["num-examples"]) for c in group])
        p = n / n.sum() if n.sum() > 0 else np.full(len(group), 1.0 / len(group))
        if prm.fedca_similarity == "pca1":
            z = np.stack([composite.pca1_projection(q, prm.fedca_pca_sign) for q in tables["item.weight"]])
            sigma = composite.similarity_pca1(z)
        else:
            sigma = composite.similarity_frobenius(tables["item.weight"])
        comp = composite.complementarity([uploads[c].payload["basis"].astype(np.float64) for c in group],
                                         prm.fedca_matching)
        w = composite.composite_weights(p, sigma, comp, prm.fedca_alpha, prm.fedca_beta,
                                        prm.fedca_weights, prm.fedca_qp)
        agg = {k: composite.personalised(w, t) for k, t in tables.items()}
        return {c: {k: agg[k][j] for k in agg} for j, c in enumerate(group)}, float(np.sum(np.diag(w)))

    def aggregate_phase(self, phase, rnd, results):
        uploads = self.take_uploads()
        if not uploads:
            log(WARNING, "round %d: no valid upload; nothing is aggregated", rnd)
            return {"clients": len(results)}
        t0 = time.perf_counter()
        # with fedca-upload = subset only the drawn clients uploaded (Control): they are S
        subset = sorted(uploads) if self.p.fedca_upload == "subset" else self.draw_subset(rnd, sorted(uploads))
        diag = 0.0
        groups = self.blocks(rnd, subset)
        for group in groups:
            agg, d = self.aggregate_group(group, uploads)
            for c, q in agg.items():
                self.owed.owe(c, q)
            diag += d
        return {"clients": len(results), "aggregated": len(subset), "blocks": len(groups), "train-loss": float(np.nanmean(
            [r.metrics.get("train-loss", np.nan) for r in results.values()])),
            "self-weight": diag / len(subset), "server-s": time.perf_counter() - t0}

    # -------------------------------------------------------------- evaluate
    def eval_targets(self, rnd, replied):
        """Every client sent its metrics with its training reply; the aggregated ones are asked
        again with Q_g[u] (they interpolate, keep and evaluate the result)."""
        return sorted(set(super().eval_targets(rnd, replied)) | set(self.owed.clients()))

    def evaluate_download(self, rnd, targets):
        return Download({}, self.owed.select(targets))

    def evaluated(self, rnd, results):
        # delivered and interpolated; a client that missed it gets it with the next training
        self.owed.settle(results)

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        return self.owed.state_dict()

    def load_state_dict(self, state):
        self.owed.load_state_dict(state)
