"""The one-user harness shared by FedCA, PFedRec, UFGraphFR, GPFedRec and their baselines
(FedCA's and UFGraphFR's code: docs/methods/fedca.md, docs/methods/ufgraphfr.md): every logical client is one user with its own copy
of its model, all the users a node hosts train batched (``corolla.models.stacked`` and each
method's batched trainer), and evaluation uses each user's own post-training model, fused into
the training reply: leave-one-out against the fixed negatives, or full ranking of every item.

* :func:`round_samples` — round ``rnd``'s training rows of each client: every train positive
  followed by ``num-negatives`` distinct negatives from ``neg-pool`` (``uninteracted``: items the
  user never interacted with in any split), re-drawn every round, and the row order of each local
  epoch; seeded by (seed, client, round), so the node that hosts a client does not matter;
* :func:`evaluate_stacked` — valid and test metrics of every client from a batched scoring
  function: on its held-out item and its negatives (``protocol = loo``), or over every item with
  its train items (and, for test, its valid items) masked (``protocol = full-rank``: FedCIA's
  protocol, its §6.1.3, for PFedRec and GPFedRec on FedCIA's split);
* :class:`OneUserBase` — the one-user check every such client shares;
* ``item-upload = rows`` (:func:`rows_upload`, :func:`rows_scorer`): a client that starts from
  the global item table sends only the rows its round trained, with their ids, keeps no copy of
  the table in its state, and is evaluated on its candidates' rows (the global row unless it
  trained it): what lets a node host thousands of users without a table per user.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from client_app.base import LogicalClient, full_rank_metrics
from corolla import metrics as M
from corolla.models.stacked import bpr_pairs, epoch_permutations, stack, training_rows
from corolla.models.train import item_pools
from corolla.protocol import row_keys
from corolla.round import evaluates
from corolla.util import rng


class OneUserBase(LogicalClient):
    """A logical client that is exactly one user."""

    def __init__(self, cfg, fed, cid, users, device, data_dir=None, params=None):
        if len(users) != 1:
            raise ValueError(f"harness 'one-user': logical client {cid} holds {len(users)} users, expected 1")
        super().__init__(cfg, fed, cid, users, device, data_dir, params)

    @property
    def user(self) -> int:
        return int(self.users[0])


def round_samples(clients, rnd: int) -> tuple[list[dict[str, np.ndarray]], list[list[np.ndarray]]]:
    """Round ``rnd``'s training rows of each one-user client (every train positive followed by
    ``num-negatives`` distinct negatives from ``neg-pool``: with ``uninteracted``, the items it
    never interacted with in any split, FedCA's ``utils/data.py:101-135``) and
    its row order in each local epoch; seeded by (seed, client, round). With ``loss = bpr`` the
    rows are the same positives and negatives as pairs (``corolla.models.stacked.bpr_pairs``)."""
    cfg, fed = clients[0].cfg, clients[0].fed
    samples, perms = [], []
    for c in clients:
        u = int(c.users[0])
        pool = np.flatnonzero(item_pools(fed, c.users, cfg["neg-pool"], c.item_mask)[0])
        rows = training_rows(fed.rows("train", u).astype(np.int64), pool, cfg["num-negatives"],
                             rng(cfg["seed"], "negatives", c.cid, rnd))
        if cfg["loss"] == "bpr":   # the same negatives, each paired with its positive
            rows = bpr_pairs(rows, cfg["num-negatives"])
        samples.append(rows)
        perms.append(epoch_permutations(rng(cfg["seed"], "shuffle", c.cid, rnd), len(rows["item"]),
                                        cfg["local-epochs"]))
    return samples, perms


def evaluated(cfg, rnd: int) -> bool:
    """Round ``rnd`` is evaluated: the server's schedule (``corolla.round.evaluates``)."""
    return evaluates(rnd, cfg["num-rounds"], cfg["eval-every"])


def evaluate_stacked(clients, score: Callable) -> list[dict[str, list[float]]]:
    """Leave-one-out metrics of every client's user on valid and test (FedCA's ``utils/metrics.py:37-60``, UFGraphFR's
    ``engine.py:336-439``), batched: ``score(idx, items)`` returns the float32 scores of the clients at positions
    ``idx`` (a tensor) on their candidate items (clients × 100, the held-out item last). With
    ``protocol = full-rank`` the candidates are every item (:func:`evaluate_full_rank`)."""
    import torch

    fed, cfg = clients[0].fed, clients[0].cfg
    if cfg["protocol"] == "full-rank":
        return evaluate_full_rank(clients, score)
    ks = clients[0].ks
    out: list[dict[str, list[float]]] = [{} for _ in clients]
    for split in ("valid", "test"):
        neg = fed.neg_valid if split == "valid" else fed.neg_test
        rows, cand = [], []
        for j, c in enumerate(clients):
            u = int(c.users[0])
            held = fed.rows(split, u)
            if len(held):
                rows.append(j)
                cand.append(np.r_[neg[u], held[0]])
        if not rows:
            continue
        dev = clients[0].device
        idx = torch.as_tensor(rows, device=dev)
        s = score(idx, torch.as_tensor(np.stack(cand), device=dev))
        res = M.loo_user_metrics(s[:, -1], s[:, :-1], ks)
        if cfg["compat-ties-against-positive"]:
            res.update({f"ties:{k}": v for k, v in M.loo_user_metrics(s[:, -1], s[:, :-1], ks, True).items()})
        for r, j in enumerate(rows):
            for k, v in res.items():
                out[j][f"{split}/{k}"] = [float(v[r])]
    return out


FULL_RANK_CHUNK = 64   # clients scored together on every item (chunk × items × d floats gathered)


def evaluate_full_rank(clients, score: Callable) -> list[dict[str, list[float]]]:
    """Full-ranking metrics of every client's user on valid and test, batched: each client's
    scores on every item, ranked by the silo harness's ``client_app.base.full_rank_metrics``
    (train items masked, for test valid items too; FedCIA's variants with
    ``compat-fedcia-metrics``; on a spectral partition among the user's subgraph's items, or
    every item with ``rank-items = all``)."""
    import torch

    fed, cfg = clients[0].fed, clients[0].cfg
    ks, dev = clients[0].ks, clients[0].device
    out: list[dict[str, list[float]]] = [{} for _ in clients]
    has = {split: [len(fed.rows(split, int(c.users[0]))) > 0 for c in clients] for split in ("valid", "test")}
    rows = [j for j in range(len(clients)) if has["valid"][j] or has["test"][j]]
    own = cfg["rank-items"] == "own"   # 'all': the other subgraphs' items are candidates too
    for a in range(0, len(rows), FULL_RANK_CHUNK):   # each client scored once, ranked for both splits
        part = rows[a:a + FULL_RANK_CHUNK]
        items = torch.arange(fed.n_items, device=dev).expand(len(part), -1)
        scores = np.asarray(score(torch.as_tensor(part, device=dev), items), np.float64)
        for split in ("valid", "test"):
            sel = [r for r, j in enumerate(part) if has[split][j]]
            if not sel:
                continue
            res = full_rank_metrics(scores[sel], fed, [int(clients[part[r]].users[0]) for r in sel], split, ks,
                                    cfg["compat-fedcia-metrics"], [clients[part[r]].item_mask if own else None for r in sel],
                                    cfg["test-mask-valid"], cfg["compat-sigmoid-ranking"])
            for i, r in enumerate(sel):
                for k, v in res.items():
                    out[part[r]][f"{split}/{k}"] = [float(v[i])]
    return out


def rows_mode(prm) -> bool:
    """``item-upload = rows`` (``prm``: the one-user method's parameters)."""
    return prm.item_upload == "rows"


def rows_upload(new: dict[str, np.ndarray], keys) -> dict[str, np.ndarray]:
    """The upload of a state trained with ``train_users(dense=False)``: the item table as its
    trained rows (``item.weight@rows`` int32 ids, ``item.weight@vals``) and the other ``keys``
    as they are."""
    rk, vk = row_keys("item.weight")
    out = {k: new[k] for k in keys if k != "item.weight"}
    out[rk] = new["item.ids"].astype(np.int32)
    out[vk] = new["item.weight"]
    return out


def without_table(new: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What such a client keeps: everything but the item table (the next round starts from the
    global one)."""
    return {k: v for k, v in new.items() if k not in ("item.weight", "item.ids")}


def rows_scorer(trained: list[dict[str, np.ndarray]], base: np.ndarray, device, make_scorer: Callable,
                table_scorer: Callable | None = None):
    """A scorer for :func:`evaluate_stacked` over states holding trained rows only: client j's
    candidate rows are its trained rows where it has them, else ``base`` (the global table it
    started from). ``make_scorer(params)`` is the method's scorer on stacked params.

    ``table_scorer(personal, table)`` (optional): the method's sigmoid scores of stacked clients
    (``personal``: their parameters but the item table) on every row of one shared ``table``
    (M × d), as a clients × M tensor. With it, full ranking scores the clients on ``base`` once
    (matrix products, no clients × M × d copy of the table) and then overwrites each client's own
    trained rows with ``make_scorer``'s scores of them: the same scores up to float32 rounding
    (29,858 Gowalla users: minutes instead of most of an hour per evaluation)."""
    import torch

    names = [k for k in trained[0] if k != "item.ids"]
    base_t = None

    def full_table(jj):
        nonlocal base_t
        if base_t is None:
            base_t = torch.as_tensor(base, device=device).float()
        personal = stack([trained[j] for j in jj], [k for k in names if k != "item.weight"], device)
        with torch.no_grad():
            s = table_scorer(personal, base_t).cpu().numpy().astype(np.float32)
        zero = torch.zeros(1, dtype=torch.long, device=device)
        for r, j in enumerate(jj):
            ids = trained[j]["item.ids"]
            if len(ids):
                own = stack([{**{k: trained[j][k] for k in names if k != "item.weight"},
                              "item.weight": trained[j]["item.weight"]}], names, device)
                s[r, ids] = make_scorer(own)(zero, torch.arange(len(ids), device=device)[None])[0]
        return s

    def score(idx, items):
        jj, it = idx.cpu().numpy(), items.cpu().numpy()
        if (table_scorer is not None and it.shape[1] == len(base)
                and np.array_equal(it[0], np.arange(len(base))) and (it == it[0]).all()):
            return full_table(jj)
        emb = base[it]                                   # clients × candidates × d (a copy)
        subs = []
        for r, j in enumerate(jj):
            ids, vals = trained[j]["item.ids"], trained[j]["item.weight"]
            if len(ids):
                pos = np.minimum(np.searchsorted(ids, it[r]), len(ids) - 1)
                hit = ids[pos] == it[r]
                emb[r, hit] = vals[pos[hit]]
            subs.append({**{k: trained[j][k] for k in names if k != "item.weight"}, "item.weight": emb[r]})
        params = stack(subs, names, device)
        local = torch.arange(it.shape[1], device=device).expand(len(jj), -1)
        return make_scorer(params)(torch.arange(len(jj), device=device), local)

    return score


def candidate_logits(user, emb, tower=None):
    """Logits of ``a`` clients on ``L`` candidates each whose item rows are gathered already:
    ``user`` a × 1 × d, ``emb`` a × L × d, ``tower`` the NCF tower's tensors per client (a × ...;
    a shared tower ``expand``-ed, not copied). For clients scored against tables the server sends
    once per node (FedFast's global table, PerFedRec's global and cluster tables): no client holds
    a copy of a table."""
    import torch

    from corolla.models.stacked import mlp_layer_names, stacked_logits

    a, n, _ = emb.shape
    p = {"user.weight": user, "item.weight": emb, **(tower or {})}
    local = torch.arange(n, device=emb.device).expand(a, n)
    return stacked_logits(p, local, mlp_layer_names(p))


def global_scorer(users: list[np.ndarray], shared: dict[str, np.ndarray], device):
    """Sigmoid scores (float32, as the harness) of each client's user vector with the global
    table and tower, gathered per candidate (no table per client): FedFast's evaluation and, with
    ``one-user-eval = global``, FedAvg's and FCF's."""
    import torch

    tower = [k for k in shared if k.startswith("mlp.")]

    def score(idx, items):
        jj, it = idx.cpu().numpy(), items.cpu().numpy()
        user = torch.as_tensor(np.stack([users[j] for j in jj]), device=device)
        t = {k: torch.as_tensor(shared[k], device=device)[None].expand(len(jj), *shared[k].shape) for k in tower}
        with torch.no_grad():
            logits = candidate_logits(user, torch.as_tensor(shared["item.weight"][it], device=device), t)
            return torch.sigmoid(logits).cpu().numpy().astype(np.float32)

    return score
