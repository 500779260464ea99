"""Local training of many one-user clients at once (FedCA's ``engine.py:114-151``; PFedRec's harness).

Every hosted user has its own copy of the model (``corolla.models`` MF or NCF with one user):
the parameters are stacked along a leading client axis (``item.weight``: B × M × d, and so on)
and one optimisation step updates every client that has a mini-batch at that step. Each client
keeps its own mini-batches, its own Adam state and step count and its own early break, so the
result equals training the clients one after another with ``torch.optim.Adam`` on the shared
model classes (:func:`train_one`, the reference path; ``tests/test_fedca.py`` checks that both
agree).

Semantics, as the FedCA code (engine.py:114-151):

* a fresh Adam every round; embeddings (``user.*``, ``item.*``) with ``lr_emb`` and no weight
  decay, the MLP with ``lr_mlp`` and Adam weight decay ``wd_mlp``; or, with ``sgd``, plain SGD
  at one rate per group (item table, user vector, the rest: :func:`learning_rates`, UFGraphFR's
  code base), equal to ``torch.optim.SGD`` per group (:func:`train_one`);
* loss: ``BCELoss(sigmoid(logit), label)``, the mean over the mini-batch (a probability that
  saturates to 1.0 gets no gradient, as in the code); with BPR pairs (:func:`bpr_pairs`, FedAvg's
  ``loss = bpr`` on the one-user harness: LightGCN's own loss) softplus(s_neg − s_pos), the mean
  over the mini-batch's pairs;
* ``epochs`` shuffled epochs of mini-batches of ``batch_size``; after each epoch the cumulative
  mean loss L_e (sum of batch loss × batch size over all epochs so far, divided by the samples
  so far: the code never resets them) is compared with L_{e−1} (L_{−1} = 0) and the client stops
  once |L_e − L_{e−1}| / |L_{e−1} + 1e-5| < ``early_break`` (0 disables it).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from corolla.models.star import star_logits

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def is_embedding(name: str) -> bool:
    return name.startswith(("user.", "item."))


def stacked_logits(p: dict[str, torch.Tensor], items: torch.Tensor, mlp_names: list[str],
                   graph: tuple[torch.Tensor, int] | None = None) -> torch.Tensor:
    """Logits of a clients × L block of items, for stacked parameters ``p`` (leading axis = the
    clients of ``items``' rows). ``mlp_names``: the Linear layers of NCF's tower in order
    (empty for MF). ``graph`` = (pos, K): LightGCN over each client's one-user graph instead
    (``corolla.models.star``; ``pos``: clients × items of their tables, 1 on their positives)."""
    a, n = items.shape
    user = p["user.weight"][:, 0, :]                                          # a × d
    if graph is not None:
        return star_logits(user, p["item.weight"], graph[0], items, graph[1])
    d = user.shape[1]
    q = torch.gather(p["item.weight"], 1, items[..., None].expand(a, n, d))  # a × L × d
    if not mlp_names:
        return (user[:, None, :] * q).sum(-1)
    x = torch.cat([user[:, None, :].expand(a, n, d), q], -1)
    for j, name in enumerate(mlp_names):
        x = torch.baddbmm(p[f"{name}.bias"][:, None, :], x, p[f"{name}.weight"].transpose(1, 2))
        if j < len(mlp_names) - 1:
            x = torch.relu(x)
    return x.squeeze(-1)


def mlp_layer_names(names) -> list[str]:
    return sorted({n.rsplit(".", 1)[0] for n in names if n.startswith("mlp.")},
                  key=lambda s: int(s.split(".")[1]))


def positive_masks(samples: list[dict[str, np.ndarray]], width: int, device) -> torch.Tensor:
    """B × ``width`` float mask, 1 on the items of each client's training positives (label 1): the
    item nodes of its one-user LightGCN graph (``corolla.models.star``)."""
    out = torch.zeros((len(samples), width), dtype=torch.float32, device=device)
    for b, s in enumerate(samples):
        pos = np.asarray(s["item"])[np.asarray(s["label"]) > 0]
        out[b, torch.as_tensor(pos, dtype=torch.long, device=device)] = 1.0
    return out


def epoch_permutations(g: np.random.Generator, n: int, epochs: int) -> list[np.ndarray]:
    return [g.permutation(n) for _ in range(epochs)]


def epoch_batches(samples: list[dict[str, np.ndarray]], perms: list[list[np.ndarray]], e: int,
                  alive: np.ndarray, batch_size: int, device):
    """Epoch ``e``'s mini-batch steps of the clients still ``alive``: yields (client indices,
    items, labels, mask) per step j, the clients being those with a j-th mini-batch (each in its
    own row order ``perms[b][e]``; rows padded to ``batch_size`` with mask 0)."""
    n = np.array([len(s["item"]) for s in samples], np.int64)
    nb = np.ceil(n / batch_size).astype(np.int64)
    if not alive.any():
        return
    width = int(nb[alive].max()) * batch_size
    it_all = np.zeros((len(samples), width), np.int64)
    lab_all = np.zeros((len(samples), width), np.float32)
    mask_all = np.zeros((len(samples), width), np.float32)
    for b in np.flatnonzero(alive):
        it_all[b, :n[b]] = samples[b]["item"][perms[b][e]]
        lab_all[b, :n[b]] = samples[b]["label"][perms[b][e]]
        mask_all[b, :n[b]] = 1.0
    it_t, lab_t, mask_t = (torch.as_tensor(x, device=device) for x in (it_all, lab_all, mask_all))
    for j in range(width // batch_size):
        act = np.flatnonzero(alive & (nb > j))
        idx = torch.as_tensor(act, device=device)
        cols = slice(j * batch_size, (j + 1) * batch_size)
        yield act, idx, it_t[idx, cols], lab_t[idx, cols], mask_t[idx, cols]


def is_pairs(samples: list[dict[str, np.ndarray]]) -> bool:
    """The samples are BPR pairs (a ``neg`` column, :func:`bpr_pairs`): all of them or none."""
    kinds = {"neg" in s for s in samples}
    if len(kinds) > 1:
        raise ValueError("training samples: some clients have BPR pairs ('neg') and some BCE rows; expected one kind")
    return kinds == {True}


def train_stacked(params: dict[str, torch.Tensor], samples: list[dict[str, np.ndarray]],
                  perms: list[list[np.ndarray]], batch_size: int, lr_emb: float, lr_mlp: float,
                  wd_mlp: float, early_break: float, penalty=None,
                  graph_layers: int | None = None,
                  sgd: dict[str, float] | None = None) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Train B one-user models in place of their stacked ``params``.

    ``samples[b]``: ``item`` (int) and ``label`` (float) of client b's training rows, or, with a
    ``neg`` column (:func:`bpr_pairs`), BPR pairs: the loss is then softplus(s_neg − s_pos) per
    pair instead of the BCE; ``perms[b][e]``: its row (pair) order in epoch e.
    ``penalty(leaf, idx)``, if given, is a term added to each mini-batch's loss of the clients at
    positions ``idx`` (``leaf``: their parameters at that step, a × ...; returns a tensor of a
    values): a method's change of the local objective
    (pFedGraph's similarity term). It is back-propagated with the loss but not counted in the
    reported loss or the early break. ``graph_layers`` K: the model is LightGCN with K layers over
    each client's one-user graph, its positives being the rows of ``samples`` labelled 1
    (FedLightGCN; ``corolla.models.star``). ``sgd``: plain SGD instead of Adam, with the learning
    rates ``sgd["item"]`` (item table), ``sgd["user"]`` (user vector) and ``sgd["rest"]`` (the
    tower, with weight decay ``wd_mlp``), as ``torch.optim.SGD`` per group (``lr_emb`` and
    ``lr_mlp`` unused): the one-user optimiser of UFGraphFR's code base (:func:`learning_rates`).
    Returns (params, final cumulative loss per client).
    """
    names = list(params)
    mlp = mlp_layer_names(names)
    dev = params["item.weight"].device
    B = len(samples)
    epochs = max(len(p) for p in perms) if perms else 0
    n = np.array([len(s["item"]) for s in samples], np.int64)
    adam = sgd is None   # plain SGD keeps no moments
    m = {k: torch.zeros_like(v) for k, v in params.items()} if adam else {}
    v2 = {k: torch.zeros_like(v) for k, v in params.items()} if adam else {}
    steps = torch.zeros(B, dtype=torch.float64, device=dev)   # indexed by idx, which lives on dev
    cum_loss = np.zeros(B)
    cum_n = np.zeros(B)
    prev = np.zeros(B)
    alive = n > 0
    pos = None if graph_layers is None else positive_masks(samples, params["item.weight"].shape[1], dev)
    pairs = is_pairs(samples)
    negs = [{"item": s["neg"], "label": s["label"]} for s in samples] if pairs else None
    b1, b2 = ADAM_BETAS
    for e in range(epochs):
        neg_batches = epoch_batches(negs, perms, e, alive, batch_size, dev) if pairs else None
        for act, idx, it, lab, mask in epoch_batches(samples, perms, e, alive, batch_size, dev):
            cnt = mask.sum(1)
            leaf = {k: params[k][idx].detach().requires_grad_(True) for k in names}
            graph = None if pos is None else (pos[idx], graph_layers)
            if pairs:   # BPR: −log σ(s_pos − s_neg) = softplus(s_neg − s_pos); one pass over both columns
                both = stacked_logits(leaf, torch.cat([it, next(neg_batches)[2]], 1), mlp, graph)
                logit, neg_logit = both.split(it.shape[1], dim=1)
                per = F.softplus(neg_logit - logit)
            else:
                per = F.binary_cross_entropy(torch.sigmoid(stacked_logits(leaf, it, mlp, graph)), lab,
                                             reduction="none")
            loss = (per * mask).sum(1) / cnt
            (loss if penalty is None else loss + penalty(leaf, idx)).sum().backward()
            if adam:
                steps[idx] += 1
                t = steps[idx]
                bc1 = (1 - b1 ** t)
                bc2s = (1 - b2 ** t).sqrt()
            with torch.no_grad():
                for k in names:
                    p, g = leaf[k], leaf[k].grad
                    lr, wd = (lr_emb, 0.0) if is_embedding(k) else (lr_mlp, wd_mlp)
                    if wd:
                        g = g.add(p, alpha=wd)
                    if sgd is not None:
                        p.sub_(g, alpha=sgd[param_group(k)])
                        params[k][idx] = p
                        continue
                    shape = (-1,) + (1,) * (p.dim() - 1)
                    mk = m[k][idx].lerp_(g, 1 - b1)
                    vk = v2[k][idx].mul_(b2).addcmul_(g, g, value=1 - b2)
                    denom = (vk.sqrt() / bc2s.to(p.dtype).view(shape)).add_(ADAM_EPS)
                    step_size = (lr / bc1).to(p.dtype).view(shape)
                    p.sub_(step_size * mk / denom)
                    params[k][idx] = p
                    m[k][idx] = mk
                    v2[k][idx] = vk
            lv = loss.detach().cpu().numpy().astype(np.float64)
            cum_loss[act] += lv * cnt.cpu().numpy()
            cum_n[act] += cnt.cpu().numpy()
        cur = np.divide(cum_loss, np.maximum(cum_n, 1))
        if early_break > 0:
            stop = alive & (np.abs(cur - prev) / np.abs(prev + 1e-5) < early_break)
            alive &= ~stop
        prev = cur
    return params, np.divide(cum_loss, np.maximum(cum_n, 1))


def learning_rates(lr: float, lr_eta: float, n_items: int) -> dict[str, float]:
    """The SGD learning rates of UFGraphFR's code base (``lr-eta``; UF engine.py:254-292, GP
    engine.py's three optimisers): the item table lr·M·lr_eta − lr, the user part lr·lr_eta − lr,
    the rest lr."""
    return {"item": lr * n_items * lr_eta - lr, "user": lr * lr_eta - lr, "rest": lr}


def param_group(name: str) -> str:
    """SGD group of a parameter (:func:`learning_rates`): ``item`` (the table), ``user`` (joint
    embedding / user vector), ``rest``."""
    if name.startswith("item."):
        return "item"
    if name.startswith("user."):
        return "user"
    return "rest"


def train_users(states: list[dict[str, np.ndarray]], samples: list[dict[str, np.ndarray]],
                perms: list[list[np.ndarray]], trainer, device, chunk: int = 64, dense: bool = True,
                compact: bool = True, penalty_for=None) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """``trainer(params, samples, perms)`` (:func:`train_stacked` or :func:`train_pfedrec_stacked`
    with their hyper-parameters bound) over the clients' states (numpy), compacted and in chunks.

    Compaction: a client trains only the item rows its training rows touch. With a fresh Adam (or
    plain SGD) and no weight decay on the item table, a row that gets no gradient in the round
    keeps m = v = 0 and does not move, so leaving it out is exact. Clients are sorted by the number of rows they
    touch and trained in chunks of ``chunk``, so that light users are not padded to heavy ones.
    Returns the new states (same keys) and the final cumulative loss per client. With
    ``dense=False`` a new state's ``item.weight`` holds only the trained rows, their ids in
    ``item.ids`` (sorted): every other row equals the start table (``item-upload = rows``).

    ``compact=False`` trains every row of every client's table: what a loss term with a gradient on
    rows the samples do not touch needs (pFedGraph's). ``penalty_for(part)``, if given, returns the
    ``penalty`` of the trainer (:func:`train_stacked`) for the clients ``part`` (their indices in
    ``states``, in the order they are stacked).
    """
    names = list(states[0])
    if compact:
        uni = [np.unique(np.concatenate([s["item"], s["neg"]]) if "neg" in s else s["item"]) for s in samples]
    else:
        everything = np.arange(states[0]["item.weight"].shape[0])
        uni = [everything] * len(samples)
    order = sorted(range(len(states)), key=lambda b: (len(uni[b]), len(samples[b]["item"])))
    new: list[dict[str, np.ndarray] | None] = [None] * len(states)
    losses = np.zeros(len(states))
    for a in range(0, len(order), chunk):
        part = order[a:a + chunk]
        r = max(1, max(len(uni[b]) for b in part))
        sub_states, sub_samples = [], []
        for b in part:
            st = dict(states[b])
            table = np.zeros((r, st["item.weight"].shape[1]), np.float32)
            table[:len(uni[b])] = st["item.weight"][uni[b]]
            st["item.weight"] = table
            sub_states.append(st)
            sub = {"item": np.searchsorted(uni[b], samples[b]["item"]), "label": samples[b]["label"]}
            if "neg" in samples[b]:
                sub["neg"] = np.searchsorted(uni[b], samples[b]["neg"])
            sub_samples.append(sub)
        params = stack(sub_states, names, device)
        if penalty_for is None:
            params, loss = trainer(params, sub_samples, [perms[b] for b in part])
        else:
            params, loss = trainer(params, sub_samples, [perms[b] for b in part], penalty=penalty_for(part))
        for b, st, lb in zip(part, unstack(params), loss):
            if dense:
                table = np.array(states[b]["item.weight"], np.float32, copy=True)
                table[uni[b]] = st["item.weight"][:len(uni[b])]
                st["item.weight"] = table
            else:
                st["item.weight"] = np.ascontiguousarray(st["item.weight"][:len(uni[b])])
                st["item.ids"] = uni[b].astype(np.int64)
            new[b] = st
            losses[b] = lb
    return new, losses  # type: ignore[return-value]


def train_one(model, samples: dict[str, np.ndarray], perms: list[np.ndarray], batch_size: int,
              lr_emb: float, lr_mlp: float, wd_mlp: float, early_break: float,
              sgd: dict[str, float] | None = None) -> float:
    """The reference path: one user's model (``corolla.models`` MF/NCF with one user) trained with
    ``torch.optim.Adam`` (with ``sgd``: ``torch.optim.SGD``, one group per rate) exactly as
    :func:`train_stacked` trains each client."""
    if sgd is not None:
        named = list(model.named_parameters())
        groups = [{"params": [p for n, p in named if param_group(n) == part], "lr": sgd[part],
                   "weight_decay": wd_mlp if part == "rest" else 0.0} for part in ("item", "user", "rest")]
        opt = torch.optim.SGD([grp for grp in groups if grp["params"]])
    else:
        emb = [p for n, p in model.named_parameters() if is_embedding(n)]
        rest = [p for n, p in model.named_parameters() if not is_embedding(n)]
        groups = [{"params": emb, "lr": lr_emb, "weight_decay": 0.0}]
        if rest:
            groups.append({"params": rest, "lr": lr_mlp, "weight_decay": wd_mlp})
        opt = torch.optim.Adam(groups, betas=ADAM_BETAS, eps=ADAM_EPS)
    dev = next(model.parameters()).device
    items = torch.as_tensor(samples["item"], dtype=torch.long, device=dev)
    labels = torch.as_tensor(samples["label"], dtype=torch.float32, device=dev)
    negs = torch.as_tensor(samples["neg"], dtype=torch.long, device=dev) if "neg" in samples else None
    n = len(items)
    cum_loss = cum_n = prev = 0.0
    model.train()
    for perm in perms:
        order = torch.as_tensor(perm, dtype=torch.long, device=dev)
        for a in range(0, n, batch_size):
            sel = order[a:a + batch_size]
            opt.zero_grad(set_to_none=True)
            users = torch.zeros(len(sel), dtype=torch.long, device=dev)
            if negs is None:
                loss = F.binary_cross_entropy(torch.sigmoid(model(users, items[sel])), labels[sel])
            else:
                loss = F.softplus(model(users, negs[sel]) - model(users, items[sel])).mean()
            loss.backward()
            opt.step()
            cum_loss += float(loss.detach()) * len(sel)
            cum_n += len(sel)
        cur = cum_loss / max(cum_n, 1)
        if early_break > 0 and abs(cur - prev) / abs(prev + 1e-5) < early_break:
            break
        prev = cur
    return cum_loss / max(cum_n, 1)


def pfedrec_probs(table, score: dict[str, torch.Tensor], items) -> torch.Tensor:
    """PFedRec's scores sigmoid(f(q_i)) of a clients × L block of items; ``f`` is the score function
    in ``score`` (stacked): ReLU layers ``tower.j`` (if any), then ``affine`` (x · w + b)."""
    a, n = items.shape
    x = torch.gather(table, 1, items[..., None].expand(a, n, table.shape[2]))
    j = 0
    while f"tower.{j}.weight" in score:
        w, b = score[f"tower.{j}.weight"], score[f"tower.{j}.bias"]
        x = torch.relu(torch.baddbmm(b[:, None, :], x, w.transpose(1, 2)))
        j += 1
    return torch.sigmoid((x * score["affine.weight"]).sum(-1) + score["affine.bias"])


def pfedrec_table_probs(table: torch.Tensor, score: dict[str, torch.Tensor]) -> torch.Tensor:
    """:func:`pfedrec_probs` of every row of one shared ``table`` (M × d) for stacked clients'
    score functions (``score``: a × ...): a × M, by matrix products (no a × M × d copy)."""
    x = table[None]                                                           # 1 × M × d
    j = 0
    while f"tower.{j}.weight" in score:
        w, b = score[f"tower.{j}.weight"], score[f"tower.{j}.bias"]
        x = torch.relu(torch.matmul(x, w.transpose(1, 2)) + b[:, None, :])    # a × M × h
        j += 1
    w = score["affine.weight"]                                                # a × 1 × h
    return torch.sigmoid(torch.matmul(x, w.transpose(1, 2))[..., 0] + score["affine.bias"])


def _pfedrec_bce(table, score: dict[str, torch.Tensor], items, labels, mask) -> torch.Tensor:
    """Per-client mean BCE of :func:`pfedrec_probs` over the unmasked rows."""
    prob = pfedrec_probs(table, score, items)
    return (F.binary_cross_entropy(prob, labels, reduction="none") * mask).sum(1) / mask.sum(1)


def train_pfedrec_stacked(params: dict[str, torch.Tensor], samples: list[dict[str, np.ndarray]],
                          perms: list[list[np.ndarray]], batch_size: int, lr: float, lr_item: float
                          ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """PFedRec's local training (PF engine.py:41-64) for B clients at once: per mini-batch,
    (1) an SGD step (``lr``) of the score function (``affine`` and the ``tower`` layers before it,
    if any) on the BCE, then (2) with the updated score function, the BCE again and an SGD step
    (``lr_item``) of the item table. Returns (params, mean step-1 loss per client)."""
    dev = params["item.weight"].device
    B = len(samples)
    n = np.array([len(s["item"]) for s in samples], np.int64)
    names = [k for k in params if k.startswith(("tower.", "affine."))]
    epochs = max(len(p) for p in perms) if perms else 0
    cum_loss, cum_n = np.zeros(B), np.zeros(B)
    for e in range(epochs):
        for act, idx, it, lab, mask in epoch_batches(samples, perms, e, n > 0, batch_size, dev):
            cnt = mask.sum(1)
            table = params["item.weight"][idx]
            score = {k: params[k][idx].requires_grad_(True) for k in names}
            loss = _pfedrec_bce(table, score, it, lab, mask)
            loss.sum().backward()
            with torch.no_grad():
                score2 = {k: v - lr * v.grad for k, v in score.items()}
            table = table.requires_grad_(True)
            _pfedrec_bce(table, score2, it, lab, mask).sum().backward()
            with torch.no_grad():
                params["item.weight"][idx] = table - lr_item * table.grad
                for k, v in score2.items():
                    params[k][idx] = v
            cum_loss[act] += loss.detach().cpu().numpy().astype(np.float64) * cnt.cpu().numpy()
            cum_n[act] += cnt.cpu().numpy()
    return params, np.divide(cum_loss, np.maximum(cum_n, 1))


def train_pfedrec_one(model, samples: dict[str, np.ndarray], perms: list[np.ndarray], batch_size: int,
                      lr: float, lr_item: float) -> float:
    """The reference path of :func:`train_pfedrec_stacked` with ``torch.optim.SGD``, as PF's engine
    (its first optimiser on the whole score function)."""
    opt = torch.optim.SGD(model.score_parameters(), lr=lr)
    opt_i = torch.optim.SGD(model.item.parameters(), lr=lr_item)
    dev = next(model.parameters()).device
    items = torch.as_tensor(samples["item"], dtype=torch.long, device=dev)
    labels = torch.as_tensor(samples["label"], dtype=torch.float32, device=dev)
    tot = cnt = 0.0
    for perm in perms:
        order = torch.as_tensor(perm, dtype=torch.long, device=dev)
        for a in range(0, len(items), batch_size):
            sel = order[a:a + batch_size]
            opt.zero_grad()
            loss = F.binary_cross_entropy(torch.sigmoid(model(items[sel])), labels[sel])
            loss.backward()
            opt.step()
            opt_i.zero_grad()
            F.binary_cross_entropy(torch.sigmoid(model(items[sel])), labels[sel]).backward()
            opt_i.step()
            tot += float(loss.detach()) * len(sel)
            cnt += len(sel)
    return tot / max(cnt, 1)


def draw_negatives(pool: np.ndarray, n_pos: int, k: int, g: np.random.Generator) -> np.ndarray:
    """``k`` distinct items of ``pool`` for each of ``n_pos`` positives (n_pos × k), uniformly
    (``random.sample(pool, k)`` per positive, as the FedCA/PFedRec code)."""
    if len(pool) < k:
        raise ValueError(f"negative pool of {len(pool)} items is smaller than num-negatives={k}")
    out = g.integers(0, len(pool), (n_pos, k))
    while True:
        s = np.sort(out, 1)
        bad = np.flatnonzero((s[:, 1:] == s[:, :-1]).any(1)) if k > 1 else np.zeros(0, np.int64)
        if not len(bad):
            break
        out[bad] = g.integers(0, len(pool), (len(bad), k))
    return pool[out]


def training_rows(pos: np.ndarray, pool: np.ndarray, k: int, g: np.random.Generator) -> dict[str, np.ndarray]:
    """Each positive followed by its ``k`` negatives: ``item`` and ``label`` rows."""
    neg = draw_negatives(pool, len(pos), k, g)
    items = np.concatenate([pos[:, None], neg], 1).reshape(-1)
    labels = np.zeros((len(pos), k + 1), np.float32)
    labels[:, 0] = 1.0
    return {"item": items.astype(np.int64), "label": labels.reshape(-1)}


def bpr_pairs(rows: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
    """:func:`training_rows`' rows as BPR pairs (``loss = bpr`` on the one-user harness): each
    positive paired with each of its ``k`` negatives, ``item`` the positive, ``neg`` the negative
    (``label`` 1: the positives, which a one-user LightGCN's graph is built from)."""
    items = np.asarray(rows["item"], np.int64)
    if k < 1 or len(items) % (k + 1):
        raise ValueError(f"bpr_pairs: expected rows of a positive followed by k={k} negatives, got {len(items)} rows")
    block = items.reshape(-1, k + 1)
    if not (np.asarray(rows["label"]).reshape(-1, k + 1)[:, 0] > 0).all():
        raise ValueError("bpr_pairs: every block of rows must start with its positive (label 1)")
    return {"item": np.repeat(block[:, 0], k), "neg": block[:, 1:].reshape(-1),
            "label": np.ones(len(block) * k, np.float32)}


def stack(states: list[dict[str, np.ndarray]], names: list[str], device) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.stack([s[k] for s in states]), device=device).float().contiguous()
            for k in names}


def unstack(params: dict[str, torch.Tensor]) -> list[dict[str, np.ndarray]]:
    arrs = {k: v.detach().cpu().numpy() for k, v in params.items()}
    b = len(next(iter(arrs.values())))
    return [{k: v[i].copy() for k, v in arrs.items()} for i in range(b)]

