"""``benchmarks/metamf_central.py`` (MetaMF's network trained centrally by the authors' loop,
Run.ipynb cells 15-17) on a tiny slice of the preset's data (ML-100K, its first 30 users, small
widths): the rows of an epoch are the federated round's, one step is one hand-computed Adam step,
a step in parts equals the step in one piece, repeated steps lower the loss, and the evaluation is
the federated client's."""

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import metamf_central as mc

from client_app.oneuser import round_samples
from corolla import metrics as M
from corolla.config import resolve

SMALL = {"dim": 8, "metamf-rank": 3, "metamf-user-dim": 6, "metamf-memory": 10, "metamf-hidden": 12, "max-users": 30}


@pytest.fixture
def slice_(data_dir):
    def make(**over):
        torch.set_num_threads(1)
        return mc.setup(resolve(mc.PRESET, {**SMALL, **over}), data_dir)
    return make


def test_epoch_rows_are_the_federated_rounds_rows(slice_):
    server, clients = slice_()
    rows = mc.epoch_rows(server, clients, 3)
    samples, _ = round_samples(clients, 3)
    assert len(rows["label"]) == sum(len(s["item"]) for s in samples) == 5 * sum(c.num_train for c in clients)
    a = 0
    for c, s in zip(clients, samples):
        n = len(s["item"])
        assert (rows["user"][a:a + n] == server.rows[c.cid]).all()
        assert np.array_equal(rows["item"][a:a + n], s["item"]) and np.array_equal(rows["label"][a:a + n], s["label"])
        fed, u = c.fed, c.user
        seen = set(fed.rows("train", u)) | set(fed.rows("valid", u)) | set(fed.rows("test", u))
        pos, neg = s["item"][s["label"] == 1], s["item"][s["label"] == 0]
        assert sorted(pos) == sorted(fed.rows("train", u)) and len(neg) == 4 * len(pos)
        assert not seen & set(neg.tolist())          # negatives: never interacted
        a += n
    other = mc.epoch_rows(server, clients, 4)
    assert not np.array_equal(other["item"], rows["item"])   # re-drawn every epoch


@pytest.mark.parametrize("fused", [False, True])
def test_one_step_is_one_hand_computed_adam_step(slice_, fused):
    """Adam's first step with L2 weight decay λ after clipping the gradient's global norm at c:
    g' = g·min(1, c/‖g‖) + λθ, θ₁ = θ₀ − lr·g'/(|g'| + 1e-8) (bias-corrected m̂ = g', v̂ = g'²)."""
    lr, clip = 1e-3, 0.05
    server, clients = slice_(lr=lr, **{"metamf-clip": clip})
    if fused:
        server.opt = torch.optim.Adam(server.net.parameters(), lr=lr, weight_decay=1e-3, fused=True)
    rows = mc.epoch_rows(server, clients, 1)
    idx = mc.batches(len(rows["label"]), 64, np.random.default_rng(0))[0]
    u, i, y = rows["user"][idx], rows["item"][idx], rows["label"][idx]
    ref = copy.deepcopy(server.net)
    theta0 = {n: p.detach().clone() for n, p in ref.named_parameters()}
    loss = ((ref(torch.as_tensor(u), torch.as_tensor(i)) - torch.as_tensor(y)) ** 2).mean()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())))
    assert norm > clip   # the clip acts
    ell = mc.train_step(server, u, i, y)
    assert abs(ell - float(loss.detach())) < 1e-6
    for n, p in server.net.named_parameters():
        g = grads[n] * (clip / (norm + 1e-6)) + 1e-3 * theta0[n]
        want = theta0[n] - lr * g / (g.abs() + 1e-8)
        np.testing.assert_allclose(p.detach().numpy(), want.numpy(), atol=2e-7 + 1e-4 * lr, err_msg=n)
    moved = max(float((p.detach() - theta0[n]).abs().max()) for n, p in server.net.named_parameters())
    assert 0.9 * lr < moved < 1.1 * lr


def test_a_step_in_parts_equals_the_step_in_one_piece(slice_):
    a, clients = slice_()
    b = copy.deepcopy(a)
    rows = mc.epoch_rows(a, clients, 1)
    la = mc.train_step(a, rows["user"], rows["item"], rows["label"])
    lb = mc.train_step(b, rows["user"], rows["item"], rows["label"], chunk=97)
    assert abs(la - lb) < 1e-6
    for (n, p), q in zip(a.net.named_parameters(), b.net.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=1e-7, err_msg=n)


def test_steps_lower_the_loss_on_a_batch(slice_):
    server, clients = slice_(lr=1e-2)
    rows = mc.epoch_rows(server, clients, 1)
    idx = mc.batches(len(rows["label"]), 64, np.random.default_rng(1))[0]
    losses = [mc.train_step(server, rows["user"][idx], rows["item"][idx], rows["label"][idx]) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]


def test_the_evaluation_is_the_leave_one_out_of_the_networks_scores(slice_):
    """``evaluate`` (the server's generated tables scored by the federated client) equals ranking each
    user's held-out item among its 99 negatives with the network's forward."""
    server, clients = slice_()
    got = mc.evaluate(server, clients)
    fed = clients[0].fed
    for split, neg in (("valid", fed.neg_valid), ("test", fed.neg_test)):
        users = [c.user for c in clients]
        cand = np.stack([np.r_[neg[u], fed.rows(split, u)[0]] for u in users])
        with torch.no_grad():
            s = server.net(torch.as_tensor(np.repeat([server.rows[c.cid] for c in clients], 100)),
                           torch.as_tensor(cand.reshape(-1))).view(len(users), 100).numpy()
        for ties in (False, True):
            want = M.loo_user_metrics(s[:, -1], s[:, :-1], [10], ties)
            pre = "ties:" if ties else ""
            for k in ("hr@10", "ndcg@10"):
                assert abs(got[f"{split}/{pre}{k}"] - float(np.mean(want[k]))) < 1e-9, (split, pre, k)
    assert 0 < got["test/hr@10"] < 1
