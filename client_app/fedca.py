"""FedCA's client (FedCA spec B1–B4) on the one-user harness: a one-user PMF/NCF client
(``client_app.pmf``) that starts a round from ρ·own + (1−ρ)·Q_g[u] when its personalised
aggregate arrives with the round's message (spec B4.1), uploads its item table (+ tower) with its
descriptor X_u (``basis``: k × d PCA of the item rows of the round's training rows, duplicates
included; with ``fedca-subspace = left`` the paper's k left singular vectors of the interacted
items' rows, k × |I_u|), and with ``fedca-upload = subset`` only when the server drew it.
"""

from __future__ import annotations

import numpy as np

from client_app.pmf import OneUserClient, interpolate
from corolla import composite


class FedCAClient(OneUserClient):
    def start_params(self, state, shared, personal) -> dict[str, np.ndarray]:
        params = dict(state)
        agg = {k: v for k, v in personal.items() if k != "upload"}
        if agg:
            params = interpolate(params, agg, self.cfg["fedca-rho"])
        return params

    def upload(self, new, rows, personal) -> dict[str, np.ndarray]:
        if self.cfg["fedca-upload"] == "subset" and "upload" not in personal:
            return {}
        payload = super().upload(new, rows, personal)
        payload["basis"] = descriptor(self.cfg, new["item.weight"], rows["item"],
                                      self.fed.rows("train", int(self.users[0]))).astype(np.float32)
        return payload


def descriptor(cfg, item_table: np.ndarray, sample_items: np.ndarray, train_items: np.ndarray) -> np.ndarray:
    if cfg["fedca-subspace"] == "pca":
        return composite.principal_basis(item_table[sample_items], cfg["fedca-k"])
    return composite.left_basis(item_table[train_items], cfg["fedca-k"])
