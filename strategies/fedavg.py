"""FedAvg (FedMF / FedNCF), FCF / SimpleAvg and Local on the shared MF / NCF models.

* FedAvg: the global shared parameters (item table, NCF tower) are the example-weighted mean of
  the sampled clients' uploads (McMahan et al. 2017; FedCIA code ``fedavg.py:51-71``, weights =
  number of training samples). User tables stay on the clients.
* FCF / SimpleAvg: the unweighted mean (Ammad-ud-din et al. 2019, as the FedCA and Dist-FedAvg
  papers use it).
* Local: no aggregation and nothing uploaded; every client trains and evaluates its own model.

Round: ``train`` phase (global shared params down, trained shared params + ``num-examples`` up),
then ``evaluate`` (global shared params down, per-user metrics up). With ``fused-evaluation``
FedAvg/FCF's evaluation of round t travels with round t+1's ``train`` message (the clients
evaluate the global parameters they receive, with their round-t user tables, then train from
them: the global arrays are sent once), and Local's clients evaluate right after training.
"""

from __future__ import annotations

from logging import INFO
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.models.factory import shared_init
from corolla.protocol import ArraySpec
from strategies.aggregation import weighted_mean
from strategies.base import ClientResult, CorollaStrategy


class FedAvg(CorollaStrategy):
    weighted = True
    counted_phases = ("train",)

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.global_params: dict[str, np.ndarray] = {}

    def setup(self) -> None:
        if not self.global_params:
            self.global_params = shared_init(self.cfg, self.n_items)

    def configure_phase(self, phase, rnd, targets):
        return dict(self.global_params), {}

    def expected_payload(self, phase, cid):
        return {k: ArraySpec(v.shape, str(v.dtype)) for k, v in self.global_params.items()}

    def aggregate_phase(self, phase, rnd, results: dict[int, ClientResult]):
        if not results:
            log(INFO, "round %d: no valid update; the global model is unchanged", rnd)
            return {}
        cids = sorted(results)
        w = [float(results[c].metrics["num-examples"]) if self.weighted else 1.0 for c in cids]
        if sum(w) <= 0:
            w = [1.0] * len(cids)
        self.global_params = weighted_mean([results[c].payload for c in cids], w)
        losses = [results[c].metrics.get("train-loss", float("nan")) for c in cids]
        return {"train-loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
                "clients": len(cids)}

    def evaluate_download(self, rnd, targets):
        return dict(self.global_params), {}

    @property
    def secure_weighted(self):
        return self.weighted

    def secure_layout(self, phase, rnd):
        return {k: v.shape for k, v in self.global_params.items()} if phase == "train" else None

    def aggregate_secure(self, phase, rnd, mean, results):
        self.global_params = {k: mean[k].astype(self.global_params[k].dtype) for k in self.global_params}
        losses = [r.metrics.get("train-loss", float("nan")) for r in results.values()]
        return {"train-loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
                "clients": len(results)}

    def state_dict(self):
        return {f"global/{k}": v for k, v in self.global_params.items()}

    def load_state_dict(self, state):
        self.global_params = {k[len("global/"):]: v for k, v in state.items() if k.startswith("global/")}


class FCF(FedAvg):
    weighted = False


class Local(CorollaStrategy):
    # each client evaluates its own model right after training, in that message; False where the
    # clients send their metrics with the training reply anyway (the one-user harness)
    fuses_after = True

    def expected_payload(self, phase, cid):
        return {}

    def eval_fuses_after(self, rnd):
        return self.fuses_after

    def aggregate_phase(self, phase, rnd, results):
        losses = [r.metrics.get("train-loss", float("nan")) for r in results.values()]
        return {"train-loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
                "clients": len(results)}
