"""Dist-FedAvg clients ("Far From Sight, Far From Mind", Khouas et al. 2025, arXiv 2507.01285;
§3, §5.1; Algorithm 1 reconstructed from its text and FedPerGNN; docs/methods/distfedavg.md), also used by its
baselines (FedAvg, SimpleAvg, FedMedian, FedAtt with the same row granularity).

A logical client is one user, its anchor a_c (``harness = expanded``). Phases:

* ``expand`` (round 1, every client): uploads its training item ids salted and hashed (for the
  matching party), the plain ids of the item rows it will pull, and the ids of the negative items
  it will train against first;
* ``match`` (round 1, every client): receives from the matching party its expanded users U_c
  (users sharing at least one of its items, capped by ``max-neighbors-per-item``/``max-items``)
  and the shared-item edges (v, i), and keeps them in its state: the local graph G_c has the
  anchor, its training items and U_c, with the anchor's edges and the (v, i) edges;
* ``train`` (sampled clients): pulls the global rows of {a_c} ∪ U_c and of its items and
  negatives, runs LightGCN on G_c (``gcn-layers``, mean over layers, dot-product score) for
  ``local-epochs`` epochs of BPR on the anchor's own edges (one negative per positive from the
  pulled negatives, L2 ``weight-decay`` on the batch's ego embeddings, a fresh Adam each round),
  and uploads every pulled row it updated, with ids, plus n_c = |edges of G_c| and the negatives
  it asks for next time (``neg-pool-size`` uniform draws from the items it never interacted with);
* evaluation: full ranking of all items for the anchor by the dot product of the user row and the
  item table the server sends (LightGCN-propagated global tables, or layer 0), train items masked
  (and validation items for test).

All the users of a node train together: their local graphs form one block-diagonal graph and
their rows one stacked parameter set, which equals training them one at a time (tested).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from client_app.base import LogicalClient, PhaseResult
from corolla import metrics as M
from corolla.expansion import hash_items
from corolla.models.lightgcn import propagate as lightgcn
from corolla.util import rng


class ExpandedClient(LogicalClient):
    def __init__(self, cfg, fed, cid, users, device, data_dir=None, params=None):
        if len(users) != 1:
            raise ValueError(f"harness 'expanded': logical client {cid} holds {len(users)} users, expected 1")
        super().__init__(cfg, fed, cid, users, device, data_dir, params)
        self.user = int(users[0])
        self.train_items = np.sort(fed.rows("train", self.user)).astype(np.int64)

    def init_state(self) -> dict[str, np.ndarray]:
        return {}

    def negatives_request(self, rnd: int) -> np.ndarray:
        """The negative item rows asked for the client's next training round."""
        seen = np.zeros(self.fed.n_items, bool)
        for s in ("train", "valid", "test"):
            seen[self.fed.rows(s, self.user)] = True
        pool = np.flatnonzero(~seen)
        g = rng(self.cfg["seed"], "negatives", self.cid, rnd)
        k = min(self.p.neg_pool_size, len(pool))
        return np.sort(g.choice(pool, size=k, replace=False)).astype(np.int64)

    # ------------------------------------------------------------------ setup
    def phase_expand(self, rnd, state, shared, personal) -> PhaseResult:
        payload = {"hashes": hash_items(self.train_items, self.cfg["seed"]),
                   "items": self.train_items, "request": self.negatives_request(0)}
        return PhaseResult(payload=payload, metrics={"num-examples": len(self.train_items)},
                           state={"request": payload["request"]})

    def phase_match(self, rnd, state, shared, personal) -> PhaseResult:
        st = dict(state)
        st["neighbours"] = personal.get("neighbours", np.zeros(0, np.int64)).astype(np.int64)
        st["edges"] = personal.get("edges", np.zeros((0, 2), np.int64)).astype(np.int64)
        return PhaseResult(metrics={"num-examples": len(self.train_items), "neighbours": len(st["neighbours"])},
                           state=st)

    # ------------------------------------------------------------------ train
    def local_graph(self, state) -> tuple[int, int, np.ndarray, np.ndarray]:
        """(n_users, n_items, user index, item index) of G_c's edges; user 0 is the anchor, items are
        the anchor's training items in sorted order (then the pulled negatives, without edges)."""
        nb = state["neighbours"]
        e = state["edges"]
        u = np.concatenate([np.zeros(len(self.train_items), np.int64), e[:, 0] if len(e) else np.zeros(0, np.int64)])
        i = np.concatenate([np.arange(len(self.train_items)), e[:, 1] if len(e) else np.zeros(0, np.int64)])
        return 1 + len(nb), len(self.train_items) + len(state["request"]), u, i

    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_train([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_train(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        cfg, dev = clients[0].cfg, clients[0].device
        graphs, user_rows, item_rows = [], [], []
        for c, st, pers in zip(clients, states, personals):
            graphs.append(c.local_graph(st))
            user_rows.append(pers["user.rows"])
            item_rows.append(pers["item.rows"])
        users_t, items_t, losses = train_block(graphs, user_rows, item_rows,
                                               [c.train_items for c in clients], clients, rnd, cfg, dev)
        out = []
        for c, st, pers, ur, ir, (nu, ni, eu, ei), loss in zip(clients, states, personals, users_t, items_t, graphs,
                                                               losses):
            nxt = c.negatives_request(rnd)
            payload = {"user.ids": pers["user.ids"], "user.rows": ur, "item.ids": pers["item.ids"],
                       "item.rows": ir, "request": nxt}
            out.append(PhaseResult(payload=payload, metrics={"num-examples": len(eu), "train-loss": float(loss)},
                                   state={**st, "request": nxt}))
        return out

    # ------------------------------------------------------------------ evaluation
    def phase_evaluate(self, rnd, state, shared, personal) -> PhaseResult:
        return type(self).batch_evaluate([self], rnd, [state], shared, [personal])[0]

    @staticmethod
    def batch_evaluate(clients, rnd, states, shared, personals) -> list[PhaseResult]:
        fed = clients[0].fed
        scores = global_scores(shared, personals)
        out = []
        for k, c in enumerate(clients):
            res: dict[str, list[float]] = {}
            for split in ("valid", "test"):
                truth = fed.rows(split, c.user)
                if not len(truth):
                    continue
                s = scores[k:k + 1].copy()
                s[0, fed.rows("train", c.user)] = -np.inf
                if split == "test" and c.cfg["test-mask-valid"]:
                    s[0, fed.rows("valid", c.user)] = -np.inf
                for name, v in M.full_rank_user_metrics(s, [truth], c.ks).items():
                    res[f"{split}/{name}"] = [float(v[0])]
            out.append(PhaseResult(metrics=res))
        return out

    def scores(self, state, shared, personal, local_users, items):
        """The global tables' scores of the client's user (``local_users``: ``[0]``): its row of the
        evaluation tables (``user.row``) dot every item's (``item.table``), as ``batch_evaluate``
        ranks them; used by ``--export-topk``."""
        if list(np.asarray(local_users).reshape(-1)) != [0]:
            raise ValueError(f"Dist-FedAvg client {self.cid}: local_users {list(local_users)}: expected [0] "
                             f"(one user per client)")
        s = global_scores(shared, [personal])
        return s if items is None else np.take_along_axis(s, np.asarray(items).reshape(1, -1), axis=1)


def global_scores(shared, personals) -> np.ndarray:
    """Every item's score for each client's user: its row of the evaluation tables (``user.row``) dot
    the item table (``item.table``), float64; one row per entry of ``personals``."""
    table = np.asarray(shared["item.table"], np.float64)
    return np.stack([np.asarray(p["user.row"], np.float64).reshape(-1) for p in personals]) @ table.T


def block_adjacency(graphs) -> tuple[torch.Tensor, list[tuple[int, int, int, int]]]:
    """The block-diagonal D^-½ A D^-½ (CSR) of several local bipartite graphs (users then items in
    each block) and each block's (user offset, n_users, item offset, n_items) in the stacked rows."""
    rows, cols, blocks = [], [], []
    off = 0
    for nu, ni, u, i in graphs:
        blocks.append((off, nu, off + nu, ni))
        rows += [off + u, off + nu + i]
        cols += [off + nu + i, off + u]
        off += nu + ni
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    deg = np.bincount(r, minlength=off).astype(np.float64)
    dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    adj = torch.sparse_coo_tensor(np.vstack([r, c]), (dinv[r] * dinv[c]).astype(np.float32), (off, off),
                                  check_invariants=True).coalesce()
    return adj.to_sparse_csr(), blocks


def train_block(graphs, user_rows, item_rows, train_items, clients, rnd, cfg, dev):
    """Train the clients' pulled rows on their local graphs stacked block-diagonally; returns the
    new user rows, item rows and final BPR loss per client. Every client's loss is its own mean
    BPR + L2 on its batch's ego embeddings, so their sum separates into independent gradients."""
    adj, blocks = block_adjacency(graphs)
    adj = adj.to(dev)
    x = torch.cat([torch.cat([torch.as_tensor(u, dtype=torch.float32), torch.as_tensor(i, dtype=torch.float32)])
                   for u, i in zip(user_rows, item_rows)]).to(dev).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=cfg["lr"])
    npos = np.array([len(t) for t in train_items], np.int64)
    seg = torch.as_tensor(np.repeat(np.arange(len(blocks)), npos), device=dev)
    anchor = torch.as_tensor(np.repeat([b[0] for b in blocks], npos), device=dev)
    pos = torch.as_tensor(np.concatenate([b[2] + np.arange(n) for b, n in zip(blocks, npos)]), device=dev)
    n_neg = [b[3] - n for b, n in zip(blocks, npos)]
    gens = [rng(cfg["seed"], "bpr-negatives", c.cid, rnd) for c in clients]
    denom = torch.as_tensor(np.maximum(npos, 1), dtype=torch.float32, device=dev)
    losses = np.zeros(len(clients))
    for _ in range(cfg["local-epochs"]):
        neg = torch.as_tensor(np.concatenate([b[2] + n + g.integers(0, max(k, 1), n)
                                              for b, n, k, g in zip(blocks, npos, n_neg, gens)]), device=dev)
        opt.zero_grad(set_to_none=True)
        h = lightgcn(adj, x, cfg["gcn-layers"])
        ha = h[anchor]
        per_row = F.softplus((ha * h[neg]).sum(-1) - (ha * h[pos]).sum(-1))
        reg_row = 0.5 * (x[anchor].pow(2).sum(-1) + x[pos].pow(2).sum(-1) + x[neg].pow(2).sum(-1))
        bpr = torch.zeros(len(blocks), device=dev).index_add_(0, seg, per_row) / denom
        reg = torch.zeros(len(blocks), device=dev).index_add_(0, seg, reg_row) / denom
        loss = bpr + cfg["weight-decay"] * reg
        loss.sum().backward()
        opt.step()
        losses = loss.detach().cpu().numpy().astype(np.float64)
    out = x.detach().cpu().numpy()
    users_t = [out[uoff:uoff + nu] for uoff, nu, _, _ in blocks]
    items_t = [out[ioff:ioff + ni] for _, _, ioff, ni in blocks]
    return users_t, items_t, losses
