"""The one-user harness's full-ranking evaluation (``protocol = full-rank``,
``client_app.oneuser.evaluate_full_rank``): every client's scores on every item, its train items
masked (and its valid items for test), against a brute-force ranking written out here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import client_app.oneuser as OU
from corolla.data.federation import Federation, _csr


def tiny_federation(n_users=7, n_items=15, seed=0):
    g = np.random.default_rng(seed)
    users, items, labels = [], [], []
    for u in range(n_users):
        its = g.choice(n_items, size=8, replace=False)
        lab = np.array([0, 0, 0, 0, 1, 1, 2, 2])          # 4 train, 2 valid, 2 test
        if u == 3:
            lab[6:] = 0                                    # a user without test items
        users += [u] * 8
        items += its.tolist()
        labels += lab.tolist()
    users, items, labels = map(np.asarray, (users, items, labels))
    indptr, indices = {}, {}
    for code, s in ((0, "train"), (1, "valid"), (2, "test")):
        m = labels == code
        indptr[s], indices[s] = _csr(users[m], items[m], n_users)
    return Federation(n_users, n_items, indptr, indices, [np.array([u]) for u in range(n_users)])


def brute(scores_row, exclude, truth, k):
    order = [i for i in sorted(range(len(scores_row)), key=lambda i: (-scores_row[i], i)) if i not in exclude][:k]
    hits = [1 if i in truth else 0 for i in order]
    first = next((r for r, h in enumerate(hits) if h), None)
    dcg = sum(h / np.log2(r + 2) for r, h in enumerate(hits))
    idcg = sum(1 / np.log2(r + 2) for r in range(min(len(truth), k)))
    return {"hr": float(any(hits)), "recall": sum(hits) / len(truth), "precision": sum(hits) / k,
            "mrr": 0.0 if first is None else 1 / (first + 1), "ndcg": dcg / idcg}


@pytest.mark.parametrize("chunk", [2, 64])
def test_full_rank_metrics_equal_a_brute_force_ranking(monkeypatch, chunk):
    monkeypatch.setattr(OU, "FULL_RANK_CHUNK", chunk)
    fed = tiny_federation()
    cfg = {"protocol": "full-rank", "compat-fedcia-metrics": False, "test-mask-valid": True, "rank-items": "own",
           "compat-sigmoid-ranking": False}
    S = np.random.default_rng(1).normal(size=(fed.n_users, fed.n_items)).astype(np.float32)
    S[0, :3] = S[0, 3]                                     # ties are broken by item id
    clients = [SimpleNamespace(fed=fed, cfg=cfg, ks=[3, 5], device="cpu", users=np.array([u]), item_mask=None)
               for u in range(fed.n_users)]
    # client j hosts user (j + 2) % n, so positions and users differ
    clients = clients[2:] + clients[:2]
    calls = []

    def score(idx, items):
        calls.append(len(idx))
        u = np.array([int(clients[j].users[0]) for j in idx.tolist()])
        return S[u[:, None], items.numpy()]

    out = OU.evaluate_stacked(clients, score)
    assert max(calls) <= chunk
    for j, c in enumerate(clients):
        u = int(c.users[0])
        for split in ("valid", "test"):
            truth = set(fed.rows(split, u).tolist())
            if not truth:
                assert not any(k.startswith(split) for k in out[j]), (u, split)
                continue
            exclude = set(fed.rows("train", u).tolist())
            if split == "test":
                exclude |= set(fed.rows("valid", u).tolist())
            for k in (3, 5):
                want = brute(S[u].astype(np.float64), exclude, truth, k)
                for name, v in want.items():
                    assert out[j][f"{split}/{name}@{k}"] == [pytest.approx(v, abs=1e-12)], (u, split, name, k)


def test_full_rank_masks_items_the_client_does_not_own():
    fed = tiny_federation()
    cfg = {"protocol": "full-rank", "compat-fedcia-metrics": True, "test-mask-valid": True, "rank-items": "own",
           "compat-sigmoid-ranking": False}
    S = np.zeros((fed.n_users, fed.n_items), np.float32)
    u = 0
    test = fed.rows("test", u)
    S[u, test] = 5.0                                        # the test items on top ...
    owned = np.ones(fed.n_items, bool)
    owned[test] = False                                     # ... but not the client's to recommend
    c = SimpleNamespace(fed=fed, cfg=cfg, ks=[5], device="cpu", users=np.array([u]), item_mask=owned)
    out = OU.evaluate_stacked([c], lambda idx, items: torch.as_tensor(S[[u]][:, items.numpy()[0]]))
    assert out[0]["test/hr@5"] == [0.0]
    assert "test/fedcia:ndcg@5" in out[0]
    c.item_mask = None
    out = OU.evaluate_stacked([c], lambda idx, items: torch.as_tensor(S[[u]][:, items.numpy()[0]]))
    assert out[0]["test/hr@5"] == [1.0] and out[0]["test/recall@5"] == [1.0]
