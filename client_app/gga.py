"""Graph-guided aggregation (GGA) on the silo harness: FedCIA Table 3's GGA column (FedCIA §6.3:
"clients aggregate parameters by forming a relationship graph based on item similarity (e.g.,
GPFedRec)"), GPFedRec's client (Zhang et al., KDD'24; its code Zhangcx19/GPFedRec edb66e1,
``engine.py:92-140``; docs/methods/ufgraphfr.md) around FedCIA's MF and MLP models and their
local training (``client_app.mf``: Adam, fixed triples, weight decay, the optimiser state kept).

Round t, per logical client (one user in FedCIA's Table 3):

1. start: its own parameters, the item table replaced by the server's global table (the mean of
   the graph-aggregated tables R, round t−1) when there is one;
2. local training: FedCIA's loss + ``item-reg`` · mean((Q − r)²) over the whole item table, r its
   own graph-aggregated table r_u from the server (before the first aggregation: the shared
   initial table, which every client starts from), as GPFedRec's code does;
3. upload: the trained item table alone (+ Laplace(``upload-noise``) when > 0); the user vector
   and the MLP tower stay on the client, as in GPFedRec;
4. evaluation: its own post-training model (GPFedRec evaluates each client's local model).

FedCIA's code has no GGA (its README and ``flalgorithm/``): this is GPFedRec's aggregation put on
the clients of FedCIA's WAA and IM columns, so that only the aggregation differs between the
three columns.
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.base import PhaseResult
from client_app.mf import ParamClient
from corolla.models.factory import shared_init
from corolla.util import rng


class GGAClient(ParamClient):
    """A silo client of ``method = gpfedrec`` (MF or NCF/MLP)."""

    federated = True

    def phase_train(self, rnd: int, state, shared, personal) -> PhaseResult:
        start = {"item.weight": shared["item.global"]} if "item.global" in shared else {}
        target = personal.get("item.target")
        if target is None:
            target = shared_init(self.cfg, self.fed.n_items)["item.weight"]
        self._target = torch.as_tensor(np.asarray(target, np.float32), device=self.device)
        try:
            model, new_state, loss, n = self.local_update(rnd, state, start)
        finally:
            self._target = None
        table = new_state["item.weight"]
        b = float(self.p.upload_noise)
        if b > 0:
            g = rng(self.cfg["seed"], "upload-noise", self.cid, rnd)
            table = (table + g.laplace(0.0, b, table.shape)).astype(np.float32)
        return PhaseResult(payload={"item.weight": table}, metrics={"num-examples": n, "train-loss": loss},
                           state=new_state)

    def penalty(self, model, shared):
        lam = float(self.p.item_reg)
        target = self._target
        if lam == 0.0 or target is None:
            return None
        table = dict(model.named_parameters())["item.weight"]

        def towards_r_u() -> torch.Tensor:
            return lam * ((table - target) ** 2).mean()

        return towards_r_u

    def scores(self, state, shared, personal, local_users, items):
        """Its own post-training model (nothing from the download)."""
        return super().scores(state, {}, personal, local_users, items)
