"""pFedGraph (docs/methods/pfedgraph.md): its server functions and its local term against the
authors' code, its training path, and runs on FedCA's harness.

``tests/golden/pfedgraph_tiny.json`` holds what the authors' unmodified server functions
(MediaBrain-SJTU/pFedGraph@4f5f17c, ``pytorch/pfedgraph_cosine/utils.py``: ``cal_model_cosine_difference``,
``optimizing_graph_matrix_neighbor`` with cvxpy 1.9.3, ``aggregation_by_graph``) and the gradient
of its local term (``pfedgraph_cosine.py:64-70``, re-typed: that file is a script) computed on a
tiny case: 5 clients, a 7 × 3 item table each (the initial table plus a change; two changes
nearly parallel, so the 0.9 clamp fires; one anti-parallel), counts (40, 10, 25, 5, 20), α = 0.8,
λ = 0.01. Tolerances: the authors computed in float32 torch, Corolla in float64 numpy; 1e-6
absolute for the cosines, the graph and the term (float32 rounding of numbers of order 1), 1e-5
relative for the aggregates (float32 sums); against the golden cvxpy graph 1e-6 (the golden file
itself says cvxpy's iterative solution is within 3.0e-8 of the closed form).
"""

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from client_app.pfedgraph import partial_penalty, similarity_term
from corolla.models.factory import build_model
from corolla.models.stacked import train_stacked, train_users
from server_app.app import run_federation
from strategies.pfedgraph import PFedGraph, aggregate_by_graph, cosine_difference, graph_weights
from strategies.base import ClientResult
from tests.hand_cfg import ONE_USER_DEFAULTS
from tests.inproc import InProcessTransport, partitions
from tests.oneuser import one_user_problem
from tests.tolerance import assert_far_beyond, f32_train_atol, max_abs_diff

G = json.loads((Path(__file__).parent / "golden" / "pfedgraph_tiny.json").read_text())
N = len(G["counts"])
INIT = np.array(G["init_table"], np.float32)
TABLES = np.stack([np.array(G["client_tables"][str(i)], np.float32) for i in range(N)])
P = np.array(G["counts"]) / np.sum(G["counts"])


def test_cosine_difference_is_the_authors_with_the_clamp():
    d = cosine_difference((TABLES - INIT).reshape(N, -1), 0.9)
    want = np.array(G["difference_matrix"])
    assert np.abs(d - want).max() < 1e-6
    assert (want == -1.0).sum() > N    # the clamp fired off the diagonal (clients 0 and 1)
    assert cosine_difference(np.zeros((2, 3)))[0, 1] == 0.0   # a client that did not move


def test_graph_is_the_authors_cvxpy_qp():
    d = np.array(G["difference_matrix"])
    a = graph_weights(d, P, G["alpha"])
    assert np.abs(a - np.array(G["graph_closed_form"])).max() < 1e-8   # d is float32 in the golden file
    assert np.abs(a - np.array(G["graph_cvxpy"])).max() < 1e-6
    assert np.allclose(a.sum(1), 1.0) and (a >= 0).all()
    pytest.importorskip("cvxpy")
    assert np.abs(graph_weights(d, P, G["alpha"], "cvxpy") - np.array(G["graph_cvxpy"])).max() < 1e-6


def test_aggregates_and_targets_are_the_authors():
    a = np.array(G["graph_cvxpy"], np.float32)   # what the authors' aggregation used
    agg, tgt = aggregate_by_graph(a, {"item.weight": TABLES})
    for i in range(N):
        np.testing.assert_allclose(agg["item.weight"][i], np.array(G["aggregated_tables"][str(i)]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tgt["item.weight"][i].reshape(-1), np.array(G["cluster_vectors"][str(i)]),
                                   rtol=1e-5, atol=1e-6)
    assert aggregate_by_graph(a, {"item.weight": TABLES}, targets=False)[1] == {}


def test_similarity_term_and_its_gradient_are_the_authors():
    theta = torch.tensor(np.array(G["aggregated_tables"]["0"], np.float32)[None], requires_grad=True)
    c = torch.tensor(np.array(G["cluster_vectors"]["0"], np.float32).reshape(1, 7, 3))
    loss = similarity_term({"item.weight": theta}, {"item.weight": c}, ["item.weight"], G["lam"])
    loss.sum().backward()
    assert abs(loss[0].item() - G["loss2_client0"]) < 1e-7
    np.testing.assert_allclose(theta.grad[0].numpy().reshape(-1), np.array(G["grad_loss2_client0"]), atol=1e-7)
    # the paper's sign is the opposite term
    paper = similarity_term({"item.weight": theta.detach()}, {"item.weight": c}, ["item.weight"], -G["lam"])
    assert float(paper[0]) == pytest.approx(-G["loss2_client0"], abs=1e-7)


def _strategy(extra=None):
    cfg = {**ONE_USER_DEFAULTS, "method": "pfedgraph", "harness": "one-user", "model": "mf", "dim": 3, "seed": 0, "init-std": 1.0,
           "user-init": "shared", "pfedgraph-alpha": 0.8, "pfedgraph-lambda": 0.01,
           "pfedgraph-sign": "code",
           "pfedgraph-target": "normalized", "pfedgraph-clamp": 0.9, "pfedgraph-qp": "closed-form",
           "pfedgraph-eval": "trained", **(extra or {})}
    s = PFedGraph(cfg)
    s.init = {"item.weight": INIT}
    return s


def test_strategy_round_gives_the_authors_aggregates_and_delivers_them():
    s = _strategy()
    for i in range(N):
        s.accept("train", 1, 10 + i, ClientResult({"item.weight": TABLES[i]}, {"num-examples": G["counts"][i],
                                                                                  "train-loss": 0.5}))
    mets = s.aggregate_phase("train", 1, {10 + i: ClientResult({}, {"train-loss": 0.5}) for i in range(N)})
    assert mets["clients"] == N and 0 < mets["self-weight"] < 1
    for i in range(N):
        got = s.owed.pending[10 + i]
        np.testing.assert_allclose(got["item.weight"], np.array(G["aggregated_tables"][str(i)]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["target.item.weight"].reshape(-1), np.array(G["cluster_vectors"][str(i)]),
                                   rtol=1e-5, atol=1e-6)
    # trained evaluation: both go with the next training message, and are gone once delivered
    assert s.evaluate_download(1, [10]).personal == {}
    down = s.configure_phase("train", 2, [10, 11, 99])
    assert set(down.personal) == {10, 11} and set(down.personal[10]) == {"item.weight", "target.item.weight"}
    s.delivered("train", 2, [10, 11])
    assert 10 not in s.owed.pending and 12 in s.owed.pending
    # a checkpoint restores what is pending
    t = _strategy()
    t.load_state_dict(s.state_dict())
    assert set(t.owed.pending) == set(s.owed.pending) and np.array_equal(t.owed.pending[12]["item.weight"], s.owed.pending[12]["item.weight"])


def test_aggregated_evaluation_sends_the_aggregate_first_and_the_target_with_training():
    s = _strategy({"pfedgraph-eval": "aggregated"})
    for i in range(N):
        s.accept("train", 1, i, ClientResult({"item.weight": TABLES[i]}, {"num-examples": G["counts"][i]}))
    s.aggregate_phase("train", 1, {})
    ev = s.evaluate_download(1, [0, 1])
    assert set(ev.personal[0]) == {"item.weight"}
    s.delivered("evaluate", 1, [0, 1])
    assert set(s.configure_phase("train", 2, [0, 1, 2]).personal[0]) == {"target.item.weight"}
    assert set(s.configure_phase("train", 2, [2]).personal[2]) == {"item.weight", "target.item.weight"}
    s.evaluated(1, {0: ClientResult({}, {})})          # client 1 missed it: it gets it with training
    assert set(s.owed.pending[1]) == {"item.weight", "target.item.weight"} and set(s.owed.pending[0]) == {"target.item.weight"}


# ------------------------------------------------------------------------ the training path
def _problem(users=5, m_items=30, d=4, model="mf"):
    cfg = {"model": model, "dim": d, "loss": "bce", "weight-decay": 0.0, "mlp-layers": "8,4"}
    states, samples, perms, _ = one_user_problem(cfg, users, m_items, 1, (2, 8), 3)
    g = np.random.default_rng(2)
    targets = [{k: g.normal(size=v.shape).astype(np.float32) for k, v in st.items() if k != "user.weight"}
               for st in states]
    return cfg, states, samples, perms, targets


def _reference(cfg, state, sample, perm, target, coef, m_items=30, batch=8, lr=0.05):
    """One user, ``torch.optim.Adam``, the term added to every mini-batch's loss (the code's
    ``loss2`` per iteration)."""
    from torch.nn import functional as F
    model = build_model(cfg, 1, m_items)
    model.set_arrays(state)
    opt = torch.optim.Adam([{"params": [p for n, p in model.named_parameters() if n.startswith(("user.", "item."))],
                             "lr": lr}, {"params": [p for n, p in model.named_parameters() if n.startswith("mlp.")],
                                         "lr": lr}])
    items = torch.as_tensor(sample["item"])
    labels = torch.as_tensor(sample["label"])
    names = list(target)
    c = {k: torch.as_tensor(v)[None] for k, v in target.items()}
    for order in perm:
        for a in range(0, len(items), batch):
            sel = torch.as_tensor(order[a:a + batch])
            opt.zero_grad()
            loss = F.binary_cross_entropy(torch.sigmoid(model(torch.zeros(len(sel), dtype=torch.long), items[sel])),
                                          labels[sel])
            params = dict(model.named_parameters())
            loss = loss + similarity_term({k: params[k][None] for k in names}, c, names, coef)[0]
            loss.backward()
            opt.step()
    return model.get_arrays()


@pytest.mark.parametrize("model", ["mf", "ncf"])
def test_training_with_the_term_equals_one_user_at_a_time(model):
    cfg, states, samples, perms, targets = _problem(model=model)
    names = [k for k in states[0] if k != "user.weight"]
    coef = 0.5   # large enough that leaving the term out is far outside the tolerance

    def penalty_for(part):
        c = {k: torch.as_tensor(np.stack([targets[b][k] for b in part])) for k in names}
        return partial_penalty(c, names, coef)

    trainer = partial(train_stacked, batch_size=8, lr_emb=0.05, lr_mlp=0.05, wd_mlp=0.0, early_break=0.0)
    got, _ = train_users(states, samples, perms, trainer, "cpu", chunk=2, compact=False, penalty_for=penalty_for)
    plain, _ = train_users(states, samples, perms, trainer, "cpu", chunk=2)
    atol = f32_train_atol(steps=3 * 5, lr=0.05, n_acc=30 * 4)
    for b in range(len(states)):
        want = _reference(cfg, states[b], samples[b], perms[b], targets[b], coef)
        assert max_abs_diff(got[b], want) < atol
        assert_far_beyond(max_abs_diff(plain[b], want), atol, what="without the term")
        # the term moves rows the samples never touch
        untouched = np.setdiff1d(np.arange(30), samples[b]["item"])
        assert np.abs(got[b]["item.weight"][untouched] - states[b]["item.weight"][untouched]).max() > 1e-3
        assert np.array_equal(plain[b]["item.weight"][untouched], states[b]["item.weight"][untouched])


def test_uncompacted_training_without_a_term_equals_the_compacted():
    cfg, states, samples, perms, _ = _problem()
    trainer = partial(train_stacked, batch_size=8, lr_emb=0.05, lr_mlp=0.05, wd_mlp=0.0, early_break=0.0)
    a, la = train_users(states, samples, perms, trainer, "cpu", chunk=2)
    b, lb = train_users(states, samples, perms, trainer, "cpu", chunk=2, compact=False)
    atol = f32_train_atol(steps=15, lr=0.05, n_acc=30 * 4)
    assert all(max_abs_diff(x, y) < atol for x, y in zip(a, b)) and np.allclose(la, lb)


# ------------------------------------------------------------------------ runs on FedCA's harness
SMALL = "num-rounds=3 min-user-interactions=300 local-epochs=2"   # 54 heavy users, 1597 items


def _run(tmp_path, name, data_dir, nodes, extra="", preset="pfedgraph-pmf-ml100k"):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    rounds = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    return s, rounds


def test_pfedgraph_runs_the_same_on_one_or_three_nodes_and_sends_aggregate_and_target(tmp_path, data_dir):
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, _ = _run(tmp_path, "three", data_dir, 3)
    assert a["metrics"] == b["metrics"] and a["metrics"]["hr@10"] > 0
    users, table = ra[0]["train"]["clients"], 1597 * 16 * 4 + 128
    assert ra[0]["phases"][0]["bytes_up"] == users * table
    # round 2's message: every client's aggregate and target; the metrics come with the replies
    assert [p["name"] for p in ra[1]["phases"]] == ["train"]
    assert ra[1]["phases"][0]["bytes_down"] == users * 2 * table
    # λ = 0 and the paper's sign are different runs
    c, _ = _run(tmp_path, "lam0", data_dir, 1, "pfedgraph-lambda=0")
    d, _ = _run(tmp_path, "paper", data_dir, 1, "pfedgraph-sign=paper")
    assert len({json.dumps(x["metrics"], sort_keys=True) for x in (a, c, d)}) == 3


def test_pfedgraph_aggregated_evaluation_and_aggregate_target(tmp_path, data_dir):
    s, r = _run(tmp_path, "agg", data_dir, 2, "pfedgraph-eval=aggregated pfedgraph-target=aggregate",
                preset="pfedgraph-ncf-ml100k")
    users = r[0]["train"]["clients"]
    table = 1597 * 16 * 4 + 128 + sum(4 * n + 128 for n in (32 * 16, 16, 16 * 8, 8, 8, 1))
    # round 1's evaluation (the aggregates) travels with round 2's training, which carries no target
    assert [p["name"] for p in r[1]["phases"]] == ["train+evaluate"]
    assert r[1]["phases"][0]["bytes_down"] == users * table
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
