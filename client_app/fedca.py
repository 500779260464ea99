"""FedCA's client (FedCA paper §5; its code as docs/methods/fedca.md describes it) on the one-user harness: a one-user PMF/NCF client
(``client_app.pmf``) that starts a round from ρ·own + (1−ρ)·Q_g[u] when its personalised
aggregate arrives with the round's message (the code's ``tools.py:180-214``), uploads its item table (+ tower) with its
descriptor X_u (``basis``: k × d PCA of the item rows of the round's training rows, duplicates
included; with ``fedca-subspace = left`` the paper's k left singular vectors of the interacted
items' rows, k × |I_u|), unless the server's ``Control`` says it was not drawn for aggregation
(``fedca-upload = subset``).
"""

from __future__ import annotations

import numpy as np

from client_app.pmf import OneUserClient, interpolate
from corolla import composite


class FedCAClient(OneUserClient):
    def start_params(self, state, shared, personal) -> dict[str, np.ndarray]:
        params = dict(state)
        if personal:
            params = interpolate(params, personal, self.p.fedca_rho)
        return params

    def evaluation_state(self, state, personal) -> dict[str, np.ndarray]:
        """An aggregated client evaluates ρ·own + (1−ρ)·Q_g[u] (and keeps it as its state)."""
        return interpolate(state, personal, self.p.fedca_rho) if personal else state

    def upload(self, new, rows, personal) -> dict[str, np.ndarray]:
        if not self.control.upload:
            return {}
        payload = super().upload(new, rows, personal)
        payload["basis"] = descriptor(self.p, new["item.weight"], rows["item"],
                                      self.fed.rows("train", int(self.users[0]))).astype(np.float32)
        return payload


def descriptor(prm, item_table: np.ndarray, sample_items: np.ndarray, train_items: np.ndarray) -> np.ndarray:
    if prm.fedca_subspace == "pca":
        return composite.principal_basis(item_table[sample_items], prm.fedca_k, prm.fedca_pca_sign)
    return composite.left_basis(item_table[train_items], prm.fedca_k)
