"""One-user PMF/NCF clients (FedCA paper §5 and its code, docs/methods/fedca.md): the client of the per-user MF/NCF baselines
(FedAvg, FCF, FedAtt, Local: their declarations in ``corolla/methods/`` set :attr:`start_from`
and :attr:`uploads`) and the base of FedCA's client (``client_app.fedca``), on the one-user
harness (``client_app.oneuser``, shared with PFedRec, UFGraphFR and GPFedRec).

Every logical client is one user with its own copy of the model: a 1 × d user vector, a full
M × d item table and, for NCF, the MLP tower (``corolla.models`` MF = the code's PMF/FCF, NCF =
its MLP-only NCF; ``lightgcn``: LightGCN over the user's first-order graph, the user and its train
positives, ``corolla.models.star``: FedLightGCN of UFGraphFR's Table 4). All clients start from
one shared initialisation (``init-std`` = 1: PyTorch's N(0, 1) embedding init, as the code); with
``user-init = shared`` also the same user vector.

Round (``train`` phase), per client:

1. start parameters — ``fedca``: its own parameters of the previous round; if it was aggregated
   and the aggregate Q_g[u] is in this message (only when the previous round had no evaluation)
   they are interpolated ρ·own + (1−ρ)·Q_g[u] first (FedCA's ``tools.py:180-214``). ``fedavg``/``fcf``/``fedatt``:
   its own user vector with the received global item table (and tower; with ``ncf-tower =
   personal``, FedAvg and FCF, its own tower: only the item table crosses). ``local``: its own;
2. training rows: every train positive followed by ``num-negatives`` distinct negatives drawn
   from the items the user never interacted with in any split (``neg-pool = uninteracted``; the
   99 evaluation negatives are in that pool, FedCA's ``utils/data.py:101-135``), re-drawn every round;
3. ``local-epochs`` epochs with a fresh Adam and the code's early break
   (``corolla.models.stacked``; all the clients a node hosts train batched, which equals one at
   a time); FedAvg may instead train with ``optimizer = 'sgd'``: plain SGD with the three rates of
   UFGraphFR's code base (``lr``, ``lr-eta``: the item table lr·M·lr-eta − lr, the user vector
   lr·lr-eta − lr, the tower lr), how that code base trains its one-user clients;
4. upload — ``fedca``: ``item.weight`` (+ the tower) and its descriptor ``basis`` X_u
   (k × d: PCA of the item rows of the round's training rows, duplicates included; or with
   ``fedca-subspace = left`` the paper's k left singular vectors of the interacted items' rows,
   k × |I_u|); the averaging baselines: ``item.weight`` (+ tower, unless ``ncf-tower = personal``);
   ``local``: nothing.
   ``num-examples`` = the number of training rows (n_u, FedCA's ``engine.py:163``). The user vector never leaves;
5. evaluation, fused into the reply when the round is evaluated: each user ranks its held-out
   item among its 99 negatives with its own post-training parameters (FedCA's ``engine.py:210-221``);
   with ``one-user-eval = global`` (FedAvg, FCF, FedAtt) instead with the round's aggregate (the
   global table and tower) and its own user vector, with the next round's message. Only FedCA's
   aggregated clients are evaluated again, with the next round's message (or an ``evaluate``
   message after the last round): they receive Q_g[u], interpolate, keep the interpolated
   parameters as their state (the next round starts from them, FedCA's ``engine.py:92-112``) and evaluate with them.

Scores are the model's sigmoid outputs in float32 (the code's), so saturated scores tie; the
paper-compatible metrics rank ties against the positive.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from client_app.base import PhaseResult
from client_app.oneuser import (OneUserBase, evaluate_stacked, evaluated, global_scorer, round_samples, rows_mode,
                                rows_scorer, rows_upload, without_table)
from corolla.models.factory import build_model, init_params, shared_init
from corolla.models.stacked import learning_rates, mlp_layer_names, stack, stacked_logits, train_stacked, train_users
from corolla.util import stable_seed


def sgd_rates(cfg, prm, n_items: int) -> dict[str, float] | None:
    """``optimizer = 'sgd'`` (FedAvg's reading of UFGraphFR's code base): plain SGD with the code's
    three rates (``lr``, ``lr-eta``; :func:`corolla.models.stacked.learning_rates`); None: Adam."""
    return learning_rates(cfg["lr"], prm.lr_eta, n_items) if cfg["optimizer"] == "sgd" else None


class OneUserClient(OneUserBase):
    """One user, one MF/NCF model; see the module docstring.

    ``start_from``: where a round starts — ``"global"`` (the averaging baselines: its own user
    vector with the received global item table and tower) or ``"own"`` (its own parameters);
    ``uploads``: whether it sends its item table (+ tower) after training (Local: no).
    """

    start_from = "own"
    uploads = True

    # ------------------------------------------------------------------ hooks of the baselines
    def reply_evaluates(self, rnd: int) -> bool:
        """Whether the reply to round ``rnd``'s ``train`` carries this client's metrics with its
        post-training parameters (the harness rule on evaluated rounds). A method whose clients are
        evaluated with what the server computes after aggregating (PerFedRec's score ensemble,
        FedFast's global model) returns False and is asked by an evaluation download instead."""
        return evaluated(self.cfg, rnd) and not self.global_eval

    @property
    def global_eval(self) -> bool:
        """``one-user-eval = global``: evaluated with the round's aggregate (the global table and
        tower the evaluation brings) and its own user vector, not its post-training parameters."""
        return self.start_from == "global" and self.p.one_user_eval == "global"

    @classmethod
    def train_options(cls, clients, rnd, starts, personals) -> dict:
        """Extra arguments of :func:`corolla.models.stacked.train_users` for a batch of ``clients``
        (pFedGraph: ``compact=False`` and its similarity term as ``penalty_for``); default none."""
        return {}

    # ------------------------------------------------------------------ state
    def init_state(self) -> dict[str, np.ndarray]:
        cfg = self.cfg
        prm = self.p
        model = build_model(cfg, 1, self.fed.n_items)
        key = ("user-init", "shared") if prm.user_init == "shared" else ("user-init", self.cid)
        init_params(model, cfg["init-std"], stable_seed(cfg["seed"], *key), ["user.weight"])
        state = model.get_arrays(["user.weight"])
        if not rows_mode(prm):   # with item-upload = rows every round starts from the global table
            state.update(shared_init(cfg, self.fed.n_items))
        return state

    def start_params(self, state, shared, personal) -> dict[str, np.ndarray]:
        params = dict(state)
        if self.start_from == "global" and shared:
            params.update(shared)
        return params

    def upload(self, new: dict[str, np.ndarray], rows, personal) -> dict[str, np.ndarray]:
        """What it sends after training: the shared parameters (the user vector never leaves; with
        ``ncf-tower = personal`` neither does the NCF tower)."""
        home = ("user.", "mlp.") if self.p.ncf_tower == "personal" else ("user.",)
        return {k: v for k, v in new.items() if not k.startswith(home)} if self.uploads else {}

    # ------------------------------------------------------------------ phases
    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        cfg, prm, dev = clients[0].cfg, clients[0].p, clients[0].device
        starts = [c.start_params(s, shared, p) for c, s, p in zip(clients, states, personals)]
        names = list(starts[0])
        sparse = rows_mode(prm)
        samples, perms = round_samples(clients, rnd)
        trained, losses = train_users(starts, samples, perms, partial(
            train_stacked, batch_size=cfg["batch-size"], lr_emb=cfg["lr"], lr_mlp=prm.lr_mlp,
            wd_mlp=prm.mlp_weight_decay, early_break=prm.early_break, graph_layers=graph_layers(cfg),
            sgd=sgd_rates(cfg, prm, clients[0].fed.n_items)), dev,
            dense=not sparse,
            **type(clients[0]).train_options(clients, rnd, starts, personals))
        if not clients[0].reply_evaluates(rnd):
            evals = [{}] * len(clients)
        elif sparse:
            table = None if mlp_layer_names(list(trained[0]) + list(shared)) else mf_table_scorer   # MF only
            evals = evaluate_stacked(clients, rows_scorer(trained, shared["item.weight"], dev, stacked_scorer, table))
        else:
            evals = evaluate_stacked(clients, stacked_scorer(stack(trained, names, dev), user_graphs(clients)))
        out = []
        for c, new, rows, loss, ev, pers in zip(clients, trained, samples, losses, evals, personals):
            if sparse:
                payload = rows_upload(new, [k for k in shared if not k.startswith("user.")])
                new = without_table(new)
            else:
                payload = c.upload(new, rows, pers)
            mets = {"num-examples": len(rows["item"]), "train-loss": float(loss), **ev}
            out.append(PhaseResult(payload=payload, metrics=mets, state=new))
        return out

    def phase_evaluate(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_evaluate([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        if clients[0].global_eval:
            users = [s["user.weight"] for s in states]
            return [PhaseResult(metrics=ev) for ev in
                    evaluate_stacked(clients, global_scorer(users, shared, clients[0].device))]
        new_states = [c.evaluation_state(s, p) for c, s, p in zip(clients, states, personals)]
        params = stack(new_states, list(new_states[0]), clients[0].device)
        evals = evaluate_stacked(clients, stacked_scorer(params, user_graphs(clients)))
        return [PhaseResult(metrics=ev, state=ns if p else None)
                for ev, ns, p in zip(evals, new_states, personals)]

    def evaluation_state(self, state, personal) -> dict[str, np.ndarray]:
        """The parameters this client evaluates with: its own (FedCA's client interpolates them
        with the aggregate its evaluation brings)."""
        if personal:
            raise ValueError(f"logical client {self.cid}: an evaluation download {sorted(personal)} this method "
                             "does not take")
        return state

    def scores(self, state, shared, personal, local_users, items):
        if self.global_eval:
            state = {"user.weight": state["user.weight"], **shared}
        elif "item.weight" not in state:   # item-upload = rows: the global table it starts from
            state = {**state, **shared}
        params = stack([state], list(state), self.device)
        it = torch.as_tensor(np.asarray(items).reshape(1, -1) if items is not None
                             else np.arange(self.fed.n_items)[None], device=self.device)
        return stacked_scorer(params, user_graphs([self]))(torch.zeros(1, dtype=torch.long), it).reshape(
            len(local_users), -1)


def interpolate(own: dict[str, np.ndarray], agg: dict[str, np.ndarray], rho: float) -> dict[str, np.ndarray]:
    """ρ·own + (1−ρ)·aggregate for every aggregated array (item table, tower); the rest is own."""
    out = dict(own)
    for k, v in agg.items():
        out[k] = (rho * own[k] + (1.0 - rho) * v).astype(np.float32)
    return out


def graph_layers(cfg) -> int | None:
    """LightGCN's layers K when the one-user model is ``lightgcn`` (FedLightGCN), else None."""
    return int(cfg["gcn-layers"]) if cfg["model"] == "lightgcn" else None


def user_graphs(clients) -> tuple[torch.Tensor, int] | None:
    """(pos, K) of these one-user clients when the model is LightGCN: pos[b] marks the items of
    client b's graph, its train positives, over the whole item table; else None (MF, NCF)."""
    k = graph_layers(clients[0].cfg)
    if k is None:
        return None
    fed = clients[0].fed
    pos = torch.zeros((len(clients), fed.n_items), dtype=torch.float32, device=clients[0].device)
    for b, c in enumerate(clients):
        pos[b, torch.as_tensor(fed.rows("train", c.user).astype(np.int64), device=clients[0].device)] = 1.0
    return pos, k


def mf_table_scorer(personal: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
    """MF's sigmoid scores of stacked clients' user vectors (``user.weight``: a × 1 × d) on every
    row of one shared ``table`` (M × d): :func:`client_app.oneuser.rows_scorer`'s full-ranking form."""
    return torch.sigmoid(personal["user.weight"][:, 0, :] @ table.T)


def stacked_scorer(params: dict[str, torch.Tensor], graphs: tuple[torch.Tensor, int] | None = None):
    """Sigmoid scores of MF/NCF (or LightGCN over the clients' ``graphs``, :func:`user_graphs`)
    for :func:`client_app.oneuser.evaluate_stacked`."""
    names = mlp_layer_names(params)

    def score(idx: torch.Tensor, items: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            sub = {k: v[idx] for k, v in params.items()}
            graph = None if graphs is None else (graphs[0][idx], graphs[1])
            return torch.sigmoid(stacked_logits(sub, items, names, graph)).cpu().numpy().astype(np.float32)

    return score
