"""Local training: sample construction, the epoch loop, optimiser state as arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from corolla.data.federation import Federation


def item_pools(fed: Federation, users: np.ndarray, pool: str,
               item_mask: np.ndarray | None = None) -> list[np.ndarray]:
    """Per local user, a boolean mask of items that may be drawn as training negatives
    (``item_mask``: the client's own item universe, for the spectral partition)."""
    masks = []
    for u in users.tolist():
        m = np.ones(fed.n_items, bool)
        m[fed.rows("train", u)] = False
        if pool == "uninteracted":
            m[fed.rows("valid", u)] = False
            m[fed.rows("test", u)] = False
        if item_mask is not None:
            m &= item_mask
        masks.append(m)
    return masks


def fixed_triples(fed: Federation, users: np.ndarray, pool: str, g: np.random.Generator,
                  item_mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """FedCIA's ``UniformSample`` (``dataset/dataset.py:106-124``): as many triples as training interactions; user uniform
    over the client's users with training items, positive uniform over its train items, negative
    uniform over its pool."""
    trains = [fed.rows("train", u) for u in users.tolist()]
    active = np.array([k for k, t in enumerate(trains) if len(t)], np.int64)
    n = sum(len(t) for t in trains)
    if n == 0:
        return {"user": np.zeros(0, np.int64), "pos": np.zeros(0, np.int64), "neg": np.zeros(0, np.int64)}
    masks = item_pools(fed, users, pool, item_mask)
    pools = [np.flatnonzero(m) for m in masks]
    uu = active[g.integers(0, len(active), n)]
    pos = np.array([trains[k][g.integers(len(trains[k]))] for k in uu.tolist()], np.int64)
    neg = np.array([pools[k][g.integers(len(pools[k]))] for k in uu.tolist()], np.int64)
    return {"user": uu, "pos": pos, "neg": neg}


def per_positive(fed: Federation, users: np.ndarray, pool: str, num_neg: int, as_rows: bool,
                 g: np.random.Generator, item_mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``num_neg`` negatives per training positive, drawn without replacement from the pool.

    ``as_rows`` gives (user, item, label) rows (each positive once, label 1; negatives label 0);
    otherwise (user, pos, neg) triples with each positive repeated ``num_neg`` times.
    """
    masks = item_pools(fed, users, pool, item_mask)
    us, ps, ns = [], [], []
    for k, u in enumerate(users.tolist()):
        t = fed.rows("train", u)
        if not len(t):
            continue
        cand = np.flatnonzero(masks[k])
        if len(cand) < num_neg:
            raise ValueError(f"user {u}: only {len(cand)} candidate negatives, num-negatives={num_neg}")
        # without replacement per positive: random keys, take the num_neg smallest
        keys = g.random((len(t), len(cand)))
        neg = cand[np.argpartition(keys, num_neg - 1, axis=1)[:, :num_neg]] if num_neg < len(cand) else \
            np.tile(cand, (len(t), 1))
        us.append(np.full(len(t) * num_neg, k, np.int64))
        ps.append(np.repeat(t, num_neg))
        ns.append(neg.reshape(-1))
    if not us:
        z = np.zeros(0, np.int64)
        return {"user": z, "item": z, "label": z.astype(np.float32)} if as_rows else {"user": z, "pos": z, "neg": z}
    u, p, n = np.concatenate(us), np.concatenate(ps), np.concatenate(ns)
    if not as_rows:
        return {"user": u, "pos": p, "neg": n}
    pos_rows = p[::num_neg]
    pos_users = u[::num_neg]
    return {"user": np.r_[pos_users, u], "item": np.r_[pos_rows, n],
            "label": np.r_[np.ones(len(pos_rows)), np.zeros(len(n))].astype(np.float32)}


def make_optimizer(cfg: dict[str, Any], params) -> torch.optim.Optimizer:
    if cfg["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=cfg["lr"])
    return torch.optim.SGD(params, lr=cfg["lr"])


def optimizer_to_arrays(opt: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    out = {}
    for idx, st in opt.state_dict()["state"].items():
        for name, v in st.items():
            out[f"opt/{idx}/{name}"] = torch.as_tensor(v).detach().cpu().numpy().copy()
    return out


def optimizer_from_arrays(opt: torch.optim.Optimizer, arrays: dict[str, np.ndarray], device) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in arrays.items():
        if not k.startswith("opt/"):
            continue
        _, idx, name = k.split("/", 2)
        t = torch.from_numpy(np.array(v))
        state.setdefault(int(idx), {})[name] = t if name == "step" else t.to(device)
    if state:
        sd = opt.state_dict()
        sd["state"] = state
        opt.load_state_dict(sd)


def train_epochs(model, opt, samples: dict[str, np.ndarray], epochs: int, batch_size: int,
                 g: np.random.Generator, device, penalty=None) -> float:
    """Shuffled mini-batch epochs; returns the mean loss of the last epoch. ``penalty()``, when
    given, is added to every batch's loss (FedProx's proximal term)."""
    n = len(samples["user"])
    if n == 0:
        return float("nan")
    tens = {k: torch.from_numpy(np.asarray(v)).to(device) for k, v in samples.items()}
    model.train()
    last = 0.0
    for _ in range(epochs):
        perm = torch.from_numpy(g.permutation(n)).to(device)
        tot = 0.0
        for a in range(0, n, batch_size):
            idx = perm[a:a + batch_size]
            batch = {k: v[idx] for k, v in tens.items()}
            opt.zero_grad(set_to_none=True)
            loss = model.loss(batch)
            if penalty is not None:
                loss = loss + penalty()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * len(idx)
        last = tot / n
    return last
