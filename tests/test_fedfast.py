"""FedFast (docs/methods/fedfast.md): ActvSAMP and ActvAGG against hand computation (there is no
authors' code), and runs on FedCA's harness.

The hand cases are small enough to write every number down; the server computes in float64 and
stores float32, so the comparisons are to 1e-6 (float32 rounding of numbers of order 1), exact
where nothing is computed (copied rows and vectors, unmoved rows).
"""

import json

import numpy as np
import pytest

from corolla.kmeans import kmeans
from server_app.app import run_federation
from strategies.base import ClientResult, CorollaStrategy
from strategies.fedfast import FedFast, active_items, propagate, row_weights
from tests.hand_cfg import ONE_USER_DEFAULTS
from tests.inproc import InProcessTransport, partitions

BASE = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, -2.0], [3.0, 0.5]], np.float32)
A = BASE.copy()
A[0] = [1.0, 2.0]          # moved by A only: |Δ|₁ = 3
A[1] = [2.0, 1.0]          # moved by A and B: |Δ|₁ = 1
B = BASE.copy()
B[1] = [1.0, 4.0]          # |Δ|₁ = 3
C = BASE.copy()            # C moved nothing


def test_row_weights_by_hand():
    assert row_weights(A, BASE, "l1").tolist() == [3.0, 1.0, 0.0, 0.0]
    assert row_weights(A, BASE, "l2") == pytest.approx([np.sqrt(5.0), 1.0, 0.0, 0.0])
    assert row_weights(B, BASE, "count").tolist() == [0.0, 1.0, 0.0, 0.0]


def test_item_rows_are_averaged_by_the_size_of_their_change():
    got = active_items([A, B, C], BASE, "l1")
    assert np.array_equal(got[0], A[0])                                    # one delegate moved it
    np.testing.assert_allclose(got[1], (1 * A[1] + 3 * B[1]) / 4, atol=1e-6)   # [1.25, 3.25]
    assert np.array_equal(got[2:], BASE[2:])                              # nobody moved them
    np.testing.assert_allclose(active_items([A, B, C], BASE, "count")[1], (A[1] + B[1]) / 2, atol=1e-6)
    # the third-party rule (BalFed utils.py:119-136, re-typed): w[i] = Σ_k q_k[i] w_k[i] / Σ_k q_k[i]
    q = np.stack([np.abs(t - BASE).sum(1) for t in (A, B, C)])
    ref = BASE.astype(np.float64).copy()
    for i in range(len(BASE)):
        if q[:, i].sum() > 0:
            ref[i] = sum(q[k, i] * t[i] for k, t in enumerate((A, B, C))) / q[:, i].sum()
    np.testing.assert_allclose(got, ref, atol=1e-6)


def test_user_updates_propagate_within_clusters():
    users = {0: np.array([[1.0, 1.0]], np.float32), 1: np.array([[0.0, 0.0]], np.float32),
             2: np.array([[5.0, 5.0]], np.float32), 3: np.array([[9.0, 9.0]], np.float32),
             4: np.array([[2.0, 0.0]], np.float32)}
    old = {0: np.array([[0.0, 0.0]]), 4: np.array([[1.0, 1.0]])}   # delegates 0 and 4 (already copied in users)
    labels = {0: 0, 1: 0, 2: 1, 3: 1, 4: 0}
    got = propagate(users, old, labels, 0.5)
    assert np.array_equal(got[0], users[0]) and np.array_equal(got[4], users[4])   # delegates: their own
    # cluster 0's mean delegate update: ((1,1) + (1,−1)) / 2 = (1, 0); user 1 gets 0.5·(1, 0)
    np.testing.assert_allclose(got[1], [[0.5, 0.0]], atol=1e-7)
    assert np.array_equal(got[2], users[2]) and np.array_equal(got[3], users[3])   # no delegate in cluster 1
    assert all(np.array_equal(propagate(users, old, labels, 0.0)[c], users[c]) for c in users)


def _strategy(extra=None):
    cfg = {**ONE_USER_DEFAULTS, "method": "fedfast", "harness": "one-user", "model": "mf", "dim": 2, "seed": 0, "init-std": 1.0,
           "clients-per-round": 3, "fraction-train": 1.0, "fedfast-clusters": 2,
           "fedfast-kmeans-init": 1, "fedfast-gamma": 0.5, "fedfast-gamma-decay": 0.5, "fedfast-item-weight": "l1",
           "fedfast-sampling": "active", "fedfast-eval": "global", **(extra or {})}
    s = FedFast(cfg)
    s.G = {"item.weight": BASE.copy()}
    s.U = {c: np.array([[float(c), float(c % 2)]], np.float32) for c in range(6)}
    return s


def test_a_round_of_actvagg_by_hand():
    s = _strategy()
    before = {c: v.copy() for c, v in s.U.items()}
    ups = {1: (A, [[4.0, 0.0]], 10), 2: (B, [[2.0, 3.0]], 30), 5: (C, [[5.0, 2.0]], 20)}
    for c, (t, u, n) in ups.items():
        s.accept("train", 2, c, ClientResult({"item.weight": t, "user.weight": np.array(u, np.float32)},
                                             {"num-examples": n}))
    mets = s.aggregate_phase("train", 2, {c: ClientResult({}, {}) for c in ups})
    np.testing.assert_allclose(s.G["item.weight"], active_items([A, B, C], BASE, "l1"), atol=0)
    assert mets["moved-rows"] == 2
    for c, (_, u, _) in ups.items():
        assert np.array_equal(s.U[c], np.array(u, np.float32))
    # re-clustered after the copy, then γ_2 = 0.5 · 0.5 = 0.25 of the cluster's mean delegate update
    x = np.concatenate([before[c] if c not in ups else np.array(ups[c][1], np.float32) for c in range(6)])
    lab = kmeans(x, 2, 0, 1)
    assert [s.labels[c] for c in range(6)] == lab.tolist()
    for c in (0, 3, 4):
        dels = [d for d in ups if lab[d] == lab[c]]
        want = before[c] + (0.25 * np.mean([np.array(ups[d][1]) - before[d] for d in dels], 0) if dels else 0)
        np.testing.assert_allclose(s.U[c], want, atol=1e-6)
    # downloads: the global table once, each client its server-held user vector
    down = s.configure_phase("train", 3, [0, 4])
    assert set(down.shared) == {"item.weight"} and np.array_equal(down.personal[4]["user.weight"], s.U[4])
    assert np.array_equal(s.evaluate_download(3, [3]).personal[3]["user.weight"], s.U[3])
    t = _strategy()
    t.load_state_dict(s.state_dict())
    assert t.labels == s.labels and all(np.array_equal(t.U[c], s.U[c]) for c in s.U)


def test_tower_is_the_example_weighted_mean():
    s = _strategy()
    s.G["mlp.0.bias"] = np.zeros(2, np.float32)
    for c, (b, n) in {0: ([1.0, 2.0], 10), 1: ([4.0, -1.0], 30)}.items():
        s.accept("train", 1, c, ClientResult({"item.weight": BASE, "mlp.0.bias": np.array(b, np.float32),
                                              "user.weight": s.U[c]}, {"num-examples": n}))
    s.aggregate_phase("train", 1, {})
    np.testing.assert_allclose(s.G["mlp.0.bias"], [3.25, -0.25], atol=1e-6)
    assert np.array_equal(s.G["item.weight"], BASE)   # nobody moved a row


def test_actvsamp_draws_each_cluster_and_uniform_is_fedavgs():
    s = _strategy({"clients-per-round": 4})
    avail = list(range(6))
    assert s.sample(1, avail) == CorollaStrategy.sample(s, 1, avail)   # no clusters yet
    s.labels = {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1}
    for rnd in range(2, 12):
        got = s.sample(rnd, avail)
        assert len(got) == 4 and sum(s.labels[c] == 1 for c in got) == 2   # ⌈4/2⌉ from each
        assert s.sample(rnd, avail) == got                                 # a query: the same twice
    u = _strategy({"clients-per-round": 4, "fedfast-sampling": "uniform"})
    u.labels = s.labels
    assert u.sample(5, avail) == CorollaStrategy.sample(u, 5, avail)


# ------------------------------------------------------------------ runs on FedCA's harness
SMALL = "num-rounds=3 min-user-interactions=300 local-epochs=2 clients-per-round=16 fedfast-clusters=3"


def _run(tmp_path, name, data_dir, nodes, extra="", preset="fedfast-pmf-ml100k"):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    rounds = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    return s, rounds


def test_fedfast_runs_the_same_on_one_or_three_nodes(tmp_path, data_dir):
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, _ = _run(tmp_path, "three", data_dir, 3)
    assert a["metrics"] == b["metrics"] and a["metrics"]["hr@10"] > 0
    table, user = 1597 * 16 * 4 + 128, 16 * 4 + 128
    assert ra[0]["train"]["clients"] == 16 and ra[0]["users"]["test"] == 54   # 16 train, all 54 evaluated
    assert ra[0]["phases"][0]["bytes_up"] == 16 * (table + user)
    assert ra[0]["phases"][0]["bytes_down"] == table + 16 * user
    # round 1's evaluation (every client's user vector, the same table) goes with round 2's message
    assert [p["name"] for p in ra[1]["phases"]] == ["train+evaluate"]
    assert ra[1]["phases"][0]["bytes_down"] == table + (16 + 54) * user


def test_fedfast_ncf_and_options_run(tmp_path, data_dir):
    a, ra = _run(tmp_path, "own", data_dir, 2, "fedfast-eval=own fedfast-item-weight=l2 fedfast-sampling=uniform",
                 preset="fedfast-ncf-ml100k")
    assert a["status"] == "completed" and a["metrics"]["hr@10"] > 0
    # with 'own' the 16 trained clients evaluate in their reply; the other 38 are asked
    assert ra[1]["phases"][0]["bytes_down"] > 0


def test_a_client_that_joined_after_setup_is_aggregated_from_its_initial_vector():
    """A node that joins mid-run brings clients the server had no user vector for at setup: their
    upload is aggregated (the server's copy starts at the vector the client started from) instead
    of ending the run with a KeyError."""
    s = _strategy()
    late = max(s.U) + 1
    s.accept("train", 2, late, ClientResult({"item.weight": A, "user.weight": np.array([[1.0, 1.0]], np.float32)},
                                            {"num-examples": 5}))
    s.aggregate_phase("train", 2, {late: ClientResult({}, {})})
    assert np.array_equal(s.U[late], np.array([[1.0, 1.0]], np.float32)) and late in s.labels
