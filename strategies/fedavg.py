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
from corolla.protocol import ArraySpec, PayloadError, row_keys
from corolla.round import DEFAULT_CONTROL, Download, Phase
from strategies.aggregation import weighted_mean, weighted_mean_rows
from strategies.base import ClientResult, CorollaStrategy


class FedAvg(CorollaStrategy):
    weighted = True
    counted_phases = ("train",)

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.global_params: dict[str, np.ndarray] = {}

    def setup(self) -> None:
        if not self.global_params:
            init = shared_init(self.cfg, self.n_items)
            # ncf-tower = personal (a one-user harness key; the silo harness has none): only the item
            # table crosses, each tower stays home (the FedCA paper's §3), as the client's upload does
            personal = getattr(self.p, "ncf_tower", "shared") == "personal"
            self.global_params = {k: v for k, v in init.items() if not (personal and k.startswith("mlp."))}

    def configure_phase(self, phase, rnd, targets):
        return Download(dict(self.global_params))

    @property
    def row_tables(self) -> tuple[str, ...]:
        """Tables the clients send as changed rows (one-user harness, ``item-upload = rows``)."""
        return ("item.weight",) if self.cfg["harness"] == "one-user" and self.p.item_upload == "rows" else ()

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        out = {k: ArraySpec(v.shape, str(v.dtype)) for k, v in self.global_params.items()}
        for k in self.row_tables:
            m, d = out.pop(k).shape
            rk, vk = row_keys(k)
            out[rk] = ArraySpec((-1,), "int32", max_shape=(m,))
            out[vk] = ArraySpec((-1, d), str(self.global_params[k].dtype), max_shape=(m, d))
        return out

    def accept(self, phase, rnd, cid, result: ClientResult) -> ClientResult:
        for k in (self.row_tables if phase == Phase.TRAIN else ()):
            rk, vk = row_keys(k)
            rows, vals = result.payload[rk], result.payload[vk]
            if len(rows) != len(vals):
                raise PayloadError(f"'{rk}': {len(rows)} row ids for {len(vals)} rows of values")
            if len(rows) and (rows[0] < 0 or rows[-1] >= self.global_params[k].shape[0]
                              or (len(rows) > 1 and (np.diff(rows) <= 0).any())):
                raise PayloadError(f"'{rk}': expected sorted distinct row ids in [0, {self.global_params[k].shape[0]})")
        return super().accept(phase, rnd, cid, result)

    def aggregate_phase(self, phase, rnd, results: dict[int, ClientResult]):
        if not results:
            log(INFO, "round %d: no valid update; the global model is unchanged", rnd)
            return {}
        cids = sorted(results)
        w = [float(results[c].metrics["num-examples"]) if self.weighted else 1.0 for c in cids]
        if sum(w) <= 0:
            w = [1.0] * len(cids)
        if not self.row_tables:
            self.global_params = weighted_mean([results[c].payload for c in cids], w)
        else:
            rows = {k for t in self.row_tables for k in row_keys(t)}
            dense = [k for k in results[cids[0]].payload if k not in rows]
            new = weighted_mean([{k: results[c].payload[k] for k in dense} for c in cids], w) if dense else {}
            for k in self.row_tables:
                rk, vk = row_keys(k)
                new[k] = weighted_mean_rows(self.global_params[k],
                                            [(results[c].payload[rk], results[c].payload[vk]) for c in cids], w)
            self.global_params = {k: new[k] for k in self.global_params}
        losses = [results[c].metrics.get("train-loss", float("nan")) for c in cids]
        return {"train-loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
                "clients": len(cids)}

    def evaluate_download(self, rnd, targets):
        return Download(dict(self.global_params))

    @property
    def secure_weighted(self):
        return self.weighted

    def secure_layout(self, phase, rnd):
        return {k: v.shape for k, v in self.global_params.items()} if phase == Phase.TRAIN else None

    def aggregate_secure(self, phase, rnd, mean, metrics):
        self.global_params = {k: mean[k].astype(self.global_params[k].dtype) for k in self.global_params}
        return {"train-loss": metrics["train-loss"], "clients": metrics["clients"]}

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

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        return {}

    def eval_fuses_after(self, rnd):
        return self.fuses_after

    def aggregate_phase(self, phase, rnd, results):
        losses = [r.metrics.get("train-loss", float("nan")) for r in results.values()]
        return {"train-loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
                "clients": len(results)}
