"""PerFedRec (docs/methods/perfedrec.md): its server rules replayed against the authors' code, its
sampling against the code's rule, its client's noise and score ensemble, runs on FedCA's harness.

``tests/golden/perfedrec_tiny.npz`` is a dump of the authors' code (sichunluo/PerFedRec@4d0c8f0,
with ``tests/golden/perfedrec_tiny.patch``: CPU, seeding, sizes from the environment, and lines that
record each round; ``tests/golden/perfedrec_tiny.py`` says how it was made) on the first 40 users of
ML-100K, 16 clients a round, K = 3, 4 rounds, seed 0: per round the participants, the labels
their uploads were filed under, the uploads (after the noise; the first 12 item rows and the
participants' own user rows), the global and cluster models after aggregation and the labels of
the K-means after it. Tolerances: the means are float32 sums in another order than the code's
sequential ``+=`` (relative rounding ≈ 16 · 2⁻²⁴ ≈ 1e-6 on values of order 0.1), so 1e-6 absolute;
the K-means labels exactly (the same algorithm and generator as scikit-learn's).
"""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from client_app.perfedrec import PerFedRecClient, cluster_key, ensemble_scorer
from corolla.kmeans import kmeans, per_cluster_sample
from corolla.models.factory import one_user_init
from server_app.app import run_federation
from strategies.base import ClientResult
from strategies.perfedrec import PerFedRec, cluster_means, code_sample, mean_tables
from tests.hand_cfg import ONE_USER_DEFAULTS
from tests.inproc import InProcessTransport, partitions

Z = np.load(Path(__file__).parent / "golden" / "perfedrec_tiny.npz")
K, M_CLIENTS, ROUNDS = int(Z["k"]), int(Z["clients"]), int(Z["rounds"])


def _partition(labels):
    groups = {}
    for u, x in enumerate(labels):
        groups.setdefault(int(x), []).append(u)
    return sorted(tuple(g) for g in groups.values())


# ------------------------------------------------------------------ the server rules, replayed
def test_kmeans_gives_the_authors_labels_and_scikit_learns():
    for r in range(ROUNDS):   # the code ran scikit-learn 1.9.1's KMeans(3, random_state=0): n_init 1
        assert np.array_equal(kmeans(Z[f"r{r}.global_users"], K, 0, n_init=1), Z[f"r{r}.labels_out"])
    sk = pytest.importorskip("sklearn.cluster")
    g = np.random.default_rng(0)
    for t in range(20):
        x = g.normal(size=(int(g.integers(20, 200)), int(g.integers(2, 17))))
        x[: len(x) // 2] += 2.0
        k, n_init = int(g.integers(2, 7)), (1, 10)[t % 2]
        want = sk.KMeans(n_clusters=k, random_state=t, n_init=n_init).fit(x).labels_
        assert np.array_equal(kmeans(x, k, t, n_init), want)


def test_global_and_cluster_models_are_the_authors():
    for r in range(ROUNDS):
        ups = [{"item.weight": x} for x in Z[f"r{r}.upload_items"]]
        g = mean_tables(ups, ["item.weight"])["item.weight"]
        assert np.abs(g - Z[f"r{r}.global_items"]).max() < 1e-6
        # the participants' rows of the code's global user table are their uploads
        assert np.array_equal(Z[f"r{r}.global_users"][Z[f"r{r}.participants"]], Z[f"r{r}.upload_user_rows"])
        if f"r{r}.cluster_items" not in Z:
            continue
        part = Z[f"r{r}.participants"]
        by_client = {int(c): ups[j] for j, c in enumerate(part)}
        cm = cluster_means(by_client, Z[f"r{r}.labels_in"], K, {"item.weight": g}, ["item.weight"])
        for k in range(K):
            assert np.abs(cm[k]["item.weight"] - Z[f"r{r}.cluster_items"][k]).max() < 1e-6


def _strategy(extra=None, n=40):
    cfg = {**ONE_USER_DEFAULTS, "method": "perfedrec", "harness": "one-user", "model": "mf", "dim": 64, "seed": 0, "init-std": 1.0,
           "user-init": "shared", "clients-per-round": M_CLIENTS, "fraction-train": 1.0, "perfedrec-clusters": K,
           "perfedrec-kmeans-init": 1, "perfedrec-sampling": "code", "perfedrec-uniform-share": 0.5,
           "perfedrec-noise-rows": 100, "perfedrec-noise-scale": 0.02, "perfedrec-ensemble": "logit",
           "perfedrec-cluster-from": 3, "perfedrec-weighted": False, **(extra or {})}
    s = PerFedRec(cfg)
    s.G = {"item.weight": np.zeros((12, 64), np.float32)}
    s.U = {c: one_user_init(cfg, c) for c in range(n)}
    return s


def test_strategy_rounds_replay_the_authors_models():
    """The strategy fed the code's uploads, with the code's incoming labels, builds the code's
    global and cluster models, and clusters what it holds with the code's K-means."""
    s = _strategy()
    for r in range(ROUNDS):
        part = Z[f"r{r}.participants"]
        s.labels = None if f"r{r}.labels_in" not in Z else {c: int(x) for c, x in enumerate(Z[f"r{r}.labels_in"])}
        for j, c in enumerate(part):
            s.accept("train", r + 1, int(c), ClientResult(
                {"item.weight": Z[f"r{r}.upload_items"][j], "user.weight": Z[f"r{r}.upload_user_rows"][j][None]},
                {"num-examples": 10}))
        s.aggregate_phase("train", r + 1, {int(c): ClientResult({}, {}) for c in part})
        assert np.abs(s.G["item.weight"] - Z[f"r{r}.global_items"]).max() < 1e-6
        if f"r{r}.cluster_items" in Z:
            for k in range(K):
                assert np.abs(s.C[k]["item.weight"] - Z[f"r{r}.cluster_items"][k]).max() < 1e-6
        for j, c in enumerate(part):
            assert np.array_equal(s.U[int(c)][0], Z[f"r{r}.upload_user_rows"][j])
        lab = kmeans(np.concatenate([s.U[c] for c in sorted(s.U)]), K, 0, 1)
        assert [s.labels[c] for c in sorted(s.U)] == lab.tolist()
    # downloads: from round 3 the global and K cluster models, each client the latest label; the
    # evaluation the labels the cluster models were built with
    d = s.configure_phase("train", 5, [0, 1])
    assert set(d.shared) == {"item.weight"} | {cluster_key(k, "item.weight") for k in range(K)}
    assert int(d.personal[1]["cluster"][0]) == s.labels[1]
    e = s.evaluate_download(4, [0, 1])
    assert int(e.personal[1]["cluster"][0]) == s.built_with[1]
    assert s.configure_phase("train", 2, [0]).personal == {}   # before perfedrec-cluster-from
    t = _strategy()
    t.load_state_dict(s.state_dict())
    assert t.labels == s.labels and t.built_with == s.built_with and len(t.C) == K
    assert all(np.array_equal(t.U[c], s.U[c]) for c in s.U)


def _authors_draw(labels, m, r: random.Random):
    """``PerFedRec.py:188-201`` re-typed with its own ``random`` calls."""
    n_client = len(labels)
    counts = {x: labels.count(x) for x in set(labels)}
    weight = [counts[i] for i in labels]
    rdm = r.sample(range(0, n_client), int(m / 2))
    choice = r.choices(range(0, n_client), weights=weight, k=int(m / 2))
    out = list(set(rdm + choice))
    while len(out) < m:
        x = r.sample(range(0, n_client), 1)[0]
        if x not in out:
            out.append(x)
    return out


def test_code_sampling_draws_as_the_authors_rule():
    """Same rule, another generator: the per-client inclusion frequencies over 4,000 draws agree
    within 5 standard errors (the code's Python ``random`` cannot be replayed by a seeded numpy
    generator)."""
    labels = [int(x) for x in Z["r0.labels_out"]]
    labels = [0 if u < 24 else (1 if u < 34 else 2) for u in range(40)]   # unequal clusters: 24/10/6
    n, m = 4000, M_CLIENTS
    r = random.Random(0)
    g = np.random.default_rng(0)
    f_code, f_ours = np.zeros(40), np.zeros(40)
    for _ in range(n):
        a = _authors_draw(labels, m, r)
        b = code_sample(list(range(40)), labels, m, 0.5, g)
        assert len(a) == len(b) == m and len(set(b)) == m
        f_code[a] += 1
        f_ours[b] += 1
    f_code, f_ours = f_code / n, f_ours / n
    se = np.sqrt(f_code * (1 - f_code) * 2 / n) + 1e-9
    assert (np.abs(f_code - f_ours) < 5 * se + 1e-3).all()
    assert f_ours[:24].mean() > f_ours[34:].mean() + 0.05   # the large cluster is drawn more


def test_per_cluster_sampling_takes_each_cluster():
    labels = {c: (0 if c < 30 else 1 if c < 38 else 2) for c in range(40)}
    got = per_cluster_sample(list(range(40)), labels, 9, np.random.default_rng(0))
    assert len(got) == 9 and sorted(set(got)) == got
    counts = [sum(labels[c] == k for c in got) for k in range(3)]   # ⌈9/3⌉ = 3, all 2 of the small one, 1 topped up
    assert counts[2] == 2 and counts[0] >= 3 and counts[1] >= 3
    got = per_cluster_sample(list(range(40)), labels, 4, np.random.default_rng(1))   # 2 per cluster, trimmed
    assert len(got) == 4
    assert per_cluster_sample([1, 2], labels, 5, np.random.default_rng(0)) == [1, 2]


# ------------------------------------------------------------------ the client
class _Fed:
    n_items = 30
    item_owner = None

    def owned_items(self, group):
        return None

    def group_of(self, cid):
        return cid

    def __init__(self):
        self.neg_valid = np.tile(np.arange(5, 10), (3, 1))
        self.neg_test = self.neg_valid

    def rows(self, split, u):
        return {"valid": np.array([1]), "test": np.array([2]), "train": np.array([0, 3, 4])}[split]


def _client(extra=None):
    cfg = {"method": "perfedrec", "harness": "one-user", "model": "mf", "dim": 4, "seed": 0, "init-std": 1.0,
           "user-init": "shared", "topk": "10", "loss": "bce", "weight-decay": 0.0}
    prm = type("P", (), {"perfedrec_noise_rows": 2000, "perfedrec_noise_scale": 0.5, "perfedrec_ensemble": "logit",
                         **(extra or {})})()
    return PerFedRecClient(cfg, _Fed(), 7, np.array([2]), "cpu", params=prm)


def test_upload_noise_is_laplace_on_drawn_rows_and_the_user_vector_goes_up():
    c = _client()
    c.round = 3
    new = {"user.weight": np.ones((1, 4), np.float32), "item.weight": np.zeros((100_000, 4), np.float32)}
    up = c.upload(new, None, {})
    assert np.array_equal(up["user.weight"], new["user.weight"]) and not new["item.weight"].any()
    noise = up["item.weight"]
    hit = (noise != 0).any(1)
    assert 1900 < hit.sum() <= 2000                            # 2,000 rows drawn with replacement
    assert abs(np.abs(noise[hit]).mean() - 0.5) < 0.03         # E|X| = b; 8,000 draws: s.e. 0.006
    c.round = 4
    assert not np.array_equal(c.upload(new, None, {})["item.weight"], noise)   # seeded by round
    kept = c.kept({**new, "item.weight": noise}, 3)
    assert kept["local.ids"].tolist() == [1, 2, 5, 6, 7, 8, 9] and set(kept) == {
        "user.weight", "local.round", "local.ids", "local.item.weight"}


def test_score_ensemble_by_hand():
    c = _client()
    g = np.random.default_rng(0)
    shared = {"item.weight": g.normal(size=(30, 4)).astype(np.float32)}
    shared[cluster_key(1, "item.weight")] = g.normal(size=(30, 4)).astype(np.float32)
    p = g.normal(size=(1, 4)).astype(np.float32)
    local = g.normal(size=(30, 4)).astype(np.float32)
    st = c.kept({"user.weight": p, "item.weight": local}, 5)
    items = np.array([[5, 6, 7, 1]])
    want = {"g": (shared["item.weight"][items[0]] @ p[0]), "c": (shared[cluster_key(1, "item.weight")][items[0]] @ p[0]),
            "l": local[items[0]] @ p[0]}
    for rnd, pers, parts in ((5, {"cluster": np.array([1])}, "gcl"), (6, {"cluster": np.array([1])}, "gc"),
                             (5, {}, "gl"), (6, {}, "g")):
        score = ensemble_scorer(c.p, rnd, [st], shared, [pers], "cpu")
        got = score(torch.tensor([0]), torch.as_tensor(items))[0]
        np.testing.assert_allclose(got, np.mean([want[x] for x in parts], 0), rtol=1e-5, atol=1e-6)
    prob = _client({"perfedrec_ensemble": "prob"})
    got = ensemble_scorer(prob.p, 5, [st], shared, [{}], "cpu")(torch.tensor([0]), torch.as_tensor(items))[0]
    np.testing.assert_allclose(got, (1 / (1 + np.exp(-want["g"])) + 1 / (1 + np.exp(-want["l"]))) / 2, rtol=1e-5)


def test_the_server_knows_a_clients_initial_user_vector():
    from corolla.config import resolve

    for init in ("shared", "per-client"):
        cfg = resolve("perfedrec-pmf-ml100k", {"user-init": init})
        fed = type("F", (), {"n_items": 20, "item_owner": None, "owned_items": lambda self, g: None,
                             "group_of": lambda self, c: c})()
        c = PerFedRecClient(cfg, fed, 11, np.array([11]), "cpu")
        assert np.array_equal(c.init_state()["user.weight"], one_user_init(cfg, 11)), init


# ------------------------------------------------------------------ runs on FedCA's harness
SMALL = "num-rounds=4 min-user-interactions=300 local-epochs=2 clients-per-round=16 perfedrec-clusters=3"


def _run(tmp_path, name, data_dir, nodes, extra="", preset="perfedrec-pmf-ml100k"):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    rounds = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    return s, rounds


def test_perfedrec_runs_the_same_on_one_or_three_nodes(tmp_path, data_dir):
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, _ = _run(tmp_path, "three", data_dir, 3)
    assert a["metrics"] == b["metrics"] and a["metrics"]["hr@10"] > 0
    m_items, d = 1597, 16
    table = m_items * d * 4 + 128
    assert ra[0]["train"]["clients"] == 16 and ra[0]["users"]["test"] == 54   # 16 train, all 54 evaluated
    assert ra[0]["phases"][0]["bytes_up"] == 16 * (table + d * 4 + 128)
    # every phase after the first carries the previous round's evaluation (the same tables: sent
    # once); round 3 and later send the 3 cluster models beside the global one (once per node: 1
    # node here), and a cluster id to each of the 16 training and the 54 evaluated clients
    assert [p["name"] for p in ra[1]["phases"]] == ["train+evaluate"]
    assert ra[1]["phases"][0]["bytes_down"] == table
    assert ra[3]["phases"][0]["bytes_down"] == 4 * table + (16 + 54) * (8 + 128)
    assert {r["train"]["clusters"] for r in ra} <= {1, 2, 3}


def test_perfedrec_ncf_and_options_run(tmp_path, data_dir):
    a, _ = _run(tmp_path, "ncf", data_dir, 2, preset="perfedrec-ncf-ml100k")
    b, _ = _run(tmp_path, "opts", data_dir, 2, "perfedrec-sampling=per-cluster perfedrec-ensemble=prob "
                "perfedrec-noise-rows=0 perfedrec-weighted=true", preset="perfedrec-ncf-ml100k")
    assert a["status"] == b["status"] == "completed" and a["metrics"] != b["metrics"]


def test_cluster_means_leave_out_a_client_without_a_label_and_zero_weights_are_uniform():
    """A client that joined after the last K-means has no label: it counts in G but in no cluster's
    mean (no KeyError). Weights a client sets to 0 (num-examples = 0 passes the exchange) give the
    plain mean instead of a division by zero."""
    from strategies.perfedrec import cluster_means, mean_tables
    up = {0: {"t": np.array([1.0], np.float32)}, 1: {"t": np.array([3.0], np.float32)},
          7: {"t": np.array([100.0], np.float32)}}
    fallback = {"t": np.array([-1.0], np.float32)}
    c = cluster_means(up, {0: 0, 1: 1}, 2, fallback, ["t"])
    assert c[0]["t"][0] == 1.0 and c[1]["t"][0] == 3.0
    assert mean_tables([up[0], up[1]], ["t"], [0.0, 0.0])["t"][0] == 2.0


def test_perfedrec_refuses_full_ranking_other_one_user_methods_take_it():
    from corolla.config import resolve
    from corolla.keys import ConfigError

    with pytest.raises(ConfigError, match="'protocol'.*PerFedRec"):
        resolve("perfedrec-pmf-ml100k", {"protocol": "full-rank", "split": "ratio"}, None)
    assert resolve("pfedrec-fedcia-ml100k", {}, None)["protocol"] == "full-rank"
    assert resolve("fedavg-pmf-ml100k", {"protocol": "full-rank", "split": "ratio"}, None)["protocol"] == "full-rank"
