"""FedCA harness: the batched one-user training equals one user at a time; client/strategy."""

import json
from functools import partial

import numpy as np
import pytest
import torch

from corolla.models.factory import build_model
from corolla.models.stacked import (
    epoch_permutations,
    stack,
    train_one,
    train_stacked,
    train_users,
    training_rows,
    unstack,
)
from server_app.app import run_federation
from tests.tolerance import assert_far_beyond, f32_train_atol, max_abs_diff
from tests.inproc import InProcessTransport, partitions
from tests.oneuser import one_user_problem


def _cfg(model):
    return {"model": model, "dim": 4, "loss": "bce", "weight-decay": 0.0, "mlp-layers": "8,4"}


BATCH, LR_EMB, LR_MLP, WD_MLP, EPOCHS = 8, 0.05, 0.02, 1e-3, 5


def _one_user_problem(model, users=6, m_items=40):
    return one_user_problem(_cfg(model), users, m_items, 0, (1, 9), EPOCHS)[:3]


def _reference(model, state, sample, perm, early_break, lr_emb=LR_EMB, m_items=40):
    ref = build_model(_cfg(model), 1, m_items)
    ref.set_arrays(state)
    loss = train_one(ref, sample, perm, BATCH, lr_emb, LR_MLP, WD_MLP, early_break)
    return ref.get_arrays(), loss


@pytest.mark.parametrize("model", ["mf", "ncf"])
@pytest.mark.parametrize("early_break", [0.0, 1e-2])
def test_batched_training_equals_one_user_at_a_time(model, early_break):
    states, samples, perms = _one_user_problem(model)
    names = list(states[0])
    params = stack(states, names, torch.device("cpu"))
    params, losses = train_stacked(params, samples, perms, BATCH, LR_EMB, LR_MLP, WD_MLP, early_break)
    got = unstack(params)
    trainer = partial(train_stacked, batch_size=BATCH, lr_emb=LR_EMB, lr_mlp=LR_MLP, wd_mlp=WD_MLP,
                      early_break=early_break)
    compact, closses = train_users(states, samples, perms, trainer, torch.device("cpu"), chunk=4)
    # float32 paths in another summation order (tests/tolerance.py): the longest reduction of a
    # step is a mini-batch of rows times the widest layer input (2d for NCF's tower)
    steps = EPOCHS * max(-(-len(s["item"]) // BATCH) for s in samples)
    atol = f32_train_atol(steps, LR_EMB, BATCH * 2 * 4)
    for u in range(len(states)):
        assert closses[u] == pytest.approx(losses[u], abs=atol)
        for k in got[u]:
            np.testing.assert_allclose(compact[u][k], got[u][k], rtol=0, atol=atol, err_msg=f"user {u} {k}")
        want, loss = _reference(model, states[u], samples[u], perms[u], early_break)
        assert losses[u] == pytest.approx(loss, abs=atol)
        for k, v in want.items():
            np.testing.assert_allclose(got[u][k], v, rtol=0, atol=atol, err_msg=f"user {u} {k}")
    # the comparison can fail: a 1 % larger embedding learning rate, or one mini-batch step left
    # out, lands far outside the tolerance
    u = int(np.argmax([len(s["item"]) for s in samples]))
    wrong, _ = _reference(model, states[u], samples[u], perms[u], early_break, lr_emb=LR_EMB * 1.01)
    assert_far_beyond(max_abs_diff(wrong, got[u]), atol, what="lr x 1.01")
    skipped = [perms[u][0][:-BATCH]] + perms[u][1:] if len(perms[u][0]) > BATCH else perms[u][1:]
    wrong, _ = _reference(model, states[u], samples[u], skipped, early_break)
    assert_far_beyond(max_abs_diff(wrong, got[u]), atol, what="one step skipped")


SGD_RATES = {"item": 0.4, "user": 0.3, "rest": 0.05}


def _sgd_reference(model, state, sample, perm, rates, m_items=40):
    ref = build_model(_cfg(model), 1, m_items)
    ref.set_arrays(state)
    loss = train_one(ref, sample, perm, BATCH, 0.0, 0.0, WD_MLP, 0.0, sgd=rates)
    return ref.get_arrays(), loss


@pytest.mark.parametrize("model", ["mf", "ncf"])
def test_batched_sgd_equals_torch_sgd_one_user_at_a_time(model):
    """``optimizer = 'sgd'`` (FedAvg's reading of UFGraphFR's code base): the stacked plain-SGD step
    with one rate per group equals ``torch.optim.SGD`` on one user at a time."""
    states, samples, perms = _one_user_problem(model)
    params = stack(states, list(states[0]), torch.device("cpu"))
    params, losses = train_stacked(params, samples, perms, BATCH, 0.0, 0.0, WD_MLP, 0.0, sgd=SGD_RATES)
    got = unstack(params)
    steps = EPOCHS * max(-(-len(s["item"]) // BATCH) for s in samples)
    atol = f32_train_atol(steps, max(SGD_RATES.values()), BATCH * 2 * 4)
    for u in range(len(states)):
        want, loss = _sgd_reference(model, states[u], samples[u], perms[u], SGD_RATES)
        assert losses[u] == pytest.approx(loss, abs=atol)
        for k, v in want.items():
            np.testing.assert_allclose(got[u][k], v, rtol=0, atol=atol, err_msg=f"user {u} {k}")
    # each group's rate matters: the item table's or the user vector's rate 10 % off is far outside
    u = int(np.argmax([len(s["item"]) for s in samples]))
    for part in ("item", "user"):
        wrong, _ = _sgd_reference(model, states[u], samples[u], perms[u], {**SGD_RATES, part: SGD_RATES[part] * 1.1})
        assert_far_beyond(max_abs_diff(wrong, got[u]), atol, what=f"{part} rate x 1.1")


def test_sgd_rates_of_the_code_base():
    from corolla.models.stacked import learning_rates, param_group
    # GPFedRec's engine.py: item lr·M·lr_eta − lr, user lr/ratio·lr_eta − lr (ratio 1), MLP lr
    assert learning_rates(0.1, 80.0, 1682) == pytest.approx({"item": 13455.9, "user": 7.9, "rest": 0.1})
    assert [param_group(n) for n in ("item.weight", "user.weight", "mlp.0.weight")] == ["item", "user", "rest"]


def test_training_rows_negatives_distinct_and_from_pool():
    g = np.random.default_rng(1)
    pool = np.array([3, 5, 7, 9, 11])
    rows = training_rows(np.array([0, 1, 2]), pool, 4, g)
    blocks = rows["item"].reshape(3, 5)
    assert (blocks[:, 0] == [0, 1, 2]).all()
    for b in blocks[:, 1:]:
        assert len(set(b)) == 4 and set(b) <= set(pool)
    assert rows["label"].reshape(3, 5).tolist() == [[1, 0, 0, 0, 0]] * 3
    with pytest.raises(ValueError, match="smaller than num-negatives"):
        training_rows(np.array([0]), pool[:2], 4, g)


# --------------------------------------------------------------------------- strategy, in process

FEDCA_SMALL = "num-rounds=3 min-user-interactions=300 local-epochs=2"   # 54 heavy users, 1597 items


def _run(tmp_path, name, data_dir, nodes, extra="", preset="fedca-pmf-ml100k"):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{FEDCA_SMALL} {extra}",
                           "out-dir": str(tmp_path / name), "data-dir": data_dir})
    rounds = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    return s, rounds


def test_fedca_same_on_one_or_three_nodes_and_subset_upload(tmp_path, data_dir):
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, _ = _run(tmp_path, "three", data_dir, 3)
    assert a["metrics"] == b["metrics"] and a["valid_metrics"] == b["valid_metrics"]
    assert a["metrics"]["hr@10"] > 0
    users = ra[0]["train"]["clients"]
    agg = ra[0]["train"]["aggregated"]
    assert agg == max(1, int(0.1 * users))
    m_items = 1597   # items left after dropping users with < 300 ratings
    table = m_items * 16 * 4 + 128
    per_client = table + 4 * 16 * 4 + 128
    assert ra[0]["phases"][0]["bytes_up"] == users * per_client
    # round 1's aggregates go down with round 2's train message (the evaluation of round 1), to
    # the aggregated clients only
    assert [p["name"] for p in ra[1]["phases"]] == ["train+evaluate"]
    assert ra[1]["phases"][0]["bytes_down"] == agg * table
    # only the aggregation subset uploads: the same numbers for a tenth of the bytes
    c, rc = _run(tmp_path, "subset", data_dir, 3, "fedca-upload=subset")
    assert c["metrics"] == a["metrics"]
    assert rc[0]["phases"][0]["bytes_up"] == agg * per_client


def test_fedca_cvxpy_solver_gives_the_closed_form_run(tmp_path, data_dir):
    a, _ = _run(tmp_path, "closed", data_dir, 2, "num-rounds=2")
    b, _ = _run(tmp_path, "cvxpy", data_dir, 2, "num-rounds=2 fedca-qp=cvxpy")
    for k, v in a["metrics"].items():
        assert b["metrics"][k] == pytest.approx(v, abs=0.03)


def test_fedca_without_evaluation_delivers_aggregates_with_next_train(tmp_path, data_dir):
    s, r = _run(tmp_path, "every2", data_dir, 2, "eval-every=2 num-rounds=3")
    agg = r[0]["train"]["aggregated"]
    assert [p["name"] for p in r[0]["phases"]] == ["train"]
    assert r[1]["phases"][0]["bytes_down"] == agg * (1597 * 16 * 4 + 128)   # round 1's Q_g in round 2
    assert s["status"] == "completed" and s["rounds_completed"] == 3


@pytest.mark.parametrize("method", ["fedavg", "fcf", "fedatt", "local"])
def test_one_user_baselines_run(tmp_path, data_dir, method):
    s, r = _run(tmp_path, method, data_dir, 2, f"method={method} num-rounds=2")
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
    up = r[0]["phases"][0]["bytes_up"]
    assert up == (0 if method == "local" else r[0]["train"]["clients"] * (1597 * 16 * 4 + 128))
    # the clients evaluate in their training reply: no other message
    assert [p["name"] for p in r[0]["phases"]] == ["train"] and r[0]["metrics"]["hr@10"] >= 0


def test_fedavg_sgd_reaches_the_clients(tmp_path, data_dir):
    """``optimizer = 'sgd'`` and ``lr-eta`` reach FedAvg's one-user clients: each changes what they train."""
    runs = {name: _run(tmp_path, name, data_dir, 2, f"method=fedavg num-rounds=1 local-epochs=1 {extra}")[0]
            for name, extra in [("adam", ""), ("sgd", "optimizer=sgd lr=0.01"),
                                ("sgd-eta", "optimizer=sgd lr=0.01 lr-eta=20")]}
    assert all(r["status"] == "completed" for r in runs.values())
    assert runs["sgd"]["valid_metrics"] != runs["adam"]["valid_metrics"]
    assert runs["sgd"]["valid_metrics"] != runs["sgd-eta"]["valid_metrics"]


def test_fedavg_bpr_runs_through_the_round_and_rows_upload(tmp_path, data_dir):
    """``loss = bpr`` reaches FedAvg's one-user clients through a Flower round: it changes what they
    train, and with ``item-upload = rows`` (the rows a client trained: its positives and its
    negatives) it gives the full upload's run on 1 or 2 nodes."""
    base = "method=fedavg num-rounds=2"
    bce, _ = _run(tmp_path, "bce", data_dir, 1, base)
    full, _ = _run(tmp_path, "bpr", data_dir, 1, f"{base} loss=bpr")
    rows, r = _run(tmp_path, "bpr-rows", data_dir, 2, f"{base} loss=bpr item-upload=rows")
    assert all(x["status"] == "completed" for x in (bce, full, rows))
    assert full["valid_metrics"] != bce["valid_metrics"]
    for split in ("metrics", "valid_metrics"):
        assert rows[split] == pytest.approx(full[split], abs=1e-6)
    assert r[0]["phases"][0]["bytes_up"] < r[0]["train"]["clients"] * 1597 * 16 * 4


def test_interpolation_by_hand():
    from client_app.pmf import interpolate

    own = {"item.weight": np.ones((2, 2), np.float32), "user.weight": np.zeros((1, 2), np.float32)}
    out = interpolate(own, {"item.weight": np.zeros((2, 2), np.float32)}, 0.8)
    np.testing.assert_allclose(out["item.weight"], 0.8)
    assert out["user.weight"] is own["user.weight"]


@pytest.mark.parametrize("layers", [(), (3, 2)])   # the code's Linear(d, 1); a ReLU tower before it (NCF backbone)
def test_pfedrec_batched_equals_reference(layers):
    from corolla.models.pfedrec import PFedRecModel, pfedrec_init
    from corolla.models.stacked import train_pfedrec_one, train_pfedrec_stacked

    g = np.random.default_rng(5)
    m_items = 30
    init = pfedrec_init(m_items, 4, 1.0, 0, layers)
    states, samples, perms = [], [], []
    for u in range(5):
        st = {k: v.copy() for k, v in init.items()}
        st["affine.weight"] = st["affine.weight"] + g.normal(size=st["affine.weight"].shape).astype(np.float32) * 0.1
        states.append(st)
        pos = g.choice(m_items, size=int(g.integers(1, 7)), replace=False)
        s = training_rows(pos, np.setdiff1d(np.arange(m_items), pos), 4, g)
        samples.append(s)
        perms.append(epoch_permutations(g, len(s["item"]), 2))
    trainer = partial(train_pfedrec_stacked, batch_size=8, lr=0.1, lr_item=5.0)
    got, losses = train_users(states, samples, perms, trainer, torch.device("cpu"), chunk=2)

    def reference(u, lr_item=5.0, perm=None):
        ref = PFedRecModel(m_items, 4, layers)
        ref.set_arrays(states[u])
        loss = train_pfedrec_one(ref, samples[u], perms[u] if perm is None else perm, 8, 0.1, lr_item)
        return ref.get_arrays(), loss

    # float32 SGD paths in another summation order (tests/tolerance.py): the item step has the
    # largest learning rate, its gradient a reduction over a mini-batch of rows times d
    steps = 2 * max(-(-len(s["item"]) // 8) for s in samples)
    atol = f32_train_atol(steps, 5.0, 8 * 4)
    for u in range(5):
        want, loss = reference(u)
        assert losses[u] == pytest.approx(loss, abs=atol)
        for k, v in want.items():
            np.testing.assert_allclose(got[u][k], v, rtol=0, atol=atol, err_msg=f"user {u} {k}")
    u = int(np.argmax([len(s["item"]) for s in samples]))
    # (behind a tower the table's gradient is smaller: there a 20 % wrong rate is the variant)
    wrong = 5.25 if not layers else 6.0
    assert_far_beyond(max_abs_diff(reference(u, lr_item=wrong)[0], got[u]), atol, what=f"lr-item {wrong} for 5.0")
    assert_far_beyond(max_abs_diff(reference(u, perm=perms[u][1:])[0], got[u]), atol, what="an epoch skipped")


def test_pfedrec_runs_and_uploads_table_and_bias(tmp_path, data_dir):
    s, r = _run(tmp_path, "pfedrec", data_dir, 2, "num-rounds=2 local-epochs=1", preset="pfedrec-ml100k")
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
    per = 1597 * 32 * 4 + 128 + 4 + 128
    assert r[0]["phases"][0]["bytes_up"] == r[0]["train"]["clients"] * per


def test_pfedrec_ncf_backbone_keeps_its_tower_on_the_client(tmp_path, data_dir):
    """FedCA's NCF-backbone PFedRec rows (``pfedrec-score-layers = "16,8"``): the same upload as the
    code's Linear(d, 1) (the table and the score bias; the tower stays with the score weight)."""
    s, r = _run(tmp_path, "pfedrec-ncf", data_dir, 2, "num-rounds=2 local-epochs=1", preset="pfedrec-ncf-ml100k")
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
    per = 1597 * 32 * 4 + 128 + 4 + 128
    assert r[0]["phases"][0]["bytes_up"] == r[0]["train"]["clients"] * per
    lin, _ = _run(tmp_path, "pfedrec-lin", data_dir, 1, "num-rounds=2 local-epochs=1", preset="pfedrec-ml100k")
    assert s["metrics"] != lin["metrics"]   # the tower is in the score


def test_pfedrec_client_scores_with_a_tower_equal_the_reference_model():
    """The per-client scoring path (``PFedRecClient.scores``, the stacked trainer's forward on one
    client) equals the torch reference model, on candidates and on the whole table."""
    from types import SimpleNamespace

    import torch

    from client_app.pfedrec import PFedRecClient
    from corolla.models.pfedrec import PFedRecModel, pfedrec_init

    st = pfedrec_init(12, 4, 1.0, 3, (3, 2))
    client = SimpleNamespace(device="cpu")
    items = np.array([[0, 5, 7, 11]])
    m = PFedRecModel(12, 4, (3, 2))
    m.set_arrays(st)
    with torch.no_grad():
        want = torch.sigmoid(m(torch.arange(12))).numpy()
    np.testing.assert_allclose(PFedRecClient.scores(client, st, {}, {}, [0], items)[0], want[items[0]], rtol=1e-5)
    np.testing.assert_allclose(PFedRecClient.scores(client, st, {}, {}, [0], None)[0], want, rtol=1e-5)
    rows = {k: v for k, v in st.items() if k != "item.weight"}   # item-upload = rows: the global table
    np.testing.assert_allclose(PFedRecClient.scores(client, rows, {"item.weight": st["item.weight"]}, {}, [0],
                                                    items)[0], want[items[0]], rtol=1e-5)


def test_pfedrec_tower_is_drawn_after_the_table_and_score_layer():
    """The tower's draws come last, so the table is the default's; that the default itself draws what
    it drew before the option existed is the golden lines' check (tests/test_golden.py)."""
    from corolla.models.pfedrec import pfedrec_init

    a, b = pfedrec_init(20, 4, 1.0, 0), pfedrec_init(20, 4, 1.0, 0, (3,))
    np.testing.assert_array_equal(a["item.weight"], b["item.weight"])
    assert sorted(a) == ["affine.bias", "affine.weight", "item.weight"]
    assert b["tower.0.weight"].shape == (3, 4) and b["affine.weight"].shape == (1, 3)


@pytest.mark.parametrize("bad", ["16,x", "0", "16,,8"])
def test_pfedrec_score_layers_must_be_widths(bad):
    from corolla.config import ConfigError, resolve

    with pytest.raises(ConfigError, match="'pfedrec-score-layers'"):
        resolve("pfedrec-ncf-ml100k", {"pfedrec-score-layers": bad}, None)


def test_cli_inproc_mode(tmp_path, data_dir, capsys):
    from launcher.cli import main

    out = tmp_path / "cli"
    rc = main(["run", "--preset", "fedca-pmf-ml100k", "--set", "num-rounds=1", "--set", "min-user-interactions=300",
               "--set", "local-epochs=1", "--mode", "inproc", "--nodes", "2", "--data-dir", data_dir, "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 1
    assert '"metrics_paper_compat"' in capsys.readouterr().out


@pytest.mark.parametrize("override, key", [({"loss": "bpr"}, "loss"), ({"optimizer-state": "persist"}, "optimizer-state"),
                                           ({"partition": "blocks"}, "partition"), ({"harness": "silo"}, "harness")])
def test_one_user_harness_rejects_what_it_does_not_do(override, key):
    from corolla.config import ConfigError, resolve

    with pytest.raises(ConfigError, match=f"'{key}'"):
        resolve("fedca-pmf-ml100k", override, None)


def test_fedca_blocks_cover_the_subset_once_and_block_ge_subset_is_exact(tmp_path, data_dir):
    from corolla.config import resolve
    from strategies.fedca import FedCA

    s = FedCA(resolve("fedca-pmf-ml100k", {"fedca-block": 7}))
    subset = list(range(3, 103))
    blocks = s.blocks(5, subset)
    assert sorted(c for b in blocks for c in b) == subset and len(blocks) == 15
    assert all(6 <= len(b) <= 7 for b in blocks) and blocks == s.blocks(5, subset) != s.blocks(6, subset)
    assert FedCA(resolve("fedca-pmf-ml100k")).blocks(5, subset) == [subset]
    a, _ = _run(tmp_path, "exact", data_dir, 2, "num-rounds=2")
    b, _ = _run(tmp_path, "one-block", data_dir, 2, "num-rounds=2 fedca-block=64")
    assert a["metrics"] == b["metrics"]
    c, rc = _run(tmp_path, "blocks", data_dir, 2, "num-rounds=2 fedca-block=3")
    assert rc[0]["train"]["blocks"] == 2 and rc[0]["train"]["aggregated"] == 5   # 5 drawn: blocks of 3 and 2
    assert c["status"] == "completed"
