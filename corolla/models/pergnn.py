"""FedPerGNN's client network (Wu et al., "A federated graph neural network framework for
privacy-preserving personalization", Nat. Commun. 13:3091, 2022; the authors' code
wuch15/FedPerGNN 9e77e2e ``model.py:22-60``; docs/methods/fedpergnn.md, "Model").

A user u with its history items h_1..h_H (padded to H slots) and, per history item, up to K
neighbour user embeddings n_{h,1..K} (the expansion's second-order neighbours, zero-padded):

* neighbour transform  m_{h,k} = W_n n_{h,k} + b_n                      (model.py:34, linear)
* history item         e_h = σ(W_h q_h + b_h)                            (model.py:36, q_h item row)
* GAT score            s_{h,k} = LeakyReLU_0.3(w_g·[e_h ‖ m_{h,k}] + b_g)  (model.py:37-38)
* neighbour weights    a_{h,k} = softmax_k over the present neighbours (``neighbour_softmax``,
  default) or, as the code, s_{h,k} − 99·[slot k empty] with no normalisation (model.py:39)
* aggregated item      g_h = W_a [Σ_k a_{h,k} m_{h,k} ‖ e_h] + b_a         (model.py:40-42)
* user                 p = dropout(σ(W_u v_u + b_u))                     (model.py:43-44)
* history attention    β_h = softmax_h(LeakyReLU_0.3(w_t·[p ‖ g_h] + b_t) + mask_h)  (model.py:48-53),
  mask_h = −∞ on padded slots (``history_mask = correct``) or, as the code's ``ComputeMasking``,
  −99 on the *real* items and 0 on the padding (``reference``; the padding slots then carry the
  trainable padding item's row, the code's item row I+2)
* pooled user          z = W_f [Σ_h β_h x_h ‖ p] + b_f, with x_h = g_h (``pool = aggregated``, the
  paper's GNN-aggregated items) or x_h = e_h (``reference``: model.py:54 pools ``uiemb``, so the
  neighbour branch only steers the attention)                          (model.py:54-55)
* candidate            c = dropout(σ(W_i q_i + b_i))                     (model.py:45-46)
* score                ŷ = σ(w_o·[z ‖ c] + b_o)                          (model.py:57)

LeakyReLU's slope is Keras' default 0.3. Dense kernels are stored as Keras stores them
(in × out, Glorot-uniform; zero biases); the user vector and the item rows are U(±0.05) (Keras'
Embedding default). Every function is batched over a leading client dimension B; the logits
are returned (the ranking is that of σ(logit)).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

LEAKY = 0.3        # keras.layers.LeakyReLU() default alpha
CODE_MASK = -99.0  # the code's additive mask (model.py:17, 39)
EMB_SCALE = 0.05   # keras Embedding default initializer: RandomUniform(-0.05, 0.05)


def weight_shapes(d: int) -> dict[str, tuple[int, ...]]:
    """The shared (global) network weights of width ``d`` by name, Keras layout."""
    return {
        "gnn.nbr.kernel": (d, d), "gnn.nbr.bias": (d,),          # model.py:34
        "gnn.hist.kernel": (d, d), "gnn.hist.bias": (d,),        # model.py:36
        "gnn.gat.kernel": (2 * d, 1), "gnn.gat.bias": (1,),      # model.py:38
        "gnn.agg.kernel": (2 * d, d), "gnn.agg.bias": (d,),      # model.py:42
        "gnn.user.kernel": (d, d), "gnn.user.bias": (d,),        # model.py:43
        "gnn.item.kernel": (d, d), "gnn.item.bias": (d,),        # model.py:45
        "gnn.att.kernel": (2 * d, 1), "gnn.att.bias": (1,),      # model.py:51
        "gnn.fuse.kernel": (2 * d, d), "gnn.fuse.bias": (d,),    # model.py:55
        "gnn.out.kernel": (2 * d, 1), "gnn.out.bias": (1,),      # model.py:57
        "gnn.pad": (1, d),                                       # the padding item's row (code: item I+2)
    }


def init_weights(d: int, g: np.random.Generator) -> dict[str, np.ndarray]:
    """Keras' defaults: Glorot-uniform kernels, zero biases; the padding row U(±0.05)."""
    out = {}
    for name, shape in weight_shapes(d).items():
        if name.endswith(".kernel"):
            lim = np.sqrt(6.0 / (shape[0] + shape[1]))
            out[name] = g.uniform(-lim, lim, shape).astype(np.float32)
        elif name == "gnn.pad":
            out[name] = g.uniform(-EMB_SCALE, EMB_SCALE, shape).astype(np.float32)
        else:
            out[name] = np.zeros(shape, np.float32)
    return out


def _dense(w, name: str, x: torch.Tensor) -> torch.Tensor:
    return x @ w[f"gnn.{name}.kernel"] + w[f"gnn.{name}.bias"]


def items_side(w, hist_emb: torch.Tensor, rows: torch.Tensor, index: torch.Tensor,
               neighbour_softmax: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The history items and their GAT aggregation over the neighbours (model.py:32-42).

    ``hist_emb`` B × H × d: the history items' rows (the padding row on padded slots);
    ``rows`` B × U × d: the distinct neighbour user vectors a client received; ``index``
    B × H × K: each slot's row in ``rows`` (−1: empty, the code's all-zero neighbour).
    Returns (e: B × H × d, g: B × H × d).

    The neighbour transform W_n n + b_n is applied to the U distinct rows (and to one zero row,
    which empty slots take: W_n·0 + b_n = b_n, as in the code) before they are gathered into the
    H × K slots, and w_g·[e ‖ m] is computed as w_g[:d]·e + w_g[d:]·m: the same numbers as the
    code's per-slot Dense layers, without an H·K·d × d product."""
    e = torch.sigmoid(_dense(w, "hist", hist_emb))
    index = index.long()
    b, _, d = rows.shape
    mrow = _dense(w, "nbr", torch.cat([rows, rows.new_zeros(b, 1, d)], 1))          # B × (U+1) × d
    safe = torch.where(index < 0, torch.full_like(index, rows.shape[1]), index)
    flat = safe.reshape(b, -1)
    m = torch.gather(mrow, 1, flat.unsqueeze(-1).expand(b, flat.shape[1], d)).reshape(*index.shape, d)
    present = index >= 0
    k = w["gnn.gat.kernel"]
    s = F.leaky_relu((e @ k[:d]) + (m @ k[d:]).squeeze(-1) + w["gnn.gat.bias"], LEAKY)   # B × H × K
    if neighbour_softmax:
        a = torch.softmax(s.masked_fill(~present, float("-inf")), -1)
        a = torch.where(present.any(-1, keepdim=True), a, torch.zeros_like(a))   # no neighbour: nothing
    else:
        a = s + (~present).to(s.dtype) * CODE_MASK
    agg = torch.einsum("bhk,bhkd->bhd", a, m)
    return e, _dense(w, "agg", torch.cat([agg, e], -1))


def user_side(w, user: torch.Tensor, e: torch.Tensor, g: torch.Tensor, hist_mask: torch.Tensor,
              history_mask: str = "correct", pool: str = "aggregated",
              drop_user: torch.Tensor | None = None) -> torch.Tensor:
    """The pooled user representation z per row (model.py:43-55).

    ``user`` B × d (the user vector); ``e``, ``g`` from :func:`items_side`; ``hist_mask`` B × H
    bool (real history item); ``drop_user`` B × R × d dropout multipliers (None: R = 1, no
    dropout). Returns B × R × d."""
    p = torch.sigmoid(_dense(w, "user", user)).unsqueeze(1)                 # B × 1 × d
    if drop_user is not None:
        p = p * drop_user                                                  # B × R × d
    b, r, d = p.shape
    h = g.shape[1]
    k = w["gnn.att.kernel"]                       # w_t·[p ‖ g_h] = w_t[:d]·p + w_t[d:]·g_h: no R × H × 2d tensor
    t = F.leaky_relu((p @ k[:d]) + (g @ k[d:]).squeeze(-1).unsqueeze(1) + w["gnn.att.bias"], LEAKY)   # B × R × H
    real = hist_mask.unsqueeze(1).expand(b, r, h)
    if history_mask == "correct":
        beta = torch.softmax(t.masked_fill(~real, float("-inf")), -1)
        beta = torch.where(real.any(-1, keepdim=True), beta, torch.zeros_like(beta))
    elif history_mask == "reference":
        beta = torch.softmax(t + real.to(t.dtype) * CODE_MASK, -1)
    else:
        raise ValueError(f"history_mask: expected 'correct' or 'reference', got {history_mask!r}")
    x = g if pool == "aggregated" else e
    pooled = torch.einsum("brh,bhd->brd", beta, x)
    return _dense(w, "fuse", torch.cat([pooled, p], -1))


def logits(w, z: torch.Tensor, cand_emb: torch.Tensor, drop_item: torch.Tensor | None = None) -> torch.Tensor:
    """w_o·[z ‖ c] + b_o for ``z`` B × R × d and the candidates' rows ``cand_emb`` B × R × d
    (model.py:45-46, 57); the score is its sigmoid."""
    c = torch.sigmoid(_dense(w, "item", cand_emb))
    if drop_item is not None:
        c = c * drop_item
    return _dense(w, "out", torch.cat([z, c], -1))[..., 0]


def neighbour_tensor(rows: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The code's dense B × H × K × d neighbour tensor (zeros on empty slots, ``expansion.py:49-59``)
    and its mask, from the distinct rows (``rows`` B × U × d) and the slots' indices (``index``
    B × H × K, −1: empty). :func:`items_side` does not need it; it documents the layout."""
    b, _, d = rows.shape
    padded = torch.cat([rows, rows.new_zeros(b, 1, d)], 1)
    safe = torch.where(index < 0, torch.full_like(index, rows.shape[1]), index)
    flat = safe.reshape(b, -1)
    out = torch.gather(padded, 1, flat.unsqueeze(-1).expand(b, flat.shape[1], d))
    return out.reshape(*index.shape, d), index >= 0


def forward(w, user, hist_emb, hist_mask, rows, index, cand_emb, *, neighbour_softmax=True,
            history_mask="correct", pool="aggregated", drop_user=None, drop_item=None) -> torch.Tensor:
    """Logits of B clients on R candidates each (``cand_emb`` B × R × d)."""
    e, g = items_side(w, hist_emb, rows, index, neighbour_softmax)
    if drop_user is None:
        drop_user = torch.ones_like(cand_emb)
    z = user_side(w, user, e, g, hist_mask, history_mask, pool, drop_user)
    return logits(w, z, cand_emb, drop_item)
