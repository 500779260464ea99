"""UFGraphFR and GPFedRec clients on the one-user harness (UFGraphFR paper §4.1, Alg. 1; the authors' code: docs/methods/ufgraphfr.md;
GPFedRec's code Zhangcx19/GPFedRec edb66e1).

UFGraphFR, per client (one user), round t:

1. its text vector v_u — the prompt of its own profile encoded once by the frozen sentence
   encoder (``corolla.text``) on this node, kept in the client's state; neither the prompt nor
   v_u leaves the node (with the oT ablation, ``graph-input = text``, v_u is uploaded instead of
   W_u, as that ablation needs);
2. start parameters: its own from round t−1 (all clients start from one shared initialisation,
   UF engine.py:191-194), with the item table replaced by the server's table for it:
   ``graph-mode = reference`` its personalised r_u, ``paper`` the global table (Alg. 1 line 6);
   that table is also the regularisation target (round 1: the initial table);
3. one local epoch over its positives and 4 fresh negatives each, batch 256, the loss and three
   SGD groups of ``corolla.models.ufgraphfr`` (the users of a node train stacked);
4. upload: the item table and W_u (``user.weight``, 32 × d_text, without the bias) with
   Laplace(0, ``upload-noise``) on W_u only (the code; ``noise-target = all`` also noises the
   table, the paper's Eq. 27); the client keeps its clean parameters;
5. evaluation with its own post-training model (§6), fused into the training reply.

GPFedRec: the item table starts from the server's global table, is regularised towards the
client's r_u, and is what it uploads (+ Laplace(``upload-noise``) when > 0; GP engine.py:92-140).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from client_app.base import PhaseResult
from client_app.oneuser import OneUserBase, evaluate_stacked, evaluated, round_samples
from corolla.models import ufgraphfr as UF
from corolla.models.stacked import stack, unstack
from corolla.util import rng, stable_seed

CHUNK = 64   # clients trained together (memory: CHUNK × M × 32 floats per parameter copy)


def model_kwargs(prm) -> dict:
    return {"use_transformer": bool(prm.use_transformer), "use_joint": bool(prm.use_joint_embedding),
            "dropout": float(prm.dropout)}


def head_layers(prm) -> tuple[int, ...]:
    """GPFedRec's score-head widths (``gpfedrec-head``)."""
    return tuple(int(w) for w in str(prm.gpfedrec_head).split(","))


def initial(cfg, prm, n_items: int) -> dict[str, np.ndarray]:
    kind = cfg["model"]
    kw = model_kwargs(prm) if kind == "ufgraphfr" else {"head_layers": head_layers(prm)}
    return UF.shared_init(kind, n_items, prm.text_dim, cfg["seed"], **kw)


class GraphClient(OneUserBase):
    """A UFGraphFR (``model = ufgraphfr``) or GPFedRec (``model = gpfedrec``) client."""

    def init_state(self) -> dict[str, np.ndarray]:
        return initial(self.cfg, self.p, self.fed.n_items)

    # ------------------------------------------------------------------ phases
    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        cfg, prm, fed, dev = clients[0].cfg, clients[0].p, clients[0].fed, clients[0].device
        kind = cfg["model"]
        t_text = time.perf_counter()
        states = with_text(clients, states)
        t_text = time.perf_counter() - t_text
        init_table = None
        starts, targets = [], []
        for st, pers in zip(states, personals):
            start = {k: v for k, v in st.items() if k != "text"}
            if kind == "gpfedrec":
                if "item.global" in shared:
                    start["item.weight"] = shared["item.global"]
                target = pers.get("item.target")
            elif "item.weight" in pers:          # reference: the personalised r_u
                start["item.weight"] = target = pers["item.weight"]
            elif "item.global" in shared:        # paper: the global table
                start["item.weight"] = target = shared["item.global"]
            else:
                target = None
            if target is None:                   # round 1: the shared initial table
                if init_table is None:
                    init_table = initial(cfg, prm, fed.n_items)["item.weight"]
                target = init_table
            starts.append(start)
            targets.append(target)
        samples, perms = round_samples(clients, rnd)
        lrs = UF.learning_rates(cfg["lr"], prm.lr_eta, fed.n_items)
        names = list(starts[0])
        trained: list[dict[str, np.ndarray]] = [None] * len(clients)  # type: ignore[list-item]
        losses = np.zeros(len(clients))
        for a in range(0, len(clients), CHUNK):
            part = list(range(a, min(a + CHUNK, len(clients))))
            params = stack([starts[b] for b in part], names, dev)
            texts = (torch.as_tensor(np.stack([states[b]["text"] for b in part]), device=dev)
                     if kind == "ufgraphfr" else None)
            tgt = torch.as_tensor(np.stack([targets[b] for b in part]), device=dev)
            gens = [torch.Generator().manual_seed(stable_seed(cfg["seed"], "dropout", clients[b].cid, rnd))
                    for b in part]
            params, loss = UF.train_stacked(kind, params, texts, tgt, [samples[b] for b in part],
                                            [perms[b] for b in part], gens, cfg["batch-size"], lrs,
                                            prm.item_reg, prm.dropout)
            for b, st, lb in zip(part, unstack(params), loss):
                trained[b] = st
                losses[b] = lb
        evals = evaluate_all(clients, trained, states) if evaluated(cfg, rnd) else [{}] * len(clients)
        out = []
        for c, st, new, rows, loss, ev in zip(clients, states, trained, samples, losses, evals):
            if "text" in st:
                new["text"] = st["text"]
            out.append(PhaseResult(payload=upload(c, new, rnd),
                                   metrics={"num-examples": len(rows["item"]), "train-loss": float(loss),
                                            "encode-s": t_text / len(clients), **ev},
                                   state=new))
        return out

    def scores(self, state, shared, personal, local_users, items):
        it = (np.arange(self.fed.n_items)[None] if items is None else np.asarray(items).reshape(1, -1))
        return scorer([self], [state])(torch.zeros(1, dtype=torch.long), torch.as_tensor(it)).reshape(
            len(local_users), -1)


def with_text(clients, states):
    """States with the text vector v_u (encoded in one batch for the clients lacking it)."""
    if clients[0].cfg["model"] != "ufgraphfr":
        return states
    missing = [j for j, st in enumerate(states) if "text" not in st]
    if not missing:
        return states
    from corolla.text import user_vectors

    fed, cfg, prm = clients[0].fed, clients[0].cfg, clients[0].p
    if fed.user_ids is None:
        raise ValueError(f"dataset {cfg['dataset']!r}: no raw user ids to build the users' prompts from")
    users = np.array([clients[j].user for j in missing], np.int64)
    counts = np.diff(fed.indptr["train"]) + np.diff(fed.indptr["valid"]) + np.diff(fed.indptr["test"])
    v = user_vectors(cfg, users, fed.user_ids, counts, clients[0].data_dir)
    if v.shape[1] != prm.text_dim:
        raise ValueError(f"text-encoder {cfg['text-encoder']!r} gives {v.shape[1]}-d vectors; set text-dim={v.shape[1]}")
    out = list(states)
    for j, vec in zip(missing, v):
        out[j] = {**states[j], "text": vec.astype(np.float32)}
    return out


def upload(client, params: dict[str, np.ndarray], rnd: int) -> dict[str, np.ndarray]:
    """What the client sends: the item table and the graph input, noised as configured."""
    cfg = client.cfg
    prm = client.p
    b = prm.upload_noise
    g = rng(cfg["seed"], "upload-noise", client.cid, rnd)
    out = {"item.weight": params["item.weight"]}
    if cfg["model"] == "ufgraphfr":
        key = "text" if prm.graph_input == "text" else "user.weight"
        out["graph.input"] = params[key]
        if b > 0:
            out["graph.input"] = (out["graph.input"] + g.laplace(0.0, b, out["graph.input"].shape)).astype(np.float32)
    if b > 0 and (cfg["model"] == "gpfedrec" or prm.noise_target == "all"):
        out["item.weight"] = (out["item.weight"] + g.laplace(0.0, b, out["item.weight"].shape)).astype(np.float32)
    return out


def scorer(clients, states):
    """Sigmoid scores of the clients' own models (eval mode) for ``evaluate_stacked``."""
    cfg, dev = clients[0].cfg, clients[0].device
    kind = cfg["model"]
    names = [k for k in states[0] if k != "text"]
    params = stack(states, names, dev)
    texts = torch.as_tensor(np.stack([s["text"] for s in states]), device=dev) if kind == "ufgraphfr" else None

    def score(idx, items):
        with torch.no_grad():
            sub = {k: v[idx] for k, v in params.items()}
            logits = UF.stacked_logits(kind, sub, texts[idx] if texts is not None else None, items)
            return torch.sigmoid(logits).cpu().numpy().astype(np.float32)

    return score


def evaluate_all(clients, trained, states) -> list[dict]:
    out: list[dict] = []
    for a in range(0, len(clients), CHUNK):
        part = slice(a, a + CHUNK)
        st = [{**t, **({"text": s["text"]} if "text" in s else {})} for t, s in zip(trained[part], states[part])]
        out += evaluate_stacked(clients[part], scorer(clients[part], st))
    return out
