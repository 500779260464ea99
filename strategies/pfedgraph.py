"""pFedGraph server side (Ye et al., ICML 2023; the authors' code MediaBrain-SJTU/pFedGraph@4f5f17c,
``pytorch/pfedgraph_cosine/utils.py`` and ``pytorch/pfedgraph_cosine.py:147-153``;
docs/methods/pfedgraph.md) on FedCA's one-user harness.

Round t, phase ``train``: every sampled client uploads its shared parameters θ_u (item table, NCF
tower) and ``num-examples`` n_u. Over the uploads, in client order (the pure functions below):

1. Δ_u = θ_u − θ⁰, θ⁰ the initial shared parameters every client started from — never updated,
   as the code's ``global_parameters`` (``utils.py:33-39``);
2. d_uv = −cos(Δ_u, Δ_v), and −1 where the cosine exceeds ``pfedgraph-clamp`` (0.9,
   ``utils.py:42-45``): :func:`cosine_difference`;
3. p_v = n_v / Σ n (``pfedgraph_cosine.py:147-148``); row u of the collaboration graph solves
   min_x α xᵀx + (d_u − 2αp)ᵀx on the simplex (``utils.py:69-90``), i.e. the Euclidean projection
   of p − d_u/(2α) onto the simplex (``pfedgraph-qp = closed-form``) or cvxpy's solution as the
   code (``cvxpy``): :func:`graph_weights`;
4. the aggregate θ̄_u = Σ_v A_uv θ_v (``utils.py:124-127``; the client starts round t+1 from it,
   ``utils.py:133-134``) and, with ``pfedgraph-target = normalized``, the target
   c_u = Σ_v A_uv θ_v/‖θ_v‖ over all shared parameters jointly (``utils.py:129-131``):
   :func:`aggregate_by_graph`.

θ̄_u (and c_u) go to client u with round t+1's ``train`` message. With ``pfedgraph-eval =
aggregated`` round t's evaluation download carries θ̄_u instead (the client evaluates it and keeps
it as its state, as the code loads it into the client's model), and round t+1's message only c_u.
"""

from __future__ import annotations

import time
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla import composite
from corolla.methods.pfedgraph import TARGET
from corolla.models.factory import shared_init
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Download, Phase
from strategies.base import CorollaStrategy
from strategies.owed import Owed


def cosine_difference(deltas: np.ndarray, clamp: float = 0.9) -> np.ndarray:
    """d = −cos(Δ_u, Δ_v) for the rows of ``deltas`` (n × P), −1 where the cosine exceeds ``clamp``
    (the code: ``if diff < -0.9: diff = -1.0``); a zero row has cosine 0 with everything (torch's
    ``cosine_similarity`` with its ε)."""
    x = np.asarray(deltas, np.float64)
    norm = np.linalg.norm(x, axis=1)
    unit = x / np.maximum(norm, 1e-8)[:, None]
    d = -(unit @ unit.T)
    d[d < -clamp] = -1.0
    return d


def graph_weights(d: np.ndarray, p: np.ndarray, alpha: float, solver: str = "closed-form") -> np.ndarray:
    """Rows of the collaboration graph: argmin_x α‖x − p‖² + dᵀ_u x on the simplex, for every row
    d_u of ``d`` (the code's ``optimizing_graph_matrix_neighbor``: min α xᵀx + (d_u − 2αp)ᵀx)."""
    d = np.asarray(d, np.float64)
    p = np.asarray(p, np.float64)
    if solver == "closed-form":
        return composite.project_simplex(p[None, :] - d / (2.0 * alpha))
    if solver == "cvxpy":
        return np.stack([_qp_cvxpy(d[u], p, alpha) for u in range(len(d))])
    raise ValueError(f"pfedgraph-qp: expected 'closed-form' or 'cvxpy', got {solver!r}")


def _qp_cvxpy(d_u: np.ndarray, p: np.ndarray, alpha: float) -> np.ndarray:
    """One row as the code writes it (``utils.py:69-90``): P = αI (``psd_wrap``), q = d − 2αp,
    x ≥ 0, Σx = 1, cvxpy's default solver."""
    from corolla.extras import require

    require("qp")
    import cvxpy as cp

    n = len(p)
    x = cp.Variable(n)
    P = cp.atoms.affine.wraps.psd_wrap(alpha * np.identity(n))
    prob = cp.Problem(cp.Minimize(cp.quad_form(x, P) + (d_u - 2 * alpha * p) @ x), [x >= 0, cp.sum(x) == 1])
    prob.solve()
    return np.asarray(x.value, np.float64)


def aggregate_by_graph(a: np.ndarray, tables: dict[str, np.ndarray], targets: bool = True
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """θ̄ = A·θ per shared tensor (``tables[k]``: n × shape) and, if ``targets``, c = A·(θ/‖θ‖)
    with ‖θ_v‖ over all of client v's shared tensors (the code's ``weight_flatten_all``)."""
    agg = {k: composite.personalised(a, t) for k, t in tables.items()}
    if not targets:
        return agg, {}
    norms = np.sqrt(sum((np.asarray(t, np.float64).reshape(len(t), -1) ** 2).sum(1) for t in tables.values()))
    scaled = np.asarray(a, np.float64) / np.maximum(norms, 1e-12)[None, :]
    return agg, {k: composite.personalised(scaled, t) for k, t in tables.items()}


class PFedGraph(CorollaStrategy):
    hold_uploads = True
    counted_phases = ("train",)

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.init: dict[str, np.ndarray] = {}
        self.owed = Owed()   # θ̄_u (and c_u) until they have reached client u

    def setup(self) -> None:
        self.init = shared_init(self.cfg, self.n_items)

    @property
    def aggregated_eval(self) -> bool:
        return self.p.pfedgraph_eval == "aggregated"

    # -------------------------------------------------------------- train
    def configure_phase(self, phase, rnd, targets):
        return Download({}, self.owed.select(targets))

    def _evaluated_key(self, key: str) -> bool:
        """What an evaluation download carries: θ̄_u with ``pfedgraph-eval = aggregated``, else nothing."""
        return self.aggregated_eval and not key.startswith(TARGET)

    def delivered(self, phase, rnd, cids):
        """A training message takes θ̄_u and c_u; an evaluation (``pfedgraph-eval = aggregated``)
        takes θ̄_u only, and waits for :meth:`evaluated` (c_u goes with the next training)."""
        self.owed.handed(phase, cids, self._evaluated_key if phase == Phase.EVALUATE else lambda k: True)

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        if phase != Phase.TRAIN:
            return {}
        return {k: ArraySpec(v.shape, "float32") for k, v in self.init.items()}

    def aggregate_phase(self, phase, rnd, results):
        uploads = self.take_uploads()
        if not uploads:
            log(WARNING, "round %d: no valid upload; nothing is aggregated", rnd)
            return {"clients": len(results)}
        t0 = time.perf_counter()
        cids = sorted(uploads)
        tables = {k: np.stack([uploads[c].payload[k] for c in cids]) for k in self.init}
        deltas = np.concatenate([(tables[k] - self.init[k][None]).reshape(len(cids), -1).astype(np.float64)
                                 for k in self.init], 1)
        n = np.array([float(uploads[c].metrics["num-examples"]) for c in cids])
        p = n / n.sum() if n.sum() > 0 else np.full(len(cids), 1.0 / len(cids))
        a = graph_weights(cosine_difference(deltas, self.p.pfedgraph_clamp), p, self.p.pfedgraph_alpha,
                          self.p.pfedgraph_qp)
        agg, tgt = aggregate_by_graph(a, tables, self.p.pfedgraph_target == "normalized")
        for j, c in enumerate(cids):
            self.owed.owe(c, {**{k: agg[k][j] for k in agg}, **{TARGET + k: tgt[k][j] for k in tgt}})
        return {"clients": len(results), "train-loss": float(np.nanmean(
            [r.metrics.get("train-loss", np.nan) for r in results.values()])),
            "self-weight": float(np.mean(np.diag(a))), "server-s": time.perf_counter() - t0}

    # -------------------------------------------------------------- evaluate
    def evaluate_download(self, rnd, targets):
        """``aggregated``: θ̄_u to each client that has one (it evaluates it and keeps it)."""
        if not self.aggregated_eval:
            return Download()
        return Download({}, self.owed.select(targets, self._evaluated_key))

    def evaluated(self, rnd, results):
        self.owed.settle(results)   # not delivered: it goes with the next training

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        return self.owed.state_dict()

    def load_state_dict(self, state):
        self.owed.load_state_dict(state)
