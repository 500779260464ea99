"""The model factory: a run config -> a model, and the deterministic initialisations every
method shares. Kept apart from ``corolla.models.base`` (the interface the models implement) so
that the models import the base and the factory imports the models, without a cycle."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from corolla.config import int_list
from corolla.models.base import RecModel
from corolla.models.lightgcn import LightGCN
from corolla.models.mf import MF
from corolla.models.ncf import NCF
from corolla.util import stable_seed


def build_model(cfg: dict[str, Any], n_users: int, n_items: int) -> RecModel:
    """The model ``cfg["model"]`` for ``n_users`` users (rows of the private user table)."""
    if cfg["model"] == "mf":
        return MF(n_users, n_items, cfg["dim"], cfg["loss"], cfg["weight-decay"])
    if cfg["model"] == "lightgcn":
        return LightGCN(n_users, n_items, cfg["dim"], cfg["gcn-layers"], cfg["loss"], cfg["weight-decay"])
    return NCF(n_users, n_items, cfg["dim"], int_list(cfg, "mlp-layers"), cfg["loss"], cfg["weight-decay"],
               cfg.get("mlp-reg", "none"), cfg.get("ncf-arch", "mlp"))


def init_params(model: RecModel, std: float, seed: int, names: list[str], mlp_init: str = "xavier") -> None:
    """Initialise ``names`` deterministically: embeddings N(0, std²); Linear layers Xavier-uniform
    weights and zero biases (``xavier``) or PyTorch's default U(±1/√fan_in) for both
    (``torch-default``, as the FedCA code's untouched ``nn.Linear``)."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            p = params[n]
            if n.startswith(("user.", "item.")):
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif mlp_init == "torch-default":
                fan_in = p.shape[1] if p.dim() == 2 else params[n[:-len("bias")] + "weight"].shape[1]
                bound = 1.0 / float(np.sqrt(fan_in))
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            elif p.dim() == 2:
                bound = float(np.sqrt(6.0 / (p.shape[0] + p.shape[1])))
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            else:
                p.zero_()


def shared_init(cfg: dict[str, Any], n_items: int, cid: int | None = None) -> dict[str, np.ndarray]:
    """The shared parameters every logical client and the server start from (same seed -> same);
    with ``cid``, a draw of their own for that client alone (``local-init = per-client``)."""
    m = build_model(cfg, 1, n_items)
    seed = stable_seed(cfg["seed"], "shared-init") if cid is None else stable_seed(cfg["seed"], "client-init", cid)
    init_params(m, cfg["init-std"], seed, m.shared_names(), cfg.get("mlp-init", "xavier"))
    return m.get_arrays(m.shared_names())


def user_init(model: RecModel, cfg: dict[str, Any], cid: int) -> None:
    init_params(model, cfg["init-std"], stable_seed(cfg["seed"], "user-init", cid), ["user.weight"])


def one_user_init(cfg: dict[str, Any], cid: int) -> np.ndarray:
    """The 1 × d user vector a one-user client starts with (``client_app.pmf.OneUserClient``:
    seeded per client, or one shared vector with ``user-init = shared``): what a server that
    clusters user vectors (PerFedRec, FedFast) holds for a client it has not heard from yet."""
    key = "shared" if cfg.get("user-init") == "shared" else cid
    g = torch.Generator().manual_seed(stable_seed(cfg["seed"], "user-init", key))
    return (torch.randn((1, int(cfg["dim"])), generator=g) * cfg["init-std"]).numpy().astype(np.float32)
