"""FedAtt (Ji et al. 2019; shaoxiongji/fed-att ``src/agg/aggregate.py``) on the silo and one-user harnesses: per
parameter tensor, attention softmax_c(‖w_server − w_c‖) and
w ← w_server − ε Σ_c att_c (w_server − w_c) + dp·N(0, I) (``corolla.composite.fedatt``)."""

from __future__ import annotations

import numpy as np

from corolla import composite
from corolla.util import rng
from strategies.fedavg import FedAvg


class FedAtt(FedAvg):
    """FedAtt (Ji et al. 2019; shaoxiongji/fed-att ``src/agg/aggregate.py``): per parameter tensor, attention
    softmax_c(‖w_server − w_c‖) and w ← w_server − ε Σ_c att_c (w_server − w_c) + dp·N(0, I)."""

    def aggregate_phase(self, phase, rnd, results):
        if not results:
            return {}
        cids = sorted(results)
        g = rng(self.cfg["seed"], "fedatt-dp", rnd)
        self.global_params = {
            k: composite.fedatt(v, np.stack([results[c].payload[k] for c in cids]), self.p.fedatt_epsilon,
                                self.p.fedatt_ord, self.p.fedatt_dp, g, self.p.fedatt_weights, self.p.fedatt_norm)
            for k, v in self.global_params.items()}
        losses = [results[c].metrics.get("train-loss", np.nan) for c in cids]
        return {"train-loss": float(np.nanmean(losses)), "clients": len(cids)}
