"""FedCIA client side (SIGIR'25; docs/methods/fedcia.md), parameter models (paper §5.2, Algorithm 1).
The parameter-free GF-CF path is ``client_app.gfcf``."""

from __future__ import annotations

import numpy as np

from client_app.base import PhaseResult
from client_app.mf import ParamClient
from corolla.models.similarity import finetune, finetune_many, similarity, svd_factors
from corolla.noise import laplace_noise
from corolla.util import rng, stable_seed


class FedCIAParamClient(ParamClient):
    """FedCIA with a parameter model (MF / NCF-MLP): only item similarity crosses the network.

    ``train``: the local epoch(s) with the persistent Adam (FedCIA's ``flalgorithm/fedcia_param.py:67-78``), then upload
    ``C_k = E Eᵀ + Laplace(b)`` (``sim``, M × M) or its truncated SVD (``vh``: L × M, ``s``: L).
    ``finetune``: ``finetune-steps`` SGD steps (lr ``finetune-lr``, weight decay ``weight-decay``)
    of the item table on the ``finetune-loss`` towards the received C_s (``fedcia_param.py:56-65``; paper Eq. 6), with the
    closed-form O(M²d) gradient of ``corolla.models.similarity.finetune_grad``.
    ``evaluate``: the client's own model; nothing is downloaded.
    """

    federated = False  # no shared parameters are exchanged

    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        model, new_state, loss, n = self.local_update(rnd, state, {})
        c = similarity(model.item.weight.detach().cpu().numpy())
        b = self.p.laplace_scale
        if b > 0:
            c = c + laplace_noise(rng(self.cfg["seed"], "laplace", self.cid, rnd), b, c.shape, self.p.laplace_sampler)
        if self.p.fedcia_upload == "svd":
            vh, s = svd_factors(c, self.p.svd_rank or self.cfg["dim"], self.p.fedcia_svd_solver,
                                stable_seed(self.cfg["seed"], "svd", self.cid, rnd))
            payload = {"vh": vh, "s": s}
        else:
            payload = {"sim": c}
        return PhaseResult(payload=payload, metrics={"num-examples": n, "train-loss": loss}, state=new_state)

    def phase_finetune(self, rnd, state, shared, personal) -> PhaseResult:
        import torch

        e = torch.as_tensor(state["item.weight"], device=self.device)
        c_s = torch.as_tensor(shared["sim"], device=self.device)
        e, loss = finetune(e, c_s, self.p.finetune_steps, self.p.finetune_lr,
                           self.cfg["weight-decay"], self.p.finetune_loss)
        new_state = dict(state)
        new_state["item.weight"] = e.cpu().numpy().astype(np.float32)
        return PhaseResult(metrics={"finetune-loss": loss}, state=new_state)

    @staticmethod
    def batch_finetune(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        """All hosted clients fine-tune together (:func:`finetune_many`): one M × (B·d) product
        per step; equal to running :meth:`phase_finetune` per client."""
        import torch

        cfg = clients[0].cfg

        prm = clients[0].p
        c_s = torch.as_tensor(shared["sim"], device=clients[0].device)
        es = [torch.as_tensor(st["item.weight"], device=clients[0].device) for st in states]
        es, losses = finetune_many(es, c_s, prm.finetune_steps, prm.finetune_lr, cfg["weight-decay"],
                                   prm.finetune_loss)
        out = []
        for st, e, loss in zip(states, es, losses):
            new_state = dict(st)
            new_state["item.weight"] = e.cpu().numpy().astype(np.float32)
            out.append(PhaseResult(metrics={"finetune-loss": loss}, state=new_state))
        return out
