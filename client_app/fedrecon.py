"""FedRecon's client (Singhal et al., NeurIPS'21; google-research/federated a5af8c4
``reconstruction/``; docs/methods/fedrecon.md) on the one-user harness (``client_app.oneuser``).

The client is stateless: nothing of it survives a round (the code builds its model anew in every
client computation, training_process.py:414). Round t, per client (one user):

1. rows: the harness's round rows (every train positive and ``num-negatives`` fresh negatives),
   in the round's seeded order, cut into batches of ``batch-size``; with
   ``fedrecon-split-dataset`` the even-indexed batches reconstruct and the odd-indexed ones
   update the table, else both phases use every batch (reconstruction_utils.py:114-139); the
   reconstruction batches repeated ``fedrecon-recon-epochs`` times and capped at
   ``fedrecon-recon-steps``, the update batches ``local-epochs`` times and capped at
   ``fedrecon-post-steps`` (l.144-160);
2. a fresh user vector (U(±0.05), Keras' ``'uniform'`` of the code's ``UserEmbedding``,
   models.py:359-377), seeded by (seed, client, round);
3. **reconstruction**: one SGD step (``fedrecon-recon-lr``) per reconstruction batch on the user
   vector only, the received table frozen (training_process.py:325-342);
4. **table update**: one SGD step (``lr``; with ``fedrecon-table-lr-eta`` > 0 UFGraphFR's code base's
   item rate lr·M·eta − lr) per update batch on the item table only (with
   ``fedrecon-joint`` the user vector too), the user vector frozen (l.344-364);
5. upload: the item table (or, with ``item-upload = rows``, the rows it trained) and
   ``num-examples`` = the examples of step 4 (l.393-396).

Evaluation (``evaluate``, fused into the next round's message): a fresh user vector reconstructed
on the round's rows (or their even batches, ``fedrecon-eval-split``) with the received global
table, then the held-out item ranked among its negatives (evaluation_computation.py:171-179 with
the client's training rows as the support set and the leave-one-out candidates as the query).

Loss: the mean over a batch of BCE on sigmoid(p·q) (UFGraphFR's implicit protocol) or of
(p·q − y)² (``fedrecon-loss = mse``, the code's Keras MSE). The users a node hosts train stacked;
each keeps its own batches, so the result equals training them one by one (a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch.nn import functional as F

from client_app.base import PhaseResult
from client_app.oneuser import OneUserBase, evaluate_stacked, round_samples, rows_mode, rows_upload
from corolla.models.stacked import train_users
from corolla.models.ufgraphfr import learning_rates
from corolla.util import rng


@dataclass
class Plan:
    """One client's round: the row indices of each reconstruction step and of each update step."""
    recon: list[np.ndarray]
    post: list[np.ndarray]

    @property
    def post_examples(self) -> int:
        return int(sum(len(b) for b in self.post))


def plan(order: np.ndarray, batch_size: int, split: bool, recon_epochs: int, recon_steps: int,
         post_epochs: int, post_steps: int, post: bool = True) -> Plan:
    """The code's ``build_dataset_split_fn`` on a client dataset of rows ``order`` batched by
    ``batch_size`` (reconstruction_utils.py:114-160)."""
    batches = [order[a:a + batch_size] for a in range(0, len(order), batch_size)]
    rb = batches[0::2] if split else batches
    pb = batches[1::2] if split else batches
    r = rb * recon_epochs
    p = pb * post_epochs if post else []
    if recon_steps > 0:
        r = r[:recon_steps]
    if post_steps > 0:
        p = p[:post_steps]
    return Plan(r, p)


def batch_loss(user: torch.Tensor, table: torch.Tensor, items: torch.Tensor, labels: torch.Tensor,
               mask: torch.Tensor, loss: str) -> torch.Tensor:
    """Per-client mean loss over the unmasked rows of a clients × rows block."""
    a, n = items.shape
    q = torch.gather(table, 1, items[..., None].expand(a, n, table.shape[2]))
    logit = (q * user).sum(-1)                       # user: a × 1 × d
    if loss == "mse":
        per = (logit - labels) ** 2
    else:
        per = F.binary_cross_entropy(torch.sigmoid(logit), labels, reduction="none")
    return (per * mask).sum(1) / mask.sum(1).clamp_min(1)


def _steps(samples, plans: list[Plan], which: str, dev):
    """Per step j: the clients with a j-th batch of ``which`` and their padded items/labels/mask."""
    lists = [getattr(p, which) for p in plans]
    n = max((len(x) for x in lists), default=0)
    for j in range(n):
        act = [b for b, x in enumerate(lists) if len(x) > j]
        width = max(len(lists[b][j]) for b in act)
        it = np.zeros((len(act), width), np.int64)
        lab = np.zeros((len(act), width), np.float32)
        mask = np.zeros((len(act), width), np.float32)
        for r, b in enumerate(act):
            rows = lists[b][j]
            it[r, :len(rows)] = samples[b]["item"][rows]
            lab[r, :len(rows)] = samples[b]["label"][rows]
            mask[r, :len(rows)] = 1.0
        yield (np.asarray(act), torch.as_tensor(act, device=dev), torch.as_tensor(it, device=dev),
               torch.as_tensor(lab, device=dev), torch.as_tensor(mask, device=dev))


def table_lr(lr: float, n_items: int, eta: float) -> float:
    """The item table's client learning rate: ``lr`` (``eta`` = 0, the authors' code) or UFGraphFR's
    code base's item group (``fedrecon-table-lr-eta``; the rule its UFGraphFR/GPFedRec engines use,
    :func:`corolla.models.ufgraphfr.learning_rates`)."""
    return learning_rates(lr, eta, n_items)["item"] if eta > 0 else lr


def fedrecon_stacked(params: dict[str, torch.Tensor], samples, plans: list[Plan], recon_lr: float, lr: float,
                     joint: bool, loss: str, item_lr: float | None = None) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Reconstruction then table update (plain SGD) of B stacked one-user MF models in place; the
    table steps with ``item_lr`` (default ``lr``), the user vector (``joint``) with ``lr``.
    Returns (params, the mean batch loss of each client's update steps, weighted by batch size)."""
    item_lr = lr if item_lr is None else item_lr
    dev = params["item.weight"].device
    cum, cnt = np.zeros(len(plans)), np.zeros(len(plans))
    for act, idx, it, lab, mask in _steps(samples, plans, "recon", dev):          # step 3
        user = params["user.weight"][idx].requires_grad_(True)
        batch_loss(user, params["item.weight"][idx], it, lab, mask, loss).sum().backward()
        with torch.no_grad():
            params["user.weight"][idx] = user - recon_lr * user.grad
    for act, idx, it, lab, mask in _steps(samples, plans, "post", dev):           # step 4
        table = params["item.weight"][idx].requires_grad_(True)
        user = params["user.weight"][idx].requires_grad_(joint)
        lv = batch_loss(user, table, it, lab, mask, loss)
        lv.sum().backward()
        with torch.no_grad():
            params["item.weight"][idx] = table - item_lr * table.grad
            if joint:
                params["user.weight"][idx] = user - lr * user.grad
        n = mask.sum(1).cpu().numpy()
        cum[act] += lv.detach().cpu().numpy() * n
        cnt[act] += n
    return params, np.divide(cum, np.maximum(cnt, 1))


class FedReconClient(OneUserBase):
    """A stateless FedRecon client; see the module docstring."""

    def init_state(self) -> dict[str, np.ndarray]:
        return {}

    def fresh_user(self, purpose: str, rnd: int) -> np.ndarray:
        """A new user vector (1 × d) for round ``rnd``: U(±s) or N(0, init-std²), seeded per client."""
        g = rng(self.cfg["seed"], purpose, self.cid, rnd)
        d = self.cfg["dim"]
        if self.p.fedrecon_init == "uniform":
            s = self.p.fedrecon_init_scale
            return g.uniform(-s, s, (1, d)).astype(np.float32)
        return (g.standard_normal((1, d)) * self.cfg["init-std"]).astype(np.float32)

    @staticmethod
    def plans(clients, samples, perms, evaluation: bool) -> list[Plan]:
        cfg, p = clients[0].cfg, clients[0].p
        split = p.fedrecon_eval_split if evaluation else p.fedrecon_split_dataset
        return [plan(pm[0], cfg["batch-size"], split, p.fedrecon_recon_epochs, p.fedrecon_recon_steps,
                     cfg["local-epochs"], p.fedrecon_post_steps, post=not evaluation) for pm in perms]

    @staticmethod
    def run(clients, rnd, table, evaluation: bool):
        """Reconstruct (and, in training, update the table) for every client from ``table``."""
        cfg, p, dev = clients[0].cfg, clients[0].p, clients[0].device
        samples, perms = round_samples(clients, rnd)
        plans = FedReconClient.plans(clients, samples, perms, evaluation)
        purpose = "fedrecon-eval-user" if evaluation else "fedrecon-user"
        starts = [{"user.weight": c.fresh_user(purpose, rnd), "item.weight": table} for c in clients]
        trainer = partial(fedrecon_stacked, recon_lr=p.fedrecon_recon_lr, lr=cfg["lr"],
                          item_lr=table_lr(cfg["lr"], len(table), p.fedrecon_table_lr_eta), joint=p.fedrecon_joint,
                          loss=p.fedrecon_loss)
        trained, losses = train_users(starts, samples, plans, trainer, dev,
                                      dense=not (evaluation or rows_mode(p)))
        return trained, losses, plans

    # ------------------------------------------------------------------ phases
    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        trained, losses, plans = FedReconClient.run(clients, rnd, shared["item.weight"], evaluation=False)
        sparse = rows_mode(clients[0].p)
        out = []
        for new, loss, pl in zip(trained, losses, plans):
            payload = rows_upload(new, ["item.weight"]) if sparse else {"item.weight": new["item.weight"]}
            out.append(PhaseResult(payload=payload,
                                   metrics={"num-examples": pl.post_examples, "train-loss": float(loss)},
                                   state={}))   # nothing survives the round (saved: the round it trained)
        return out

    def phase_evaluate(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_evaluate([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        table = shared["item.weight"]
        trained, _, _ = FedReconClient.run(clients, rnd, table, evaluation=True)
        users = torch.as_tensor(np.stack([t["user.weight"] for t in trained]), device=clients[0].device)
        tab = torch.as_tensor(table, device=clients[0].device)
        mse = clients[0].p.fedrecon_loss == "mse"

        def score(idx, items):
            with torch.no_grad():
                logit = (tab[items] * users[idx]).sum(-1)
                return (logit if mse else torch.sigmoid(logit)).cpu().numpy().astype(np.float32)

        return [PhaseResult(metrics=ev) for ev in evaluate_stacked(clients, score)]

    def scores(self, state, shared, personal, local_users, items):
        """Scores of a user reconstructed on its last round's rows with the received table
        (top-K export after the last round)."""
        rnd = int(self.cfg["num-rounds"])
        trained, _, _ = FedReconClient.run([self], rnd, shared["item.weight"], evaluation=True)
        q = shared["item.weight"] if items is None else shared["item.weight"][np.asarray(items).reshape(-1)]
        logit = q @ trained[0]["user.weight"].reshape(-1)
        return logit.astype(np.float32).reshape(len(local_users), -1)
