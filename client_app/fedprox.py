"""FedProx's client (Li et al., MLSys 2020, Eq. 2): FedAvg's client (``client_app.mf``) whose local
loss adds the proximal term (μ/2)·Σ_k ‖w_k − w_k^t‖² over the shared parameters w (item table,
NCF tower), w^t being the global parameters received this round. The user table is private and
not penalised. With μ = 0 the term and its gradient are exactly zero: FedAvg bit for bit (tested).
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.mf import FedAvgClient


class FedProxClient(FedAvgClient):
    def penalty(self, model, shared: dict[str, np.ndarray]):
        if not shared:
            return None
        mu = float(self.p.fedprox_mu)
        params = dict(model.named_parameters())
        anchors = [(params[k], torch.as_tensor(v, device=self.device)) for k, v in shared.items()]

        def proximal() -> torch.Tensor:
            return 0.5 * mu * sum(((w - w0) ** 2).sum() for w, w0 in anchors)

        return proximal
