"""FedPerGNN's client (Wu et al., Nat. Commun. 13:3091, 2022; the authors' code wuch15/FedPerGNN
9e77e2e; docs/methods/fedpergnn.md) on the one-user harness: one user, its private user vector.

Phases:

* ``expand`` (round 1, every client): its history — its training items in a seeded shuffle, cut
  to ``fedpergnn-history-len`` (preprocess.py:5-17) — and a U(±0.05) user vector (Keras'
  Embedding default) go to the state; it uploads the history's pseudonyms
  (``corolla.expansion.hash_items``; the code's RSA signatures, expansion.py:8-14) and the user
  vector, both for the matching party;
* ``match`` (round 1, every client): keeps the neighbour rows the matching party sent (the
  distinct user vectors, and per history slot the indices of up to ``fedpergnn-neighbours`` of
  them; expansion.py:43-59 builds the same H × K × d tensor);
* ``train`` (sampled clients): with the fresh neighbour rows of the round, the shared network and
  the item table, the gradient of its mean BCE over its round rows (every positive and
  ``num-negatives`` fresh negatives; with ``fedpergnn-label-cast`` the code's int32(y/100) labels,
  preprocess.py:32-38), dropout masks seeded per (client, round); then

  1. its user vector steps with its clipped gradient: v ← v − lr·clip(∇v, δ) (private, never
     aggregated; the code's Keras clipnorm clips every tensor);
  2. ``noise-rule = paper``: M pseudo items (``fedpergnn-pseudo-items``) drawn from the items with
     no real gradient, their rows' gradients ~ N(μ, σ²) with μ, σ the per-dimension mean and std of
     the real item-row gradients (the paper's pseudo-interacted items); every uploaded tensor (each
     network weight; the item rows, real and pseudo, as one tensor) clipped to L2 norm δ and
     Laplace(0, 2δ/ε) added to every entry (the paper's LDP, ε = 2δ/λ). ``reference`` / ``none``:
     the clipped gradients of the real rows only (the code adds its noise on the server);
  3. upload: the network's gradients, the item ids (sorted) and their gradient rows, the new user
     vector (for the matching party), ``num-examples`` = its rows;
* ``evaluate``: each client scores its 100 candidates with its user vector, the received network
  and item table and the neighbour rows it holds (no dropout); the held-out item's rank.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from client_app.base import PhaseResult
from client_app.oneuser import OneUserBase, evaluate_stacked, round_samples
from corolla.expansion import hash_items
from corolla.models import pergnn
from corolla.util import rng

EVAL_CHUNK = 64   # clients scored together in evaluation


# ---------------------------------------------------------------------------------- the math
def clip(g: np.ndarray, delta: float) -> np.ndarray:
    """g · min(1, δ/‖g‖₂) (Keras clipnorm on one tensor)."""
    n = float(np.sqrt((np.asarray(g, np.float64) ** 2).sum()))
    return g if n <= delta else (g * (delta / n)).astype(g.dtype)


def laplace_scale(clip_delta: float, epsilon: float) -> float:
    """The paper's Laplace scale on a client's clipped gradient: λ = 2δ/ε."""
    return 2.0 * clip_delta / epsilon


def cast_labels(labels: np.ndarray) -> np.ndarray:
    """The code's labels: int32(y / LABEL_SCALE) with LABEL_SCALE = 100 (const.py:1, preprocess.py:32-38)."""
    return (np.asarray(labels, np.float64) / 100.0).astype(np.int32).astype(np.float32)


def pseudo_rows(real_ids: np.ndarray, real_grads: np.ndarray, n_items: int, m: int,
                g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``m`` pseudo-interacted items drawn uniformly without replacement from the items that are
    not in ``real_ids`` (all of them if fewer), with gradients ~ N(μ, σ²) per dimension, μ and σ
    the mean and (population) std of ``real_grads`` over its rows. Returns (ids, rows)."""
    d = real_grads.shape[1]
    pool = np.setdiff1d(np.arange(n_items), real_ids)
    k = min(m, len(pool))
    if k == 0 or len(real_grads) == 0:
        return np.zeros(0, np.int64), np.zeros((0, d), np.float32)
    ids = np.sort(g.choice(pool, size=k, replace=False)).astype(np.int64)
    mu = real_grads.astype(np.float64).mean(0)
    sd = real_grads.astype(np.float64).std(0)
    return ids, (mu + sd * g.standard_normal((k, d))).astype(np.float32)


def dropout_mask(g: np.random.Generator, shape, p: float) -> np.ndarray:
    """Inverted dropout multipliers: 1/(1−p) kept, 0 dropped (Keras Dropout in training)."""
    if p <= 0:
        return np.ones(shape, np.float32)
    return ((g.random(shape) >= p) / (1.0 - p)).astype(np.float32)


def client_inputs(history: np.ndarray, H: int, rows: np.ndarray, index: np.ndarray, K: int, d: int):
    """A client's padded history (−1 = padding, length H) and its neighbour rows and H × K index."""
    hist = np.full(H, -1, np.int64)
    hist[: len(history)] = history[:H]
    idx = np.full((H, K), -1, np.int64)
    n = min(len(history), H, index.shape[0])
    k = min(K, index.shape[1]) if index.ndim == 2 else 0
    if n and k:
        idx[:n, :k] = index[:n, :k]
    return hist, np.asarray(rows, np.float32).reshape(-1, d), idx


def gradients(w: dict[str, np.ndarray], table: np.ndarray, user: np.ndarray, hist: np.ndarray,
              nbr_rows: np.ndarray, nbr_index: np.ndarray, items: np.ndarray, labels: np.ndarray,
              drop_user: np.ndarray, drop_item: np.ndarray, opts: dict, device="cpu"):
    """One client's loss and gradients: (loss, {weight: grad}, item ids (sorted), their gradient
    rows, user gradient). ``hist`` is padded with −1 (the padding row ``gnn.pad``)."""
    real = hist[hist >= 0]
    ids = np.unique(np.concatenate([real, items])).astype(np.int64)
    wt = {k: torch.tensor(v, device=device, requires_grad=True) for k, v in w.items()}
    sub = torch.tensor(table[ids], device=device, requires_grad=True)
    u = torch.tensor(np.asarray(user, np.float32).reshape(1, -1), device=device, requires_grad=True)
    ext = torch.cat([sub, wt["gnn.pad"]], 0)
    hpos = np.where(hist >= 0, np.searchsorted(ids, np.maximum(hist, 0)), len(ids))
    hist_emb = ext[torch.as_tensor(hpos, device=device)].unsqueeze(0)
    cand = sub[torch.as_tensor(np.searchsorted(ids, items), device=device)].unsqueeze(0)
    logit = pergnn.forward(wt, u, hist_emb, torch.as_tensor(hist >= 0, device=device).unsqueeze(0),
                           torch.as_tensor(nbr_rows, device=device).unsqueeze(0),
                           torch.as_tensor(nbr_index, device=device).unsqueeze(0), cand, neighbour_softmax=opts["neighbour_softmax"], history_mask=opts["history_mask"],
                           pool=opts["pool"], drop_user=torch.as_tensor(drop_user, device=device).unsqueeze(0),
                           drop_item=torch.as_tensor(drop_item, device=device).unsqueeze(0))[0]
    loss = F.binary_cross_entropy_with_logits(logit, torch.as_tensor(labels, dtype=torch.float32, device=device))
    loss.backward()
    gw = {k: v.grad.detach().cpu().numpy() for k, v in wt.items()}
    return float(loss.detach()), gw, ids, sub.grad.detach().cpu().numpy(), u.grad.detach().cpu().numpy().reshape(-1)


def privatise(gw: dict[str, np.ndarray], ids: np.ndarray, item_grads: np.ndarray, n_items: int, rule: str,
              delta: float, epsilon: float, m: int, g: np.random.Generator):
    """What a client uploads from its gradients (module docstring, step 2): per tensor clipped to
    δ; with ``rule = paper`` first M pseudo rows, then Laplace(2δ/ε) on every entry."""
    if rule == "paper" and m > 0:
        pid, prow = pseudo_rows(ids, item_grads, n_items, m, g)
        allid = np.concatenate([ids, pid])
        order = np.argsort(allid, kind="stable")
        ids, item_grads = allid[order], np.concatenate([item_grads, prow])[order]
    out = {k: clip(v, delta) for k, v in gw.items()}
    rows = clip(item_grads, delta)
    if rule == "paper":
        lam = laplace_scale(delta, epsilon)
        out = {k: (v + g.laplace(0.0, lam, v.shape)).astype(np.float32) for k, v in out.items()}
        rows = (rows + g.laplace(0.0, lam, rows.shape)).astype(np.float32)
    return out, ids.astype(np.int32), rows.astype(np.float32)


def opts_of(p) -> dict:
    return {"neighbour_softmax": bool(p.fedpergnn_neighbour_softmax), "history_mask": p.fedpergnn_history_mask,
            "pool": p.fedpergnn_pool}


# ---------------------------------------------------------------------------------- the client
class FedPerGNNClient(OneUserBase):
    """A FedPerGNN client; see the module docstring."""

    def init_state(self) -> dict[str, np.ndarray]:
        return {}

    def history(self) -> np.ndarray:
        """Its training items in a seeded shuffle, cut to ``fedpergnn-history-len`` (preprocess.py:5-17)."""
        items = np.sort(self.fed.rows("train", self.user)).astype(np.int64)
        g = rng(self.cfg["seed"], "fedpergnn-history", self.cid)
        return g.permutation(items)[: self.p.fedpergnn_history_len]

    def first_state(self, state) -> dict[str, np.ndarray]:
        """The state with its history and user vector (U(±0.05), seeded per client) if it has none."""
        st = dict(state)
        if "user" not in st:
            g = rng(self.cfg["seed"], "fedpergnn-user", self.cid)
            st["user"] = g.uniform(-pergnn.EMB_SCALE, pergnn.EMB_SCALE, self.cfg["dim"]).astype(np.float32)
        if "history" not in st:
            st["history"] = self.history()
        if "nbr.rows" not in st:
            st["nbr.rows"] = np.zeros((0, self.cfg["dim"]), np.float32)
            st["nbr.index"] = np.full((len(st["history"]), 1), -1, np.int32)
        return st

    # ------------------------------------------------------------------ expansion
    def phase_expand(self, rnd, state, shared, personal) -> PhaseResult:
        st = self.first_state(state)
        payload = {"hashes": hash_items(st["history"], self.cfg["seed"]), "user.emb": st["user"]}
        return PhaseResult(payload=payload, metrics={"num-examples": len(st["history"])}, state=st)

    def phase_match(self, rnd, state, shared, personal) -> PhaseResult:
        st = self.first_state(state)
        if "nbr.rows" in personal:
            st["nbr.rows"] = np.asarray(personal["nbr.rows"], np.float32)
            st["nbr.index"] = np.asarray(personal["nbr.index"], np.int32)
        return PhaseResult(metrics={"num-examples": len(st["history"]), "neighbours": len(st["nbr.rows"])}, state=st)

    # ------------------------------------------------------------------ train
    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        cfg, p = clients[0].cfg, clients[0].p
        d, H = cfg["dim"], p.fedpergnn_history_len
        w = {k: np.asarray(shared[k], np.float32) for k in pergnn.weight_shapes(d)}
        table = np.asarray(shared["item.weight"], np.float32)
        samples, _ = round_samples(clients, rnd)
        out = []
        for c, st0, pers, smp in zip(clients, states, personals, samples):
            st = c.first_state(st0)
            if "nbr.rows" in pers:
                st["nbr.rows"] = np.asarray(pers["nbr.rows"], np.float32)
                st["nbr.index"] = np.asarray(pers["nbr.index"], np.int32)
            K = max(1, st["nbr.index"].shape[1])
            hist, rows, idx = client_inputs(st["history"], H, st["nbr.rows"], st["nbr.index"], K, d)
            labels = cast_labels(smp["label"]) if p.fedpergnn_label_cast else smp["label"]
            g = rng(cfg["seed"], "fedpergnn-dropout", c.cid, rnd)
            du = dropout_mask(g, (len(smp["item"]), d), p.fedpergnn_dropout)
            di = dropout_mask(g, (len(smp["item"]), d), p.fedpergnn_dropout)
            loss, gw, ids, grows, gu = gradients(w, table, st["user"], hist, rows, idx, smp["item"], labels, du, di,
                                                 opts_of(p), c.device)
            st["user"] = (st["user"] - cfg["lr"] * clip(gu, p.fedpergnn_clip)).astype(np.float32)
            up, iid, irows = privatise(gw, ids, grows, table.shape[0], p.fedpergnn_noise_rule, p.fedpergnn_clip,
                                       p.fedpergnn_epsilon, p.fedpergnn_pseudo_items,
                                       rng(cfg["seed"], "fedpergnn-privacy", c.cid, rnd))
            payload = {**up, "item.ids": iid, "item.grads": irows, "user.emb": st["user"]}
            out.append(PhaseResult(payload=payload, metrics={"num-examples": len(smp["item"]), "train-loss": loss},
                                   state=st))
        return out

    # ------------------------------------------------------------------ evaluation
    @staticmethod
    def scorer(clients, states, shared):
        """``score(idx, items)``: logits of the clients at ``idx`` on their candidates (no dropout)."""
        cfg, p = clients[0].cfg, clients[0].p
        d, H, dev = cfg["dim"], p.fedpergnn_history_len, clients[0].device
        w = {k: torch.as_tensor(np.asarray(shared[k], np.float32), device=dev) for k in pergnn.weight_shapes(d)}
        table = torch.as_tensor(np.asarray(shared["item.weight"], np.float32), device=dev)
        ext = torch.cat([table, w["gnn.pad"]], 0)
        sts = [c.first_state(s) for c, s in zip(clients, states)]
        opts = opts_of(p)

        def score(idx, items):
            jj = idx.cpu().numpy()
            out = []
            for a in range(0, len(jj), EVAL_CHUNK):
                part = jj[a:a + EVAL_CHUNK]
                K = max(max(1, sts[j]["nbr.index"].shape[1]) for j in part)
                U = max(1, max(len(sts[j]["nbr.rows"]) for j in part))
                hs, rs, xs = [], np.zeros((len(part), U, d), np.float32), []
                for r, j in enumerate(part):
                    h, rows, ix = client_inputs(sts[j]["history"], H, sts[j]["nbr.rows"], sts[j]["nbr.index"], K, d)
                    hs.append(h)
                    rs[r, :len(rows)] = rows
                    xs.append(ix)
                hist = torch.as_tensor(np.stack(hs), device=dev)
                hist_emb = ext[torch.where(hist >= 0, hist, torch.full_like(hist, table.shape[0]))]
                user = torch.as_tensor(np.stack([sts[j]["user"] for j in part]), device=dev)
                it = items[a:a + EVAL_CHUNK]
                with torch.no_grad():
                    lg = pergnn.forward(w, user, hist_emb, hist >= 0, torch.as_tensor(rs, device=dev),
                                        torch.as_tensor(np.stack(xs), device=dev), table[it], **opts)
                out.append(lg.cpu().numpy().astype(np.float32))
            return np.concatenate(out, 0)

        return score

    def phase_evaluate(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_evaluate([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        score = FedPerGNNClient.scorer(clients, states, shared)
        return [PhaseResult(metrics=ev) for ev in evaluate_stacked(clients, score)]

    def scores(self, state, shared, personal, local_users, items):
        """Logits of its user on ``items`` (or every item) with the state it holds (top-K export)."""
        score = FedPerGNNClient.scorer([self], [state], shared)
        n = np.asarray(shared["item.weight"]).shape[0]
        it = np.arange(n)[None] if items is None else np.asarray(items).reshape(1, -1)
        return score(torch.zeros(1, dtype=torch.long), torch.as_tensor(it)).reshape(len(local_users), -1)
