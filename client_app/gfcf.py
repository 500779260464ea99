"""FedCIA client side (SIGIR'25; docs/methods/fedcia.md), parameter-free GF-CF path (paper §5.3).

Phase ``upload`` (round 1): the client builds its GF-CF filter F_k from its own training matrix
(``corolla.models.gfcf``; FedCIA's ``model/GFCF.py:13-33``), adds i.i.d. Laplace noise of scale ``laplace-scale``
(paper §5.2.5) and uploads it as ``filter`` (M × M float32).
``evaluate``: scores ``R_k F_k + β R_k F_agg`` (paper §5.3.2, β = ``agg-beta``) with the server's
``F_agg``. The node keeps only the ideal low-pass basis V (k × M, the SVD that dominates the
filter's cost) in the client's state and rebuilds F_k from it and the training matrix, bit for
bit the uploaded filter without its noise. ``LocalGFCFClient`` is the no-aggregation baseline
(``R_k F_k``). Nothing here imports torch: a GF-CF ClientApp process starts in a quarter second.
"""

from __future__ import annotations

import numpy as np

from client_app.base import LogicalClient, PhaseResult
from corolla.models.gfcf import gfcf_filter, ideal_basis, normalise
from corolla.noise import laplace_noise
from corolla.util import rng


class GFCFClient(LogicalClient):
    uses_torch = False

    def init_state(self) -> dict[str, np.ndarray]:
        return {}

    def train_matrix(self) -> np.ndarray:
        r = np.zeros((len(self.users), self.fed.n_items), np.float32)
        for row, u in enumerate(self.users.tolist()):
            r[row, self.fed.rows("train", u)] = 1.0
        return r

    def basis(self, state) -> np.ndarray:
        """The ideal low-pass basis V, from the client's state or computed."""
        if "basis" in state:
            return state["basis"]
        return ideal_basis(normalise(self.train_matrix())[0], self.p.svd_number, self.p.gfcf_null_rows)

    def filter(self, basis: np.ndarray) -> np.ndarray:
        return gfcf_filter(self.train_matrix(), self.p.svd_number, self.p.gfcf_wp,
                           self.p.gfcf_null_rows, basis=basis)

    def phase_upload(self, rnd, state, shared, personal) -> PhaseResult:
        v = self.basis(state)
        f = self.filter(v)
        b = self.p.laplace_scale
        if b > 0:
            f = f + laplace_noise(rng(self.cfg["seed"], "laplace", self.cid, rnd), b, f.shape, self.p.laplace_sampler)
        return PhaseResult(payload={"filter": f}, metrics={"num-examples": self.num_train}, state={"basis": v})

    @staticmethod
    def batch_upload(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        """The node's clients upload together. ``gfcf-upload = per-client``: each its own filter,
        exactly as :meth:`phase_upload`. ``node-sum``: the first client's reply carries the float64
        sum of every client's (noised) filter as ``filter-sum`` and ``summed-clients`` = their
        count; the others carry no array (``summed-into`` names the carrier). The sum is built as
        the filters are made, so the node holds one M × M sum, not one filter per client."""
        node_sum = clients[0].cfg["gfcf-upload"] == "node-sum"
        results, total = [], None
        for c, st, p in zip(clients, states, personals):
            r = c.phase_upload(rnd, st, shared, p)
            if node_sum:
                f = r.payload.pop("filter")
                total = f.astype(np.float64) if total is None else total + f
                r.metrics["summed-into"] = clients[0].cid
            results.append(r)
        if node_sum:
            results[0].payload["filter-sum"] = total
            results[0].metrics["summed-clients"] = len(results)
            del results[0].metrics["summed-into"]
        return results

    def scores(self, state, shared, personal, local_users, items):
        r = self.train_matrix()[local_users]
        out = r @ self.filter(self.basis(state))
        if "filter" in shared:
            out = out + self.p.agg_beta * (r @ shared["filter"])
        return out if items is None else np.take_along_axis(out, items, 1)


class LocalGFCFClient(GFCFClient):
    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return PhaseResult(metrics={"num-examples": self.num_train}, state={"basis": self.basis(state)})
