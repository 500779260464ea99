"""Client side of the parameter-averaging baselines: FedAvg (FedMF/FedNCF), FCF/SimpleAvg, Local.

State of a logical client: its private user table (``user.weight``, one row per hosted user), its
copy of the shared parameters (item table, NCF tower), the optimiser state when
``optimizer-state=persist``, and the fixed training triples when ``train-samples=fixed-triples``.

Phases
------
``train``  FedAvg/FCF: load the received global shared parameters, train ``local-epochs``, upload
           the shared parameters and ``num-examples`` (the number of training samples).
           Local: train the own model; nothing is uploaded.
``evaluate`` FedAvg/FCF: own user table + the received global shared parameters. Local: own model.
"""

from __future__ import annotations

import numpy as np
import torch

from client_app.base import LogicalClient, PhaseResult
from corolla.models.factory import build_model, shared_init, user_init
from corolla.models.train import (fixed_triples, make_optimizer, optimizer_from_arrays,
                                  optimizer_to_arrays, per_positive, train_epochs)
from corolla.util import rng


class ParamClient(LogicalClient):
    """A logical client holding one shared model (MF or NCF) over its users."""

    federated = True

    def __init__(self, cfg, fed, cid, users, device, data_dir=None, params=None):
        super().__init__(client_config(cfg, cid, fed.num_clients), fed, cid, users, device, data_dir, params)

    def build(self, state: dict[str, np.ndarray]):
        model = build_model(self.cfg, len(self.users), self.fed.n_items)
        model.set_arrays({k: v for k, v in state.items() if not k.startswith(("opt/", "samples/"))})
        model = model.to(self.device)
        if hasattr(model, "set_graph"):  # LightGCN: the client's own training graph
            us, its = [], []
            for row, u in enumerate(self.users.tolist()):
                t = self.fed.rows("train", u)
                us.append(np.full(len(t), row, np.int64))
                its.append(t)
            model.set_graph(np.concatenate(us), np.concatenate(its))
        return model

    def init_state(self) -> dict[str, np.ndarray]:
        model = build_model(self.cfg, len(self.users), self.fed.n_items)
        user_init(model, self.cfg, self.cid)
        state = model.get_arrays(["user.weight"])
        state.update(self.start_shared())
        if self.cfg["train-samples"] == "fixed-triples":
            s = fixed_triples(self.fed, self.users, self.cfg["neg-pool"], rng(self.cfg["seed"], "triples", self.cid),
                              self.item_mask)
            state.update({f"samples/{k}": v for k, v in s.items()})
        return state

    def start_shared(self) -> dict[str, np.ndarray]:
        """The item table (and tower) this client starts from: the one every client shares."""
        return shared_init(self.cfg, self.fed.n_items)

    def samples(self, state, rnd: int) -> dict[str, np.ndarray]:
        if self.cfg["train-samples"] == "fixed-triples":
            return {k[len("samples/"):]: v for k, v in state.items() if k.startswith("samples/")}
        return per_positive(self.fed, self.users, self.cfg["neg-pool"], self.cfg["num-negatives"],
                            self.cfg["loss"] == "bce", rng(self.cfg["seed"], "negatives", self.cid, rnd),
                            self.item_mask)

    def local_update(self, rnd: int, state, shared: dict[str, np.ndarray]):
        model = self.build(state)
        if shared:
            model.set_arrays(shared)
        opt = make_optimizer(self.cfg, model.parameters())
        if self.cfg["optimizer-state"] == "persist":
            optimizer_from_arrays(opt, state, self.device)
        samples = self.samples(state, rnd)
        loss = train_epochs(model, opt, samples, self.cfg["local-epochs"], self.cfg["batch-size"],
                            rng(self.cfg["seed"], "shuffle", self.cid, rnd), self.device,
                            self.penalty(model, shared))
        new_state = model.get_arrays()
        if self.cfg["optimizer-state"] == "persist":
            new_state.update(optimizer_to_arrays(opt))
        new_state.update({k: v for k, v in state.items() if k.startswith("samples/")})
        return model, new_state, loss, len(samples["user"])

    def penalty(self, model, shared: dict[str, np.ndarray]):
        """A term added to every batch's loss (None: none); FedProx overrides it."""
        return None

    def phase_train(self, rnd: int, state, shared, personal) -> PhaseResult:
        model, new_state, loss, n = self.local_update(rnd, state, shared if self.federated else {})
        payload = model.get_arrays(model.shared_names()) if self.federated else {}
        return PhaseResult(payload=payload, metrics={"num-examples": n, "train-loss": loss}, state=new_state)

    @torch.no_grad()
    def scores(self, state, shared, personal, local_users, items):
        model = self.build(state)
        if self.federated and shared:
            model.set_arrays(shared)
        model.eval()
        u = torch.as_tensor(local_users, device=self.device)
        if items is None:
            return model.full_sort_scores(u).cpu().numpy()
        it = torch.as_tensor(items, device=self.device)
        n, c = it.shape
        return model.score(u.repeat_interleave(c), it.reshape(-1)).view(n, c).cpu().numpy()


def client_config(cfg: dict, cid: int, num_clients: int) -> dict:
    """The run config as seen by logical client ``cid``: with ``client-models`` set, the model and
    dimension of its group (contiguous blocks of ids, the last taking the remainder; FedCIA Fig. 5).
    LightGCN trains with BPR and the MLP with BCE (FedCIA's ``model/LightGCN.py:72-81``, ``model/MLP.py``)."""
    if not cfg.get("client-models"):
        return cfg
    parts = cfg["client-models"].split("|")
    size = max(1, num_clients // len(parts))
    name, _, dim = parts[min(cid // size, len(parts) - 1) if 0 <= cid < num_clients else 0].partition(":")
    out = {**cfg, "model": name, "dim": int(dim)}
    if name == "lightgcn":
        out["loss"] = "bpr"
    elif name == "ncf":
        out["loss"] = "bce"
        out["mlp-layers"] = f"{2 * int(dim)},32"
    return out


class FedAvgClient(ParamClient):
    federated = True


class LocalClient(ParamClient):
    federated = False

    def start_shared(self) -> dict[str, np.ndarray]:
        """``local-init = shared``: the draw every client shares (FedCA's code starts all clients
        from one model); ``per-client``: a draw of this client's own, as FedCIA's code builds one
        model per client for its no-aggregation rows (``flalgorithm/base.py``, ``build_model``)."""
        return shared_init(self.cfg, self.fed.n_items,
                           self.cid if self.cfg.get("local-init") == "per-client" else None)
