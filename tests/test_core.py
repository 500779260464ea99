"""Pure pieces: aggregation, payload validation, state store, model losses."""

import numpy as np
import pytest
import torch

from corolla.config import resolve
from corolla.models.factory import build_model
from corolla.protocol import ArraySpec, PayloadError, validate_payload
from corolla.state import StateStore, truncate
from strategies.aggregation import weighted_mean


def test_weighted_mean_hand():
    a = {"x": np.array([1.0, 2.0], np.float32)}
    b = {"x": np.array([3.0, 6.0], np.float32)}
    out = weighted_mean([a, b], [1, 3])
    assert out["x"].tolist() == [2.5, 5.0] and out["x"].dtype == np.float32
    assert weighted_mean([a, b], [1, 1])["x"].tolist() == [2.0, 4.0]
    with pytest.raises(ValueError):
        weighted_mean([a], [0])


def test_validate_payload():
    spec = {"item.weight": ArraySpec((3, 2))}
    ok = {"item.weight": np.zeros((3, 2), np.float32)}
    validate_payload(ok, spec)
    bad = [({"item.weight": np.zeros((2, 2), np.float32)}, "shape"),
           ({"item.weight": np.zeros((3, 2), np.float64)}, "dtype"),
           ({"item.weight": np.full((3, 2), np.nan, np.float32)}, "non-finite"),
           ({}, "missing"), ({**ok, "extra": np.zeros(1, np.float32)}, "unexpected")]
    for arrays, what in bad:
        with pytest.raises(PayloadError, match=what):
            validate_payload(arrays, spec)


def test_state_store_versions(tmp_path):
    st = StateStore(tmp_path, "run1")
    st.save(0, 1, {"a": np.array([1])})
    st.save(0, 3, {"a": np.array([3])})
    assert st.load(0, 2)[1]["a"].tolist() == [1]  # kept: the newest version below round 3
    st.save(0, 4, {"a": np.array([4])})
    # two versions below the saved round are kept: a run killed in round 4 may resume from
    # round 2's checkpoint (fused evaluation), whose state is round 1's here
    assert st.load(0, 2)[1]["a"].tolist() == [1]
    assert st.load(0, 3)[1]["a"].tolist() == [3]
    st.save(0, 5, {"a": np.array([5])})
    assert st.load(0, 2) is None  # dropped once rounds 3 and 4 are below round 5
    assert st.load(0, 3)[1]["a"].tolist() == [3]
    assert st.load(0, 9)[0] == 5
    truncate(st, [0], 3)
    assert st.load(0, 9)[0] == 3
    assert st.load(1, 9) is None
    assert [p.name for p in st.dir.iterdir()] == ["c0.r3.npz"] and st._versions(0) == [3]   # index = disk


def test_state_store_lists_the_directory_once_per_phase(tmp_path, monkeypatch):
    import corolla.state as state_mod

    a, b = StateStore(tmp_path, "run"), StateStore(tmp_path, "run")   # two nodes sharing a directory
    for c in range(200):
        a.save(c, 1, {"x": np.array([c])})
    calls = []
    real = state_mod.os.scandir
    monkeypatch.setattr(state_mod.os, "scandir", lambda p: calls.append(p) or real(p))
    b.refresh()
    assert all(b.load(c, 1)[1]["x"].tolist() == [c] for c in range(200))
    for c in range(200):
        b.save(c, 2, {"x": np.array([-c])})
    assert len(calls) == 1 and b.load(7, 5)[0] == 2
    a.refresh()   # what the other node wrote is seen after its next listing
    assert a.load(7, 5)[1]["x"].tolist() == [-7] and len(calls) == 2


def test_fedcia_mse_loss_formula():
    cfg = resolve(None, {"loss": "fedcia-mse", "dim": 4, "weight-decay": 0.5})
    m = build_model(cfg, 2, 5)
    b = {"user": torch.tensor([0, 1]), "pos": torch.tensor([1, 2]), "neg": torch.tensor([3, 4])}
    u, p, n = m.user(b["user"]), m.item(b["pos"]), m.item(b["neg"])
    want = 0.5 * (((u * p - 1) ** 2).mean() + ((u * n) ** 2).mean()) + \
        0.5 * 0.5 * (u.pow(2).sum() + p.pow(2).sum() + n.pow(2).sum()) / 2
    assert m.loss(b).item() == pytest.approx(want.item(), rel=1e-6)


def test_bpr_loss_and_ncf_shapes():
    cfg = resolve(None, {"loss": "bpr", "dim": 4})
    m = build_model(cfg, 2, 5)
    b = {"user": torch.tensor([0]), "pos": torch.tensor([1]), "neg": torch.tensor([3])}
    sp = (m.user.weight[0] * m.item.weight[1]).sum()
    sn = (m.user.weight[0] * m.item.weight[3]).sum()
    assert m.loss(b).item() == pytest.approx(torch.nn.functional.softplus(sn - sp).item(), rel=1e-6)
    ncf = build_model(resolve(None, {"model": "ncf", "dim": 4, "mlp-layers": "8,4", "loss": "bce"}), 3, 6)
    assert ncf.full_sort_scores(torch.tensor([0, 2])).shape == (2, 6)
    assert "mlp.0.weight" in ncf.shared_names() and "user.weight" not in ncf.shared_names()


def test_fedcia_mlp_loss_with_the_codes_tower_regulariser():
    """FedCIA's model/MLP.py loss: ½[BCE(pos, 1) + BCE(neg, 0)] + wd·(½(‖u‖² + ‖p‖² + ‖n‖²)/B +
    Σ over the tower's weights and biases of their squares), written out by hand."""
    cfg = {"model": "ncf", "dim": 2, "mlp-layers": "4,3", "loss": "bce", "weight-decay": 0.25}
    plain = build_model(resolve(None, cfg), 2, 4)
    coded = build_model(resolve(None, {**cfg, "mlp-reg": "sum-squares"}), 2, 4)
    coded.load_state_dict(plain.state_dict())
    b = {"user": torch.tensor([0, 1]), "pos": torch.tensor([1, 2]), "neg": torch.tensor([3, 0])}
    u, p, n = coded.user(b["user"]), coded.item(b["pos"]), coded.item(b["neg"])

    def score(e_u, e_i):
        w0, b0, w1, b1 = (coded.mlp[0].weight, coded.mlp[0].bias, coded.mlp[2].weight, coded.mlp[2].bias)
        h = torch.relu(torch.cat([e_u, e_i], -1) @ w0.T + b0)
        return torch.sigmoid(h @ w1.T + b1).squeeze(-1)

    bce = torch.nn.functional.binary_cross_entropy
    sp, sn = score(u, p), score(u, n)
    tower = sum(float((t ** 2).sum()) for t in (coded.mlp[0].weight, coded.mlp[0].bias,
                                                 coded.mlp[2].weight, coded.mlp[2].bias))
    emb = 0.5 * float(u.pow(2).sum() + p.pow(2).sum() + n.pow(2).sum()) / 2
    want = 0.5 * float(bce(sp, torch.ones(2)) + bce(sn, torch.zeros(2))) + 0.25 * (emb + tower)
    assert coded.loss(b).item() == pytest.approx(want, rel=1e-5)
    assert plain.loss(b).item() == pytest.approx(want - 0.25 * tower, rel=1e-5)
    with pytest.raises(ValueError, match="mlp-reg"):
        resolve(None, {**cfg, "mlp-reg": "l2"})
    with pytest.raises(ValueError, match="mlp-reg"):   # a harness that trains without NCF.loss
        resolve("fedca-ncf-ml100k", {"mlp-reg": "sum-squares"})
    with pytest.raises(ValueError, match="mlp-reg"):   # not an NCF
        resolve(None, {"model": "mf", "mlp-reg": "sum-squares"})


def test_neumf_is_fedcias_ncf_written_out_by_hand():
    """``ncf-arch = neumf``: FedCIA's model/NCF.py, σ(W_p·[p_g ⊙ q_g ; ReLU(W_0·[p_m ; q_m] + b_0)] + b_p),
    each table 2·dim wide (GMF half, MLP half), the loss ½[BCE(pos, 1) + BCE(neg, 0)] as the code's."""
    cfg = {"model": "ncf", "ncf-arch": "neumf", "dim": 2, "mlp-layers": "4,3", "loss": "bce", "weight-decay": 0.0,
           "harness": "silo"}
    m = build_model(resolve(None, cfg), 2, 5)
    assert m.user.weight.shape == (2, 4) and m.item.weight.shape == (5, 4)
    assert m.predict.weight.shape == (1, 2 + 3)
    assert set(m.shared_names()) == {"item.weight", "mlp.0.weight", "mlp.0.bias", "predict.weight", "predict.bias"}
    b = {"user": torch.tensor([0, 1, 1]), "pos": torch.tensor([1, 2, 4]), "neg": torch.tensor([3, 0, 2])}
    u, w0, b0 = m.user.weight.detach(), m.mlp[0].weight.detach(), m.mlp[0].bias.detach()
    wp, bp, it = m.predict.weight.detach(), m.predict.bias.detach(), m.item.weight.detach()

    def score(uu, ii):
        gmf = u[uu, :2] * it[ii, :2]
        tower = torch.relu(torch.cat([u[uu, 2:], it[ii, 2:]], -1) @ w0.T + b0)
        return torch.sigmoid(torch.cat([gmf, tower], -1) @ wp.T + bp).squeeze(-1)

    assert torch.allclose(torch.sigmoid(m(b["user"], b["pos"])), score(b["user"], b["pos"]), atol=1e-6)
    full = torch.sigmoid(m.full_sort_scores(torch.tensor([0, 1])))
    assert torch.allclose(full, torch.stack([score(torch.full((5,), k), torch.arange(5)) for k in (0, 1)]), atol=1e-6)
    bce = torch.nn.functional.binary_cross_entropy
    want = 0.5 * float(bce(score(b["user"], b["pos"]), torch.ones(3)) + bce(score(b["user"], b["neg"]), torch.zeros(3)))
    assert m.loss(b).item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="ncf-arch"):   # a one-user client's user vector is dim wide
        resolve("fedca-ncf-ml100k", {"ncf-arch": "neumf"})
    with pytest.raises(ValueError, match="ncf-arch"):   # not an NCF
        resolve(None, {"model": "mf", "harness": "silo", "ncf-arch": "neumf"})
    with pytest.raises(ValueError, match="ncf-arch"):
        resolve(None, {**cfg, "ncf-arch": "gmf"})
    with pytest.raises(ValueError, match="hidden width"):
        build_model(resolve(None, {**cfg, "mlp-layers": "4"}), 2, 5)


def test_selection_on_valid_and_paper_compat_on_test(tmp_path):
    from server_app.results import RunRecorder

    cfg = resolve(None, {"select-metric": "ndcg@10", "compat-select-on-test": True, "patience": 2})
    rec = RunRecorder(tmp_path, cfg, None, {})
    vals = [(0.1, 0.30), (0.3, 0.20), (0.3, 0.25), (0.2, 0.25)]  # (valid, test) per round
    for r, (v, t) in enumerate(vals, 1):
        rec.history.append({"round": r, "phases": [], "valid": {"ndcg@10": v}, "metrics": {"ndcg@10": t},
                            "compat": {}, "valid_compat": {}})
    assert rec.select()["round"] == 2                      # strict '>': the first of equal valid values
    assert rec.select("test", compat=True)["round"] == 1   # best test
    rec.cfg = {**cfg, "select-tie": "last"}
    assert rec.select()["round"] == 3
    rec.cfg = cfg
    assert rec._should_stop()                              # 2 rounds after the best valid round
    s = rec.summary("completed")
    assert s["selection"]["round"] == 2 and s["metrics"] == {"ndcg@10": 0.20}
    assert s["metrics_paper_compat"]["selection"] == {"split": "test", "metric": "ndcg@10", "round": 1}


def test_sampling_is_seeded_by_round_and_fcf_is_unweighted():
    from strategies.base import ClientResult
    from strategies.fedavg import FCF, FedAvg

    cfg = resolve(None, {"fraction-train": 0.25})
    s = FedAvg(cfg)
    a, b = s.sample(3, list(range(40))), s.sample(3, list(range(40)))
    assert a == b and len(a) == 10 and a != s.sample(4, list(range(40)))
    res = {0: ClientResult({"x": np.array([0.0], np.float32)}, {"num-examples": 1}),
           1: ClientResult({"x": np.array([4.0], np.float32)}, {"num-examples": 3})}
    f = FedAvg(cfg)
    f.aggregate_phase("train", 1, res)
    u = FCF(cfg)
    u.aggregate_phase("train", 1, res)
    assert f.global_params["x"][0] == 3.0 and u.global_params["x"][0] == 2.0


def test_lightgcn_propagation_against_dense():
    from corolla.models.lightgcn import LightGCN

    users, items = np.array([0, 0, 1, 2]), np.array([0, 2, 2, 1])
    m = LightGCN(3, 4, 2, 2, "bpr", 0.0)
    m.set_graph(users, items)
    a = np.zeros((7, 7))
    for u, i in zip(users, items):
        a[u, 3 + i] = a[3 + i, u] = 1
    d = a.sum(1)
    dinv = np.where(d > 0, d ** -0.5, 0)
    norm = dinv[:, None] * a * dinv[None, :]
    x0 = torch.cat([m.user.weight, m.item.weight]).detach().numpy()
    want = (x0 + norm @ x0 + norm @ norm @ x0) / 3
    u, i = m.propagate()
    np.testing.assert_allclose(torch.cat([u, i]).detach().numpy(), want, atol=1e-6)
    assert m.full_sort_scores(torch.tensor([0, 2])).shape == (2, 4)


def test_heterogeneous_client_groups():
    from client_app.mf import client_config

    cfg = resolve(None, {"method": "fedcia", "client-models": "mf:512|lightgcn:512|ncf:32"})
    got = [(client_config(cfg, c, 100)["model"], client_config(cfg, c, 100)["dim"]) for c in (0, 32, 33, 65, 66, 99)]
    assert got == [("mf", 512)] * 2 + [("lightgcn", 512)] * 2 + [("ncf", 32)] * 2
    assert client_config(cfg, 99, 100)["mlp-layers"] == "64,32"
    with pytest.raises(Exception, match="client-models"):
        resolve(None, {"method": "fedavg", "client-models": "mf:8|mf:16"})


def test_id_lists_and_hosting():
    from client_app.host import parse_id_list

    assert parse_id_list("0-3, 7") == [0, 1, 2, 3, 7]
    assert parse_id_list("") == []
    with pytest.raises(ValueError, match="ids like"):
        parse_id_list("a-b")
