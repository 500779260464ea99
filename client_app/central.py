"""The centralised references' client (docs/methods/central.md): the silo harness's Local client
(``client_app.mf:LocalClient``) holding every user, plus what SGL adds (wujcan/SGL-Torch c5632881):

* its model ``corolla.models.sgl.SGL`` with Xavier-uniform embeddings (SGL.ini ``param_init``);
* two views of the training graph drawn at the start of each round (= epoch; SGL.py:252-263),
  seeded by (seed, ``sgl-view``, client, round);
* BPR triples re-drawn each round as SGL's ``PairwiseSamplerV2`` (data/sampler.py:103-136, 310-365):
  as many as training interactions, the user uniform over users with training items, then a
  positive uniform over its training items and a negative uniform over its negative pool.

MF and NCF run as the Local client does.
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.mf import LocalClient
from corolla.models.factory import build_model, init_params
from corolla.models.sgl import SGL, draw_views, xavier_uniform_
from corolla.models.train import fixed_triples
from corolla.util import rng, stable_seed


class CentralClient(LocalClient):
    _round: int | None = None   # the round being trained (its views), None at evaluation

    @property
    def sgl(self) -> bool:
        return self.cfg["model"] == "sgl"

    def new_model(self):
        if not self.sgl:
            return build_model(self.cfg, len(self.users), self.fed.n_items)
        c = self.cfg
        return SGL(len(self.users), self.fed.n_items, c["dim"], c["gcn-layers"], c["weight-decay"],
                   self.p.sgl_ssl_reg, self.p.sgl_ssl_temp)

    def train_edges(self) -> tuple[np.ndarray, np.ndarray]:
        us, its = [], []
        for row, u in enumerate(self.users.tolist()):
            t = self.fed.rows("train", u)
            us.append(np.full(len(t), row, np.int64))
            its.append(t)
        return np.concatenate(us), np.concatenate(its)

    def init_state(self) -> dict[str, np.ndarray]:
        if not self.sgl:
            return super().init_state()
        model = self.new_model()
        if self.p.sgl_init == "xavier-uniform":
            g = torch.Generator().manual_seed(stable_seed(self.cfg["seed"], "sgl-init", self.cid))
            xavier_uniform_(model.user.weight, g)
            xavier_uniform_(model.item.weight, g)
        else:
            init_params(model, self.cfg["init-std"], stable_seed(self.cfg["seed"], "sgl-init", self.cid),
                        ["user.weight", "item.weight"])
        return model.get_arrays()

    def build(self, state):
        if not self.sgl:
            return super().build(state)
        model = self.new_model()
        model.set_arrays({k: v for k, v in state.items() if not k.startswith(("opt/", "samples/"))})
        model = model.to(self.device)
        users, items = self.train_edges()
        model.set_graph(users, items)
        if self._round is not None:
            g = rng(self.cfg["seed"], "sgl-view", self.cid, self._round)
            args = (len(self.users), self.fed.n_items, users, items, self.p.sgl_aug_type, self.p.sgl_ssl_ratio,
                    self.cfg["gcn-layers"])
            model.set_views(users, items, draw_views(*args, g), draw_views(*args, g))
        return model

    def samples(self, state, rnd: int) -> dict[str, np.ndarray]:
        if self.sgl and self.p.sgl_sampler == "user-uniform":
            return fixed_triples(self.fed, self.users, self.cfg["neg-pool"],
                                 rng(self.cfg["seed"], "sgl-triples", self.cid, rnd), self.item_mask)
        return super().samples(state, rnd)

    def local_update(self, rnd: int, state, shared):
        self._round = rnd
        try:
            return super().local_update(rnd, state, shared)
        finally:
            self._round = None
