"""FedRecon's server (Singhal et al., NeurIPS'21; google-research/federated a5af8c4
``reconstruction/training_process.py``; docs/methods/fedrecon.md).

Round: the global item table g down (once per node, FedAvg's ``configure_phase``), each sampled
client's trained table (or its changed rows) and its number of table-update examples n_i up; then

    g <- g + η_s · Σ_i w_i (q_i − g) / Σ_i w_i,   w_i = n_i ('examples') or 1 ('uniform')

(``MeanFactory`` of the client deltas, training_process.py:476-483, 502-509, applied as the
gradient −Δ of the server's SGD(η_s), l.173-177). With η_s = 1 this is FedAvg's mean exactly
(every q_i starts from g). Evaluation is not fused after the round: round t's evaluation travels
with round t+1's message, whose clients reconstruct with the new g (the code's evaluation
computation, evaluation_computation.py:171-179) before they train.
"""

from __future__ import annotations

import numpy as np

from corolla.util import stable_seed
from strategies.fedavg import FedAvg


class FedRecon(FedAvg):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.weighted = self.p.fedrecon_weighting == "examples"

    def setup(self) -> None:
        if not self.global_params:
            self.global_params = {"item.weight": initial_table(self.cfg, self.p, self.n_items)}

    def aggregate_phase(self, phase, rnd, results):
        before = self.global_params
        out = super().aggregate_phase(phase, rnd, results)
        eta = float(self.p.fedrecon_server_lr)
        if results and eta != 1.0:
            self.global_params = {k: (before[k].astype(np.float64) + eta * (self.global_params[k].astype(np.float64)
                                                                            - before[k])).astype(before[k].dtype)
                                  for k in before}
        return out


def initial_table(cfg, prm, n_items: int) -> np.ndarray:
    """The initial global item table: U(±s) (Keras' 'uniform', the code's item Embedding) or N(0, init-std²)."""
    g = np.random.default_rng(stable_seed(cfg["seed"], "fedrecon-items"))
    if prm.fedrecon_init == "uniform":
        s = prm.fedrecon_init_scale
        return g.uniform(-s, s, (n_items, cfg["dim"])).astype(np.float32)
    return (g.standard_normal((n_items, cfg["dim"])) * cfg["init-std"]).astype(np.float32)
