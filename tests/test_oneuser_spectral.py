"""One-user clients inside LPSFed's spectral subgraphs (``harness = one-user``, ``partition =
spectral``): the silo harness's data, every user its own client, negatives and ranking within its
subgraph's items, the report per subgraph and their unweighted mean."""

from __future__ import annotations

import json

import numpy as np
import pytest

from client_app.base import LogicalClient
from corolla.config import resolve
from corolla.data.federation import build_federation
from corolla.keys import ConfigError
from server_app.app import client_stats
from server_app.evaluation import pool_metrics
from server_app.app import run_federation
from strategies.base import ClientResult
from tests.inproc import InProcessTransport, partitions

SMALL = {"dataset": "ml-100k", "split": "ratio", "split-ratios": "0.81,0.09,0.1", "num-clients": 3,
         "num-rounds": 1, "eval-every": 1}


def _cfg(**over):
    return resolve("pfedrec-lpsfed-gowalla", {**SMALL, **over})


def test_the_users_keep_the_silo_harness_data_and_their_subgraph(data_dir):
    cfg = _cfg()
    silo = build_federation({**cfg, "harness": "silo"}, data_dir, use_cache=False)
    one = build_federation(cfg, data_dir, use_cache=False)
    assert one.num_clients == one.n_users and [c.tolist() for c in one.clients[:3]] == [[0], [1], [2]]
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(one.indices[s], silo.indices[s])   # the same dropped interactions
    for g, users in enumerate(silo.clients):
        assert (one.client_group[users] == g).all()
    u = int(silo.clients[1][0])
    c = LogicalClient(cfg, one, u, one.clients[u], None)
    np.testing.assert_array_equal(c.item_mask, silo.item_owner == 1)
    assert c.item_mask is one.owned_items(1) and not c.item_mask.flags.writeable   # one mask per subgraph
    assert one.rows("train", u).size and c.item_mask[one.rows("train", u)].all()


def test_the_report_is_per_subgraph():
    res = {0: ClientResult({}, {"test/recall@20": [1.0], "valid/recall@20": [0.0]}),
           1: ClientResult({}, {"test/recall@20": [0.0], "valid/recall@20": [0.0]}),
           2: ClientResult({}, {"test/recall@20": [0.5], "valid/recall@20": [1.0]})}
    out = pool_metrics(res, [20], True, {0: 0, 1: 0, 2: 1})["test"]
    assert out["metrics"]["recall@20"] == pytest.approx(0.5)                 # over users
    assert out["per_client"]["0"]["recall@20"] == pytest.approx(0.5) and out["per_client"]["0"]["users"] == 2
    assert out["unweighted_mean"]["recall@20"] == pytest.approx(0.5)        # (0.5 + 0.5) / 2
    plain = pool_metrics(res, [20], True)["test"]                             # silo: per client
    assert set(plain["per_client"]) == {"0", "1", "2"}
    stats = client_stats({0: {"users": 1, "train": 5, "items": 7, "group": 0, "node": 9},
                          1: {"users": 1, "train": 3, "items": 7, "group": 0, "node": 8}})
    assert stats == {"0": {"clients": 2, "users": 2, "train": 8, "items": 7, "nodes": [9, 8]}}


def test_a_run_reports_its_subgraphs(tmp_path, data_dir):
    sets = " ".join(f"{k}={v}" for k, v in SMALL.items())
    t = InProcessTransport(partitions(1, {"data-dir": data_dir}))
    run_federation(t, {"preset": "pfedrec-lpsfed-gowalla", "set": sets, "out-dir": str(tmp_path), "data-dir": data_dir})
    last = json.loads((tmp_path / "rounds.jsonl").read_text().splitlines()[-1])
    assert set(last["per_client"]) == {"0", "1", "2"}
    assert sum(v["users"] for v in last["per_client"].values()) == last["users"]["test"]
    assert last["unweighted_mean"]["recall@20"] == pytest.approx(
        np.mean([v["recall@20"] for v in last["per_client"].values()]))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["data"]["clients"]) == {"0", "1", "2"}


def test_spectral_one_user_needs_full_ranking():
    with pytest.raises(ConfigError, match="protocol"):
        _cfg(protocol="loo", split="loo", **{"eval-negatives": 99})


@pytest.mark.parametrize("rank", ["own", "all"])
def test_rank_items_ranks_among_the_subgraphs_items_or_all(data_dir, rank):
    """``rank-items``: the same scores ranked among the user's subgraph's items ('own') or among
    every item ('all'), against a brute-force Recall@20 (train items out, for test valid too)."""
    import torch

    from client_app.oneuser import evaluate_full_rank

    cfg = _cfg(**{"rank-items": rank})
    fed = build_federation(cfg, data_dir, use_cache=False)
    users = [int(fed.clients[g][0]) for g in range(3)] + [int(u) for u in range(5, 60, 7)]
    clients = [LogicalClient(cfg, fed, u, fed.clients[u], None) for u in users]
    table = np.random.default_rng(3).standard_normal((fed.n_users, fed.n_items))
    got = evaluate_full_rank(clients, lambda rows, items: torch.as_tensor(table[[users[int(r)] for r in rows]]))
    for c, u, out in zip(clients, users, got):
        s = table[u].copy()
        s[fed.rows("train", u)] = s[fed.rows("valid", u)] = -np.inf
        if rank == "own":
            s[~c.item_mask] = -np.inf
        top = np.argsort(-s, kind="stable")[:20]
        want = np.isin(fed.rows("test", u), top).sum() / len(fed.rows("test", u))
        assert out["test/recall@20"] == [pytest.approx(want)], u
    others = sum(int((~c.item_mask).sum()) for c in clients)
    assert others > 0   # the users' subgraphs do not hold every item: 'all' ranks more candidates


def test_rank_items_all_needs_the_spectral_partition():
    with pytest.raises(ConfigError, match="rank-items.*partition='user'"):
        resolve("pfedrec-ml100k", {"rank-items": "all"})
