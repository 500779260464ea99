"""FedCIA's collaborative information for parameter models (paper §5.2; its ``flalgorithm/fedcia_param.py``).

* item similarity ``C = E Eᵀ`` (M × M) of a client's item embeddings E (M × d), paper §5.2.2;
* its truncated-SVD form for upload (paper §5.4.2): the client sends ``(Vh[:L], S[:L])`` and the
  server rebuilds ``Vh[:L]ᵀ diag(S[:L]) Vh[:L]`` (the code uses Vh on both sides; exact for a
  symmetric PSD C of rank <= L);
* the fine-tuning loss towards the global similarity C_s (paper Eq. 6): the code's
  ``‖EEᵀ − C_s‖_F`` (Frobenius norm, not squared; gradient (X + Xᵀ)E / ‖X‖_F with X = EEᵀ − C_s)
  or the paper's MSE ``mean((EEᵀ − C_s)²)``.
"""

from __future__ import annotations

import numpy as np
import torch


def similarity(e: np.ndarray) -> np.ndarray:
    e = np.asarray(e, np.float32)
    return e @ e.T


def svd_factors(c: np.ndarray, rank: int, solver: str = "full", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(Vh[:L], S[:L]) of ``c`` (float32).

    ``full``: LAPACK's full SVD (the code's ``svd(C_k)``; ≈ 1.5 s at M = 1682).
    ``randomized``: the top-L singular triplets by a seeded randomized range finder (Halko et
    al. 2011, oversampling 16, 4 power iterations), O(M²L); for C = EEᵀ + small noise, whose top
    L singular values stand far above the rest, it agrees with ``full`` to float32 precision in
    the reconstruction (tested).
    """
    c = np.asarray(c, np.float64)
    if solver == "full":
        _, s, vh = np.linalg.svd(c, full_matrices=False)
    elif solver == "randomized":
        g = np.random.default_rng(seed)
        k = min(rank + 16, min(c.shape))
        q, _ = np.linalg.qr(c @ g.standard_normal((c.shape[1], k)))
        for _ in range(4):
            q, _ = np.linalg.qr(c.T @ q)
            q, _ = np.linalg.qr(c @ q)
        _, s, vh = np.linalg.svd(q.T @ c, full_matrices=False)
    else:
        raise ValueError(f"fedcia-svd-solver: expected 'full' or 'randomized', got {solver!r}")
    return vh[:rank].astype(np.float32), s[:rank].astype(np.float32)


def svd_reconstruct(vh: np.ndarray, s: np.ndarray) -> np.ndarray:
    vh = np.asarray(vh, np.float64)
    return ((vh.T * np.asarray(s, np.float64)) @ vh).astype(np.float32)


def finetune_loss(e: torch.Tensor, c_s: torch.Tensor, kind: str) -> torch.Tensor:
    x = e @ e.T - c_s
    if kind == "fro":
        return torch.linalg.norm(x)
    if kind == "mse":
        return (x * x).mean()
    raise ValueError(f"finetune-loss: expected 'fro' or 'mse', got {kind!r}")


def finetune_grad(e: torch.Tensor, c_sym: torch.Tensor, c_sq: float, kind: str) -> tuple[torch.Tensor, float]:
    """Loss and gradient of :func:`finetune_loss` in O(M²d), never forming the M×M residual.

    With X = EEᵀ − C_s, ``c_sym`` = C_s + C_sᵀ and ``c_sq`` = ‖C_s‖²_F:
    ‖X‖²_F = ‖EᵀE‖²_F − tr(Eᵀ c_sym E) + c_sq and (X + Xᵀ)E = 2 E(EᵀE) − c_sym E, so
    ∇‖X‖_F = (X + Xᵀ)E / ‖X‖_F and ∇ mean(X²) = (X + Xᵀ)E · 2/M².
    """
    g = e.T @ e                       # d × d
    ce = c_sym @ e                    # M × d  (the O(M²d) part)
    sq = float((g.double() ** 2).sum() - (e.double() * ce.double()).sum() + c_sq)
    sq = max(sq, 0.0)
    sym = 2 * (e @ g) - ce            # (X + Xᵀ)E
    if kind == "fro":
        norm = sq ** 0.5
        return sym / max(norm, 1e-30), norm
    if kind == "mse":
        m2 = float(e.shape[0]) ** 2
        return sym * (2.0 / m2), sq / m2
    raise ValueError(f"finetune-loss: expected 'fro' or 'mse', got {kind!r}")


def finetune_many(es: list[torch.Tensor], c_s: torch.Tensor, steps: int, lr: float, weight_decay: float,
                  kind: str) -> tuple[list[torch.Tensor], list[float]]:
    """:func:`finetune` of several item tables towards the same C_s at once.

    Tables of equal shape are stacked column-wise into one M × (B·d) matrix, so that the O(M²d)
    product ``c_sym @ E`` is one large matrix product per step instead of B small ones; each table
    keeps its own loss and norm, so the result equals B separate calls (a test checks it).
    """
    c_sym = c_s + c_s.T
    c_sq = float((c_s.double() ** 2).sum())
    out: list[torch.Tensor | None] = [None] * len(es)
    losses = [float("nan")] * len(es)
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(es):
        groups.setdefault(tuple(e.shape), []).append(i)
    for (m, d), idx in groups.items():
        b = len(idx)
        e = torch.stack([es[i] for i in idx]).clone()               # B × M × d
        for _ in range(steps):
            g = e.transpose(1, 2) @ e                                # B × d × d
            ce = (c_sym @ e.transpose(0, 1).reshape(m, b * d)).reshape(m, b, d).transpose(0, 1)
            sq = ((g.double() ** 2).sum((1, 2)) - (e.double() * ce.double()).sum((1, 2)) + c_sq).clamp_min(0.0)
            sym = 2 * (e @ g) - ce
            if kind == "fro":
                norm = sq.sqrt()
                grad = sym / norm.clamp_min(1e-30).to(sym.dtype)[:, None, None]
                vals = norm
            elif kind == "mse":
                grad = sym * (2.0 / float(m) ** 2)
                vals = sq / float(m) ** 2
            else:
                raise ValueError(f"finetune-loss: expected 'fro' or 'mse', got {kind!r}")
            e -= lr * (grad + weight_decay * e)
        for j, i in enumerate(idx):
            out[i] = e[j]
            losses[i] = float(vals[j])
    return out, losses  # type: ignore[return-value]


def finetune(e: torch.Tensor, c_s: torch.Tensor, steps: int, lr: float, weight_decay: float,
             kind: str) -> tuple[torch.Tensor, float]:
    """``steps`` plain SGD steps (torch.optim.SGD semantics: grad + wd·E) of E towards C_s."""
    c_sym = c_s + c_s.T
    c_sq = float((c_s.double() ** 2).sum())
    e = e.clone()
    loss = float("nan")
    for _ in range(steps):
        grad, loss = finetune_grad(e, c_sym, c_sq, kind)
        e -= lr * (grad + weight_decay * e)
    return e, loss
