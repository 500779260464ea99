"""Full ranking over row-upload states: scoring the global table once per client (the
``table_scorer`` path of ``client_app.oneuser.rows_scorer``) gives the per-client gathered
scores up to float32 rounding, the client's own trained rows included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client_app.oneuser import rows_scorer
from client_app.pfedrec import pfedrec_scorer, pfedrec_table_probs_of
from client_app.pmf import mf_table_scorer, stacked_scorer


def _states(kind: str, n_clients=5, m=37, d=6, h=4, seed=0):
    g = np.random.default_rng(seed)
    out = []
    for j in range(n_clients):
        ids = np.sort(g.choice(m, size=j * 3, replace=False)).astype(np.int64)    # client 0: none
        st = {"item.ids": ids, "item.weight": g.standard_normal((len(ids), d)).astype(np.float32)}
        if kind == "mf":
            st["user.weight"] = g.standard_normal((1, d)).astype(np.float32)
        else:
            width = d
            if kind == "pfedrec-tower":
                st["tower.0.weight"] = g.standard_normal((h, d)).astype(np.float32)
                st["tower.0.bias"] = g.standard_normal(h).astype(np.float32)
                width = h
            st["affine.weight"] = g.standard_normal((1, width)).astype(np.float32)
            st["affine.bias"] = g.standard_normal(1).astype(np.float32)
        out.append(st)
    return out, g.standard_normal((m, d)).astype(np.float32)


@pytest.mark.parametrize("kind", ["mf", "pfedrec", "pfedrec-tower"])
def test_the_table_path_equals_the_gathered_scores(kind):
    trained, base = _states(kind)
    make, table = (stacked_scorer, mf_table_scorer) if kind == "mf" else (pfedrec_scorer, pfedrec_table_probs_of)
    slow = rows_scorer(trained, base, "cpu", make)
    fast = rows_scorer(trained, base, "cpu", make, table)
    idx = torch.tensor([4, 0, 2])
    items = torch.arange(len(base)).expand(3, -1)
    a, b = slow(idx, items), fast(idx, items)
    assert a.shape == b.shape == (3, len(base))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    own = trained[4]["item.ids"]                       # the client's own rows, not the global table's
    assert not np.allclose(b[0, own], rows_scorer([{**trained[4], "item.ids": own[:0],
                                                    "item.weight": trained[4]["item.weight"][:0]}],
                                                  base, "cpu", make, table)(torch.tensor([0]), items[:1])[0, own])
    # leave-one-out candidates (not every item) take the gathered path
    cand = torch.tensor([[3, 1, 2], [0, 5, 9], [7, 8, 6]])
    np.testing.assert_array_equal(slow(idx, cand), fast(idx, cand))
