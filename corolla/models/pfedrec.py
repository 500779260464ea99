"""PFedRec's client model (Zhang et al., IJCAI'23; PF mlp.py:5-20, docs/methods/ufgraphfr.md).

An item table ``item`` (M × d) and a personal score function on the item embedding, sigmoid
output; there is no user embedding — the score function is the user's personal part. The code's
score function is ``affine`` = Linear(d, 1). ``layers`` (the ``pfedrec-score-layers`` key) puts
ReLU layers ``tower.0``, ``tower.1``, … of those widths before it: FedCA's NCF-backbone rows of
PFedRec read ``16,8``, the NCF tower of FedCA's code (``model.py:66-78``: 32 → 16 → 8 → 1) over the
32-d item embedding (docs/methods/fedca.md, "PFedRec on the NCF backbone"). The batched trainer is
:func:`corolla.models.stacked.train_pfedrec_stacked`; this class is its one-user reference
(:func:`corolla.models.stacked.train_pfedrec_one`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from corolla.util import stable_seed


def tower_names(layers: tuple[int, ...]) -> list[str]:
    """The score function's hidden layers in order (``tower.0``, ``tower.1``, …)."""
    return [f"tower.{j}" for j in range(len(layers))]


class PFedRecModel(nn.Module):
    def __init__(self, n_items: int, dim: int, layers: tuple[int, ...] = ()):
        super().__init__()
        self.item = nn.Embedding(n_items, dim)
        widths = (dim, *layers)
        self.tower = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.affine = nn.Linear(widths[-1], 1)

    def score_parameters(self):
        return [*self.tower.parameters(), *self.affine.parameters()]

    def forward(self, items: torch.Tensor) -> torch.Tensor:   # logits
        x = self.item(items)
        for layer in self.tower:
            x = torch.relu(layer(x))
        return self.affine(x).squeeze(-1)

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {n: p.detach().cpu().numpy().copy() for n, p in self.named_parameters()}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        params = dict(self.named_parameters())
        with torch.no_grad():
            for k, v in arrays.items():
                if k not in params or tuple(params[k].shape) != tuple(v.shape):
                    raise ValueError(f"PFedRec parameter '{k}': unexpected name or shape {tuple(v.shape)}")
                params[k].copy_(torch.from_numpy(np.ascontiguousarray(v)))


def pfedrec_init(n_items: int, dim: int, std: float, seed: int, layers: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """The shared initial model: item table N(0, std²) (PyTorch's default for std=1), each Linear of
    the score function as PyTorch's default Linear init (uniform ±1/√fan-in), from one seed. The
    table and ``affine`` are drawn first (``layers`` = () draws exactly what it always drew), the
    tower's layers after them."""
    g = torch.Generator().manual_seed(stable_seed(seed, "pfedrec-init"))
    widths = (dim, *layers)
    out = {"item.weight": (torch.randn(n_items, dim, generator=g) * std).numpy()}
    bound = 1.0 / np.sqrt(widths[-1])
    out["affine.weight"] = ((torch.rand(1, widths[-1], generator=g) * 2 - 1) * bound).numpy()
    out["affine.bias"] = ((torch.rand(1, generator=g) * 2 - 1) * bound).numpy()
    for name, a, b in zip(tower_names(layers), widths[:-1], widths[1:]):
        bound = 1.0 / np.sqrt(a)
        out[f"{name}.weight"] = ((torch.rand(b, a, generator=g) * 2 - 1) * bound).numpy()
        out[f"{name}.bias"] = ((torch.rand(b, generator=g) * 2 - 1) * bound).numpy()
    return out
