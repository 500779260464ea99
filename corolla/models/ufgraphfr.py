"""UFGraphFR's client network (UF mymodel.py; docs/methods/ufgraphfr.md) and GPFedRec's (GP mlp.py:6-35),
and their local training (UF engine.py:48-84, 172-334; GP engine.py:92-128) for many one-user clients at once.

UFGraphFR (the code's architecture, which produced the published numbers):

* joint embedding e_u = W v_u + b (``user``: Linear(d_text, 32); paper Eq. 3), or with
  ``use-joint-embedding = false`` (ablation nJ) a free vector (Embedding(1, 32));
* UserMLP h_u = sigmoid(L2(L1(e_u))), L1: 32→64, L2: 64→32, no activation between (the paper's
  Eq. 10 has ReLUs; the code has none);
* item table Q (Embedding(M, 32));
* the code's "Temporal Transformer" applied to each item embedding alone (a length-1 sequence):
  8 heads of size 4, scores softmaxed over the single key (so = 1), dropout(0.1) on the attention
  weights, ``x = drop(LN1(o(attn·V) + e_i))``, ``t = drop(LN2(FFN(x) + x))``,
  FFN = Linear(32,64)-ReLU-Linear(64,32) (paper Eq. 5–9); ``use-transformer = false`` (nT): t = e_i;
* score head on [h_u ‖ t]: Linear(64,32)→(32,16)→(16,8)→(8,1)→sigmoid, no activation between (the
  paper's Eq. 13–15 have ReLUs).

GPFedRec: a free user vector (Embedding(1, 32)), the item table, and the head on [u ‖ q]:
Linear(64,32)-ReLU-(32,16)-ReLU-(16,8)-ReLU-(8,1)-sigmoid.

Training (both): BCE on the sigmoid output + ``item-reg`` · mean((Q − r)²) over the whole table
against the client's regularisation target r (UF engine.py:53,72-76; GP engine.py:44,54-55),
three plain SGD groups: the item table with ``lr·M·lr-eta − lr``, the user part with
``lr·lr-eta − lr``, the rest with ``lr``; mini-batches of the shuffled round rows; dropout active.
Dropout masks come from a generator per (seed, client, round), drawn for full mini-batches in a
fixed order, so training many users stacked equals training each alone
(:func:`train_one`, the reference with ``torch.optim.SGD`` on the nn.Modules; tested).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from corolla.models.stacked import learning_rates, param_group  # noqa: F401 (UF.learning_rates)
from corolla.util import stable_seed

DIM = 32
HEADS = 8
HEAD_LAYERS = (2 * DIM, 32, 16, 8)


# ----------------------------------------------------------------------------------------------
# per-user reference modules


class UFGraphFRModel(nn.Module):
    def __init__(self, n_items: int, text_dim: int, use_transformer: bool = True, use_joint: bool = True,
                 dropout: float = 0.1):
        super().__init__()
        self.use_transformer, self.use_joint, self.p = use_transformer, use_joint, dropout
        self.user = nn.Linear(text_dim, DIM) if use_joint else nn.Embedding(1, DIM)
        self.umlp = nn.ModuleList([nn.Linear(DIM, 64), nn.Linear(64, DIM)])
        self.item = nn.Embedding(n_items, DIM)
        if use_transformer:
            self.attn = nn.ModuleDict({k: nn.Linear(DIM, DIM) for k in ("q", "k", "v", "o")})
            self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.ffn = nn.ModuleList([nn.Linear(DIM, 2 * DIM), nn.Linear(2 * DIM, DIM)])
        self.fc = nn.ModuleList([nn.Linear(a, b) for a, b in zip(HEAD_LAYERS[:-1], HEAD_LAYERS[1:])])
        self.out = nn.Linear(HEAD_LAYERS[-1], 1)

    def transform(self, e: torch.Tensor, masks) -> torch.Tensor:
        """The per-item Transformer block; ``masks`` = (attention, after LN1, after LN2) keep-masks
        or None (eval)."""
        n = e.shape[0]
        q, k, v = (self.attn[x](e).view(n, 1, HEADS, DIM // HEADS).transpose(1, 2) for x in ("q", "k", "v"))
        w = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(DIM // HEADS), -1)          # n × H × 1 × 1
        if masks is not None:
            w = w * masks[0][:n].view(n, HEADS, 1, 1) / (1 - self.p)
        z = self.attn["o"]((w @ v).transpose(1, 2).reshape(n, DIM))
        x = self.ln1(z + e)
        if masks is not None:
            x = x * masks[1][:n] / (1 - self.p)
        t = self.ln2(self.ffn[1](F.relu(self.ffn[0](x))) + x)
        if masks is not None:
            t = t * masks[2][:n] / (1 - self.p)
        return t

    def forward(self, text: torch.Tensor, items: torch.Tensor, masks=None) -> torch.Tensor:   # logits
        e_u = self.user(text) if self.use_joint else self.user.weight[0]
        h = torch.sigmoid(self.umlp[1](self.umlp[0](e_u)))
        e_i = self.item(items)
        t = self.transform(e_i, masks) if self.use_transformer else e_i
        x = torch.cat([h.expand(len(items), DIM), t], -1)
        for layer in self.fc:
            x = layer(x)
        return self.out(x).squeeze(-1)


class GPFedRecModel(nn.Module):
    def __init__(self, n_items: int, head_layers: tuple[int, ...] = HEAD_LAYERS):
        super().__init__()
        if len(head_layers) < 1 or head_layers[0] != 2 * DIM:
            raise ValueError(f"head_layers: expected widths starting with {2 * DIM} (user and item vector), "
                             f"got {head_layers}")
        self.user = nn.Embedding(1, DIM)
        self.item = nn.Embedding(n_items, DIM)
        self.fc = nn.ModuleList([nn.Linear(a, b) for a, b in zip(head_layers[:-1], head_layers[1:])])
        self.out = nn.Linear(head_layers[-1], 1)

    def forward(self, text, items: torch.Tensor, masks=None) -> torch.Tensor:   # logits
        x = torch.cat([self.user.weight[0].expand(len(items), DIM), self.item(items)], -1)
        for layer in self.fc:
            x = F.relu(layer(x))
        return self.out(x).squeeze(-1)


def build(kind: str, n_items: int, text_dim: int = 0, use_transformer: bool = True, use_joint: bool = True,
          dropout: float = 0.1, head_layers: tuple[int, ...] = HEAD_LAYERS) -> nn.Module:
    if kind == "ufgraphfr":
        return UFGraphFRModel(n_items, text_dim, use_transformer, use_joint, dropout)
    if kind == "gpfedrec":
        return GPFedRecModel(n_items, tuple(head_layers))
    raise ValueError(f"model: expected 'ufgraphfr' or 'gpfedrec', got {kind!r}")


def shared_init(kind: str, n_items: int, text_dim: int, seed: int, **kw) -> dict[str, np.ndarray]:
    """The one initialisation every client starts from (the code's ``deepcopy`` of one model):
    PyTorch's default inits (item table N(0, 1)) under a seed of the run."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stable_seed(seed, kind, "init"))
        m = build(kind, n_items, text_dim, **kw)
    return {k: v.detach().numpy().copy() for k, v in m.named_parameters()}


def set_params(m: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    params = dict(m.named_parameters())
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(torch.as_tensor(np.ascontiguousarray(arrays[k])))


def get_params(m: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in m.named_parameters()}


# ----------------------------------------------------------------------------------------------
# stacked (many users) functional forward


def _lin(x: torch.Tensor, p: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """Linear layer of stacked clients: x (B × L × in), weight (B × out × in), bias (B × out)."""
    return torch.baddbmm(p[f"{name}.bias"][:, None, :], x, p[f"{name}.weight"].transpose(1, 2))


def _ln(x: torch.Tensor, p: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],)) * p[f"{name}.weight"][:, None, :] + p[f"{name}.bias"][:, None, :]


def stacked_logits(kind: str, p: dict[str, torch.Tensor], text: torch.Tensor | None, items: torch.Tensor,
                   masks=None, dropout: float = 0.1) -> torch.Tensor:
    """Logits of B clients (stacked params ``p``) on their B × L items; ``masks`` (B × L × H,
    B × L × 32, B × L × 32) keep-masks of the dropouts, None in eval."""
    b, n = items.shape
    q = torch.gather(p["item.weight"], 1, items[..., None].expand(b, n, DIM))          # B × L × 32
    if kind == "gpfedrec":   # its head's depth is the params' (``head_layers``)
        x = torch.cat([p["user.weight"][:, :1, :].expand(b, n, DIM), q], -1)
        for j in range(sum(1 for k in p if k.startswith("fc.") and k.endswith(".weight"))):
            x = torch.relu(_lin(x, p, f"fc.{j}"))
        return _lin(x, p, "out").squeeze(-1)
    if "user.bias" in p:   # joint embedding of the text vector
        e_u = torch.baddbmm(p["user.bias"][:, None, :], text[:, None, :], p["user.weight"].transpose(1, 2))
    else:
        e_u = p["user.weight"][:, :1, :]
    h = torch.sigmoid(_lin(_lin(e_u, p, "umlp.0"), p, "umlp.1"))                      # B × 1 × 32
    t = q
    if "attn.q.weight" in p:
        hd = DIM // HEADS
        qq, kk, vv = (_lin(q, p, f"attn.{x}").view(b, n, HEADS, hd) for x in ("q", "k", "v"))
        w = torch.softmax(((qq * kk).sum(-1) / np.sqrt(hd))[..., None], -1)            # B × L × H × 1
        if masks is not None:
            w = w * masks[0][..., None] / (1 - dropout)
        z = _lin((w * vv).reshape(b, n, DIM), p, "attn.o")
        x = _ln(z + q, p, "ln1")
        if masks is not None:
            x = x * masks[1] / (1 - dropout)
        t = _ln(_lin(torch.relu(_lin(x, p, "ffn.0")), p, "ffn.1") + x, p, "ln2")
        if masks is not None:
            t = t * masks[2] / (1 - dropout)
    x = torch.cat([h.expand(b, n, DIM), t], -1)
    for j in range(len(HEAD_LAYERS) - 1):
        x = _lin(x, p, f"fc.{j}")
    return _lin(x, p, "out").squeeze(-1)


def dropout_masks(g: torch.Generator, batch_size: int, p: float) -> tuple[torch.Tensor, ...]:
    """One mini-batch's keep-masks (attention weights, after LN1, after LN2), full batch rows."""
    return tuple((torch.rand(shape, generator=g) >= p).float()
                 for shape in ((batch_size, HEADS), (batch_size, DIM), (batch_size, DIM)))


# ----------------------------------------------------------------------------------------------
# local training


def train_stacked(kind: str, params: dict[str, torch.Tensor], texts: torch.Tensor | None,
                  targets: torch.Tensor, samples: list[dict[str, np.ndarray]], perms: list[list[np.ndarray]],
                  gens: list[torch.Generator] | None, batch_size: int, lrs: dict[str, float], reg: float,
                  dropout: float) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Train B clients in place of their stacked ``params`` (``targets``: B × M × 32 regularisation
    targets; ``gens``: per-client dropout generators, None without dropout). Returns (params, mean
    BCE per client over its rows)."""
    from corolla.models.stacked import epoch_batches

    names = list(params)
    dev = params["item.weight"].device
    n_b = len(samples)
    n = np.array([len(s["item"]) for s in samples], np.int64)
    epochs = max(len(p) for p in perms) if perms else 0
    use_masks = gens is not None and kind == "ufgraphfr" and "attn.q.weight" in params
    cum, cnt_all = np.zeros(n_b), np.zeros(n_b)
    for e in range(epochs):
        for act, idx, it, lab, mask in epoch_batches(samples, perms, e, n > 0, batch_size, dev):
            masks = None
            if use_masks:
                drawn = [dropout_masks(gens[b], batch_size, dropout) for b in act]
                masks = tuple(torch.stack([d[j] for d in drawn]).to(dev)[:, :it.shape[1]] for j in range(3))
                masks = (masks[0], masks[1], masks[2])
            leaf = {k: params[k][idx].detach().requires_grad_(True) for k in names}
            txt = texts[idx] if texts is not None else None
            prob = torch.sigmoid(stacked_logits(kind, leaf, txt, it, masks, dropout))
            cnt = mask.sum(1)
            bce = (F.binary_cross_entropy(prob, lab, reduction="none") * mask).sum(1) / cnt
            regl = ((leaf["item.weight"] - targets[idx]) ** 2).mean((1, 2))
            (bce + reg * regl).sum().backward()
            with torch.no_grad():
                for k in names:
                    g = leaf[k].grad
                    if g is not None:
                        params[k][idx] = leaf[k] - lrs[param_group(k)] * g
            cum[act] += bce.detach().cpu().numpy().astype(np.float64) * cnt.cpu().numpy()
            cnt_all[act] += cnt.cpu().numpy()
    return params, np.divide(cum, np.maximum(cnt_all, 1))


def train_one(model: nn.Module, text: torch.Tensor | None, target: torch.Tensor, sample: dict[str, np.ndarray],
              perm: list[np.ndarray], gen: torch.Generator | None, batch_size: int, lrs: dict[str, float],
              reg: float, dropout: float) -> float:
    """The reference: one client's nn.Module trained with three ``torch.optim.SGD`` (UF
    engine.py:254-292), the same mini-batches and dropout masks as :func:`train_stacked`."""
    groups: dict[str, list] = {"item": [], "user": [], "rest": []}
    for name, p in model.named_parameters():
        groups[param_group(name)].append(p)
    opts = [torch.optim.SGD(ps, lr=lrs[g]) for g, ps in groups.items() if ps]
    items = torch.as_tensor(sample["item"], dtype=torch.long)
    labels = torch.as_tensor(sample["label"], dtype=torch.float32)
    use_masks = gen is not None and isinstance(model, UFGraphFRModel) and model.use_transformer
    model.train()
    tot = seen = 0.0
    for order in perm:
        order = torch.as_tensor(order, dtype=torch.long)
        for a in range(0, len(items), batch_size):
            sel = order[a:a + batch_size]
            masks = dropout_masks(gen, batch_size, dropout) if use_masks else None
            for o in opts:
                o.zero_grad()
            prob = torch.sigmoid(model(text, items[sel], masks))
            bce = F.binary_cross_entropy(prob, labels[sel])
            loss = bce + reg * ((model.item.weight - target) ** 2).mean()
            loss.backward()
            for o in opts:
                o.step()
            tot += float(bce.detach()) * len(sel)
            seen += len(sel)
    return tot / max(seen, 1)
