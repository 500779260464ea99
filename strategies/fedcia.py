"""FedCIA server side (SIGIR'25; docs/methods/fedcia.md), parameter-free GF-CF path (paper §5.3).

Round 1, phase ``upload``: every logical client sends its (noised) GF-CF filter F_k (M × M).
The server averages them, ``F_agg = (1/K) Σ_k F_k`` (paper §5.3.1; code fedcia_gsp.py:32, a
plain mean), *streaming*: each filter is added to a float64 running sum as its node's reply
arrives and is then dropped, so server memory is O(M²) whatever the number of clients.
``evaluate`` sends ``F_agg`` to every node. With ``gfcf-upload = node-sum`` a node uploads
the float64 sum of its clients' filters once (``filter-sum``, with the count
``summed-clients``): the same mean up to the order of float64 additions, the bytes of one filter
per node instead of one per client. GF-CF is one-shot: later rounds only re-evaluate.
"""

from __future__ import annotations

from logging import INFO
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.models.similarity import svd_reconstruct
from corolla.protocol import ArraySpec, PayloadError
from corolla.round import DEFAULT_CONTROL, Download, Phase
from strategies.aggregation import RunningMean
from strategies.base import ClientResult, CorollaStrategy


class FedCIAGFCF(CorollaStrategy):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.f_agg: np.ndarray | None = None
        self._mean = RunningMean()

    def phases(self, rnd: int) -> list[Phase]:
        return [Phase.UPLOAD] if self.f_agg is None else []

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        m = (self.n_items, self.n_items)
        if self.p.gfcf_upload == "node-sum":   # a node's sum, or a client's own filter, or nothing
            return {"filter": ArraySpec(m, "float32", optional=True),
                    "filter-sum": ArraySpec(m, "float64", optional=True)}
        return {"filter": ArraySpec(m, "float32")}

    def _node_mates(self, cid: int) -> list[int]:
        node = self.clients.get(cid, {}).get("node")
        return [c for c, v in self.clients.items() if v.get("node") == node] if node is not None else [cid]

    def accept(self, phase, rnd, cid, result: ClientResult) -> ClientResult:
        if phase != "upload":
            return result
        p, mets = result.payload, result.metrics
        if "filter-sum" in p:   # gfcf-upload = node-sum: the sum of this node's clients' filters
            n, mates = mets.get("summed-clients"), self._node_mates(cid)
            if "filter" in p or not isinstance(n, int) or not 1 <= n <= len(mates):
                raise PayloadError(f"a node sum must come alone with 1 <= summed-clients <= {len(mates)} "
                                   f"(the node's clients); got summed-clients={n!r}, arrays {sorted(p)}")
            self._mean.add_sum(p["filter-sum"], n)
        elif "filter" in p:
            self._mean.add(p["filter"])
        elif mets.get("summed-into") not in self._node_mates(cid):
            raise PayloadError(f"no filter, and summed-into={mets.get('summed-into')!r} names no client of its node")
        return ClientResult({}, mets)

    def aggregate_phase(self, phase, rnd, results):
        f_agg, n = self._mean.pop()
        if f_agg is None:
            raise RuntimeError("FedCIA: no valid filter was uploaded")
        self.f_agg = f_agg
        return {"clients": n}

    def evaluate_download(self, rnd, targets):
        return Download({"filter": self.f_agg} if self.f_agg is not None else {})

    def secure_layout(self, phase, rnd):
        return {"filter": (self.n_items, self.n_items)} if phase == Phase.UPLOAD else None

    def aggregate_secure(self, phase, rnd, mean, metrics):
        self.f_agg = mean["filter"].astype(np.float32)
        return {"clients": metrics["clients"]}

    def state_dict(self):
        return {"f_agg": self.f_agg} if self.f_agg is not None else {}

    def load_state_dict(self, state):
        self.f_agg = state.get("f_agg")


class FedCIAParam(CorollaStrategy):
    """FedCIA with parameter models (paper §5.2, Algorithm 1; its ``flalgorithm/fedcia_param.py``).

    Phase ``train``: every logical client trains and uploads its item similarity C_k (M × M, or
    its rank-L SVD factors); the server averages them streaming into C_s = (1/K) Σ_k C_k (a plain
    mean, paper §5.2.3). Phase ``finetune``: C_s goes to every client (once per node), which pulls
    its item table towards it. User tables, item tables and models never leave the clients.
    """

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.c_s: np.ndarray | None = None
        self._mean = RunningMean()

    def phases(self, rnd: int) -> list[Phase]:
        return [Phase.TRAIN, Phase.FINETUNE]

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        m = self.n_items
        if phase != Phase.TRAIN:
            return {}
        if self.p.fedcia_upload == "svd":
            rank = self.p.svd_rank or self.cfg["dim"]
            return {"vh": ArraySpec((rank, m)), "s": ArraySpec((rank,))}
        return {"sim": ArraySpec((m, m))}

    def accept(self, phase, rnd, cid, result: ClientResult) -> ClientResult:
        if phase != Phase.TRAIN:
            return result
        p = result.payload
        self._mean.add(svd_reconstruct(p["vh"], p["s"]) if "vh" in p else p["sim"])
        return ClientResult({}, result.metrics)

    def aggregate_phase(self, phase, rnd, results):
        if phase == Phase.FINETUNE:
            losses = [r.metrics.get("finetune-loss", np.nan) for r in results.values()]
            return {"finetune-loss": float(np.nanmean(losses)) if losses else float("nan")}
        c_s, n = self._mean.pop()
        if c_s is not None:
            self.c_s = c_s
        else:
            log(INFO, "round %d: no valid similarity; C_s unchanged", rnd)
        losses = [r.metrics.get("train-loss", np.nan) for r in results.values()]
        return {"clients": n, "train-loss": float(np.nanmean(losses)) if losses else float("nan")}

    def eval_fuses_after(self, rnd):
        return True   # the clients evaluate their fine-tuned models in the finetune message

    def secure_layout(self, phase, rnd):
        return {"sim": (self.n_items, self.n_items)} if phase == Phase.TRAIN else None

    def aggregate_secure(self, phase, rnd, mean, metrics):
        self.c_s = mean["sim"].astype(np.float32)
        return {"clients": metrics["clients"], "train-loss": metrics["train-loss"]}

    def configure_phase(self, phase, rnd, targets):
        if phase == Phase.FINETUNE and self.c_s is not None:
            return Download({"sim": self.c_s})
        return Download()

    def state_dict(self):
        return {"c_s": self.c_s} if self.c_s is not None else {}

    def load_state_dict(self, state):
        self.c_s = state.get("c_s")
