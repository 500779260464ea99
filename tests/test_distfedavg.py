"""Dist-FedAvg and the row-wise baselines: every rule against a hand example, the α schedules, the
matching party, the block-diagonal training against one user at a time, and runs in process."""

import json

import numpy as np
import pytest
import torch

from corolla import rowagg
from corolla.expansion import MatchingParty
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions
from tests.tolerance import assert_far_beyond, f32_train_atol

SMALL = "num-rounds=2 min-user-interactions=200 clients-per-round=6 local-epochs=3"


def test_alpha_schedules_by_hand():
    assert rowagg.alpha(7, "fixed", fixed=0.3) == 0.3
    assert rowagg.alpha(25, "arithmetic", 1.0, 0.2, 0.1, 10) == pytest.approx(0.8)      # 1 - 0.1·⌊25/10⌋
    assert rowagg.alpha(95, "arithmetic", 1.0, 0.2, 0.1, 10) == pytest.approx(0.2)      # floored at α_min
    assert rowagg.alpha(25, "geometric", 1.0, 0.1, 0.5, 10) == pytest.approx(0.25)      # 0.5^2
    assert rowagg.alpha(3, "geometric", 1.0, 0.1, 0.5, 1, warmup=5) == 1.0              # warm-up
    with pytest.raises(ValueError, match="alpha-schedule"):
        rowagg.alpha(1, "cosine")


def test_baseline_rules_by_hand():
    prev = np.zeros((3, 2), np.float32)
    rows = {1: [(4, np.array([1.0, 0.0])), (2, np.array([3.0, 2.0])), (9, np.array([8.0, 4.0]))]}
    w = {2: 1.0, 4: 3.0, 9: 0.0}
    np.testing.assert_allclose(rowagg.aggregate_rows("fedavg", prev, rows, w)[1], [(3 + 3) / 4, 2 / 4])
    np.testing.assert_allclose(rowagg.aggregate_rows("simpleavg", prev, rows)[1], [4.0, 2.0])
    np.testing.assert_allclose(rowagg.aggregate_rows("fedmedian", prev, rows)[1], [3.0, 2.0])
    out = rowagg.aggregate_rows("fedmedian", prev, rows)
    np.testing.assert_array_equal(out[[0, 2]], prev[[0, 2]])                  # rows nobody holds
    # FedAtt: att = softmax(‖prev - w_c‖), w = prev - ε Σ att (prev - w_c)
    d = np.array([np.hypot(3, 2), 1.0, np.hypot(8, 4)])                      # clients 2, 4, 9
    att = np.exp(d - d.max()) / np.exp(d - d.max()).sum()
    copies = np.array([[3.0, 2.0], [1.0, 0.0], [8.0, 4.0]])
    np.testing.assert_allclose(rowagg.aggregate_rows("fedatt", prev, rows, fedatt=(0.5, 2.0, 0.0))[1],
                               0.5 * (att[:, None] * copies).sum(0), rtol=1e-6)
    np.testing.assert_allclose(rowagg.aggregate_rows("fedatt", prev, rows, fedatt=(0.5, 2.0, 0.0), fedatt_weights="distance")[1],
                               0.5 * (d[:, None] * copies).sum(0) / d.sum(), rtol=1e-6)


@pytest.mark.parametrize("mode", ["A", "B", "C"])
def test_dist_fedavg_user_row_by_hand(mode):
    prev = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [0.0, 1.0]])     # users 0..3; clients = anchors
    # user 0's copies: from its own client 0 and from clients 1 and 2 that expanded it
    copies = {0: [(0, np.array([1.0, 1.0])), (1, np.array([2.0, 0.0])), (2, np.array([0.0, 4.0]))]}
    anchors = {0: 0, 1: 1, 2: 2}
    got = rowagg.aggregate_rows("distfedavg", prev.astype(np.float32), copies, anchors=anchors, a_r=0.25,
                                mode=mode, p=2.0, eps=0.0)[0]
    if mode == "B":     # ‖E_0 - E_anchor‖ on the previous table: 5 and 10
        d = np.array([5.0, 10.0])
    elif mode == "A":   # ‖copy - E_0‖: 2 and 4
        d = np.array([2.0, 4.0])
    else:               # ‖copy - E_anchor‖: ‖(2,0)-(3,4)‖ and ‖(0,4)-(6,8)‖
        d = np.array([np.hypot(1, 4), np.hypot(6, 4)])
    w = 1 / d
    bar = (w[0] * np.array([2.0, 0.0]) + w[1] * np.array([0.0, 4.0])) / w.sum()
    np.testing.assert_allclose(got, 0.25 * np.array([1.0, 1.0]) + 0.75 * bar, rtol=1e-6)
    # not sampled itself: α = 0, only the expanded copies; no expanded copy: its own
    only_others = {0: copies[0][1:]}
    np.testing.assert_allclose(rowagg.aggregate_rows("distfedavg", prev.astype(np.float32), only_others,
                                                     anchors=anchors, a_r=0.25, mode=mode, eps=0.0)[0], bar, rtol=1e-6)
    own = {0: copies[0][:1]}
    np.testing.assert_allclose(rowagg.aggregate_rows("distfedavg", prev.astype(np.float32), own, anchors=anchors,
                                                     a_r=0.25, mode=mode)[0], [1.0, 1.0])
    assert rowagg.minkowski(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), 1.0)[0] == pytest.approx(7.0)


def test_matching_party_neighbours_edges_and_caps():
    mp = MatchingParty(0, 0, 0)
    mp.register(0, np.array([10, 20]))   # hashed items per client
    mp.register(1, np.array([20, 30]))
    mp.register(2, np.array([10, 20, 30]))
    m = mp.match()
    users, edges = m[0]
    assert users.tolist() == [1, 2]
    # edges: (1 + index of the neighbour in U_c, index of the item in the client's list)
    assert sorted(map(tuple, edges.tolist())) == [(1, 1), (2, 0), (2, 1)]
    capped = MatchingParty(0, 1, 1)
    for c, h in mp.items_of.items():
        capped.register(c, h)
    for c, (u, e) in capped.match().items():
        assert len(set(e[:, 1].tolist())) <= 1 and len(u) <= 1


def test_block_training_equals_one_user_at_a_time():
    from client_app.distfedavg import train_block

    g = np.random.default_rng(0)
    cfg = {"lr": 0.01, "local-epochs": 4, "gcn-layers": 2, "weight-decay": 1e-4, "seed": 0}

    class C:   # a stand-in with what train_block reads of a client
        def __init__(self, cid):
            self.cid = cid

    graphs, urows, irows, trains, clients = [], [], [], [], []
    for c in range(4):
        nu, npos, nneg = int(g.integers(2, 6)), int(g.integers(2, 7)), 5
        e_u = np.concatenate([np.zeros(npos, np.int64), g.integers(1, nu, 6)])
        e_i = np.concatenate([np.arange(npos), g.integers(0, npos, 6)])
        graphs.append((nu, npos + nneg, e_u, e_i))
        urows.append(g.normal(size=(nu, 8)).astype(np.float32) * 0.1)
        irows.append(g.normal(size=(npos + nneg, 8)).astype(np.float32) * 0.1)
        trains.append(np.arange(npos))
        clients.append(C(c))
    dev = torch.device("cpu")
    bu, bi, bl = train_block(graphs, urows, irows, trains, clients, 1, cfg, dev)
    atol = f32_train_atol(cfg["local-epochs"], cfg["lr"], 64)
    for c in range(4):
        u1, i1, l1 = train_block([graphs[c]], [urows[c]], [irows[c]], [trains[c]], [clients[c]], 1, cfg, dev)
        np.testing.assert_allclose(bu[c], u1[0], rtol=0, atol=atol)
        np.testing.assert_allclose(bi[c], i1[0], rtol=0, atol=atol)
        assert bl[c] == pytest.approx(l1[0], abs=atol)
    wrong, _, _ = train_block([graphs[0]], [urows[0]], [irows[0]], [trains[0]], [clients[0]], 1,
                              {**cfg, "lr": 0.011}, dev)
    assert_far_beyond(float(np.abs(wrong[0] - bu[0]).max()), atol, what="lr x 1.1")


def _run(tmp_path, name, data_dir, nodes, extra="", preset="distfedavg-ml100k"):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    return s, [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]


def test_dist_fedavg_rows_and_node_invariance(tmp_path, data_dir):
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, rb = _run(tmp_path, "three", data_dir, 3)
    assert a["metrics"] == b["metrics"] and a["bytes_up"] == b["bytes_up"]
    assert [p["name"] for p in ra[0]["phases"]] == ["expand", "match", "train"]
    assert [p["name"] for p in ra[1]["phases"]] == ["train+evaluate", "evaluate"]
    assert ra[0]["train"]["clients"] == 6 and a["metrics"]["hr@10"] >= 0


@pytest.mark.parametrize("method", ["fedavg", "fcf", "fedmedian", "fedatt"])
def test_row_baselines_run(tmp_path, data_dir, method):
    s, _ = _run(tmp_path, method, data_dir, 2, f"method={method}")
    assert s["status"] == "completed" and s["method"] == method
