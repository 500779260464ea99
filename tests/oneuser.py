"""A tiny one-user training problem for the batched-trainer tests (``corolla.models.stacked``):
B users, each its own copy of one model (a random user vector), train positives, 4 negatives
each from the items it did not interact with, and the row order of every epoch."""

from __future__ import annotations

import numpy as np
import torch

from corolla.models.factory import build_model
from corolla.models.stacked import epoch_permutations, training_rows


def one_user_problem(cfg: dict, users: int, m_items: int, seed: int, positives: tuple[int, int], epochs: int):
    """(states, samples, perms, positives) of ``users`` one-user clients of ``cfg``'s model over
    ``m_items`` items; each has ``positives[0] <= n < positives[1]`` train positives."""
    g = np.random.default_rng(seed)
    torch.manual_seed(seed)
    template = build_model(cfg, 1, m_items)
    states, samples, perms, pos_lists = [], [], [], []
    for _ in range(users):
        st = {k: v.detach().numpy().copy() for k, v in template.named_parameters()}
        st["user.weight"] = g.normal(size=(1, cfg["dim"])).astype(np.float32)
        states.append(st)
        pos = g.choice(m_items, size=int(g.integers(*positives)), replace=False)
        s = training_rows(pos, np.setdiff1d(np.arange(m_items), pos), 4, g)
        samples.append(s)
        perms.append(epoch_permutations(g, len(s["item"]), epochs))
        pos_lists.append(pos)
    return states, samples, perms, pos_lists
