"""FedRecon (docs/methods/fedrecon.md) against a NumPy transcription of the authors' training loop
(google-research/federated a5af8c4 ``reconstruction/``: ``build_dataset_split_fn``,
reconstruction_utils.py:114-160; ``client_update``, training_process.py:290-399; the weighted
``MeanFactory`` and ``server_update``, l.139-186 and 476-509) on a tiny case, plus the unit's
plumbing: the declaration, the stacked trainer equal to one client at a time, stateless clients
and the server learning rate."""

import numpy as np
import pytest
import torch

from client_app.fedrecon import Plan, fedrecon_stacked, plan, table_lr
from corolla import methods
from corolla.config import resolve
from corolla.keys import ConfigError
from corolla.round import Phase
from strategies.base import ClientResult
from strategies.fedrecon import FedRecon

# ---------------------------------------------------------------- the authors' loop, transcribed


def split_fn(batches, split, recon_epochs, recon_steps, post_epochs, post_steps):
    """reconstruction_utils.py:114-160: enumerate().filter(i % 2 == 0 / > 0) when split, then
    repeat(epochs) and take(steps_max) (None = no cap)."""
    rec = [b for i, b in enumerate(batches) if i % 2 == 0] if split else list(batches)
    post = [b for i, b in enumerate(batches) if i % 2 > 0] if split else list(batches)
    rec = rec * recon_epochs
    if recon_steps is not None:
        rec = rec[:recon_steps]
    post = post * post_epochs
    if post_steps is not None:
        post = post[:post_steps]
    return rec, post


def mse_grads(u, q, items, y):
    """Keras MeanSquaredError on the MF prediction dot(u, q_i) of a batch: gradients w.r.t. u and q."""
    pred = q[items] @ u
    r = 2.0 * (pred - y) / len(items)
    gu = (r[:, None] * q[items]).sum(0)
    gq = np.zeros_like(q)
    np.add.at(gq, items, r[:, None] * u[None, :])
    return gu, gq


def client_update(g, u0, batches, lr_r, lr, split, recon_steps):
    """training_process.py:290-399: reconstruction on the local variable (SGD lr_r), then the
    global one (SGD lr); returns (delta, client weight = post-reconstruction examples)."""
    rec, post = split_fn(batches, split, 1, recon_steps, 1, None)
    u, q = u0.astype(np.float64).copy(), g.astype(np.float64).copy()
    for items, y in rec:
        gu, _ = mse_grads(u, q, items, y)
        u -= lr_r * gu
    n = 0
    for items, y in post:
        _, gq = mse_grads(u, q, items, y)
        q -= lr * gq
        n += len(items)
    return q - g, float(n)


def server_round(g, deltas, weights, eta):
    """MeanFactory (weighted mean of the deltas) then server SGD(η): g − η·(−Δ̄)."""
    w = np.asarray(weights)
    mean = sum(wk * d for wk, d in zip(w, deltas)) / w.sum()
    return g + eta * mean


# ---------------------------------------------------------------- the tiny case
ITEMS = [np.array([0, 3, 1, 5, 2]), np.array([4, 2, 0, 1]), np.array([5, 5, 3, 0, 4, 2])]
LABELS = [np.array([1, 0, 1, 0, 0], np.float32), np.array([1, 1, 0, 0], np.float32),
          np.array([1, 0, 0, 1, 0, 1], np.float32)]


def batches_of(c, bs=2):
    return [(ITEMS[c][a:a + bs], LABELS[c][a:a + bs]) for a in range(0, len(ITEMS[c]), bs)]


def corolla_round(g, users0, lr_r, lr, split, recon_steps, eta, weighting="examples"):
    """One round through Corolla's plan + stacked trainer + the FedRecon strategy's aggregation."""
    samples = [{"item": ITEMS[c].astype(np.int64), "label": LABELS[c]} for c in range(3)]
    plans = [plan(np.arange(len(ITEMS[c])), 2, split, 1, recon_steps or 0, 1, 0) for c in range(3)]
    B = 3
    params = {"user.weight": torch.as_tensor(np.stack(users0))[:, None, :].float().clone(),
              "item.weight": torch.as_tensor(np.stack([g] * B)).float().clone()}
    params, _ = fedrecon_stacked(params, samples, plans, lr_r, lr, joint=False, loss="mse")
    cfg = resolve("fedrecon-ufgraphfr-ml100k", {"fedrecon-server-lr": eta, "fedrecon-weighting": weighting})
    s = FedRecon(cfg)
    s.global_params = {"item.weight": g.astype(np.float32)}
    res = {c: ClientResult({"item.weight": params["item.weight"][c].numpy()},
                           {"num-examples": plans[c].post_examples, "train-loss": 0.0}) for c in range(B)}
    s.aggregate_phase(Phase.TRAIN, 1, res)
    return s.global_params["item.weight"], [p.post_examples for p in plans]


@pytest.mark.parametrize("split,recon_steps,eta", [(False, None, 1.0), (True, None, 1.0), (False, 1, 0.5),
                                                    (True, 1, 2.0)])
def test_two_rounds_equal_the_transcribed_authors_loop(split, recon_steps, eta):
    """3 users, 6 items, d = 4, MSE, batch 2, fixed initial tables and user vectors, two rounds
    (the user vector drawn afresh each round): the global table and the client weights equal the
    transcription's within 1e-6 (float32 SGD against float64; only rounding differs)."""
    rs = np.random.default_rng(3)
    g0 = rs.uniform(-0.5, 0.5, (6, 4)).astype(np.float32)
    g_ref, g = g0.copy(), g0.copy()
    for rnd in range(2):
        users0 = [rs.uniform(-0.5, 0.5, 4).astype(np.float32) for _ in range(3)]
        out = [client_update(g_ref, users0[c], batches_of(c), 0.3, 0.2, split, recon_steps) for c in range(3)]
        g_ref = server_round(g_ref, [d for d, _ in out], [w for _, w in out], eta).astype(np.float32)
        g, weights = corolla_round(g, users0, 0.3, 0.2, split, recon_steps, eta)
        assert weights == [w for _, w in out]
        np.testing.assert_allclose(g, g_ref, atol=1e-6)
    assert np.abs(g - g0).max() > 1e-2   # the table moved


def test_the_split_function():
    """Even batches reconstruct, odd ones update; epochs repeat before the step cap."""
    order = np.arange(7)
    p = plan(order, 2, True, 2, 3, 2, 0)
    assert [b.tolist() for b in p.recon] == [[0, 1], [4, 5], [0, 1]]
    assert [b.tolist() for b in p.post] == [[2, 3], [6], [2, 3], [6]] and p.post_examples == 6
    p = plan(order, 4, False, 1, 0, 1, 1)
    assert [b.tolist() for b in p.recon] == [[0, 1, 2, 3], [4, 5, 6]] and [b.tolist() for b in p.post] == [[0, 1, 2, 3]]


def test_uniform_weighting_and_an_empty_update():
    """'uniform' weights every client 1 (the code under DP); a client with no update batch (split with
    one batch) has weight 0 and leaves its table unchanged."""
    rs = np.random.default_rng(0)
    g = rs.uniform(-0.5, 0.5, (6, 4)).astype(np.float32)
    users0 = [rs.uniform(-0.5, 0.5, 4).astype(np.float32) for _ in range(3)]
    out = [client_update(g, users0[c], batches_of(c), 0.3, 0.2, False, None) for c in range(3)]
    ref = server_round(g, [d for d, _ in out], [1, 1, 1], 1.0)
    got, _ = corolla_round(g, users0, 0.3, 0.2, False, None, 1.0, weighting="uniform")
    np.testing.assert_allclose(got, ref, atol=1e-6)
    one = plan(np.arange(2), 2, True, 1, 0, 1, 0)
    assert one.post == [] and one.post_examples == 0


def test_stacked_equals_one_client_at_a_time_with_bce():
    rs = np.random.default_rng(1)
    g = rs.uniform(-0.5, 0.5, (6, 4)).astype(np.float32)
    samples = [{"item": ITEMS[c].astype(np.int64), "label": LABELS[c]} for c in range(3)]
    plans = [plan(np.arange(len(ITEMS[c])), 2, False, 2, 0, 2, 3) for c in range(3)]
    u0 = rs.uniform(-0.5, 0.5, (3, 1, 4)).astype(np.float32)
    stacked = {"user.weight": torch.as_tensor(u0).clone(), "item.weight": torch.as_tensor(np.stack([g] * 3)).clone()}
    stacked, loss = fedrecon_stacked(stacked, samples, plans, 0.3, 0.2, joint=True, loss="bce")
    for c in range(3):
        one = {"user.weight": torch.as_tensor(u0[c:c + 1]).clone(), "item.weight": torch.as_tensor(g[None]).clone()}
        one, lc = fedrecon_stacked(one, [samples[c]], [plans[c]], 0.3, 0.2, joint=True, loss="bce")
        for k in one:
            np.testing.assert_allclose(one[k][0].numpy(), stacked[k][c].numpy(), atol=1e-7)
        assert abs(lc[0] - loss[c]) < 1e-9


def test_declaration_keys_and_checks():
    m = methods.find("fedrecon", "one-user", "mf")
    assert m.row_upload and m.requires == {"optimizer": "sgd"}
    cfg = resolve("fedrecon-ufgraphfr-ml100k")
    assert methods.run_params(cfg).fedrecon_server_lr == 1.0
    with pytest.raises(ConfigError, match="fedrecon-recon-epochs"):
        resolve("fedrecon-ufgraphfr-ml100k", {"fedrecon-recon-epochs": 0})
    with pytest.raises(ConfigError, match="optimizer"):
        resolve("fedrecon-ufgraphfr-ml100k", {"optimizer": "adam"})


def test_a_run_is_stateless_and_rows_upload_gives_the_same_numbers(tmp_path, data_dir):
    """2 rounds on 60 users: the clients keep nothing (their saved state is empty) and
    item-upload = rows gives the full upload's metrics with fewer bytes."""
    from server_app.app import run_federation
    from tests.inproc import InProcessTransport, partitions

    out = {}
    for mode in ("full", "rows"):
        t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
        out[mode] = run_federation(t, {"preset": "fedrecon-ufgraphfr-ml100k",
                                       "set": f"num-rounds=2 max-users=60 item-upload={mode} lr=50 fedrecon-recon-lr=5",
                                       "out-dir": str(tmp_path / mode), "data-dir": data_dir})
    for k, v in out["full"]["metrics"].items():
        assert abs(v - out["rows"]["metrics"][k]) < 1e-6, k
    assert out["rows"]["bytes_up"] < out["full"]["bytes_up"] / 2
    states = list((tmp_path / "full").rglob("c*.r*.npz"))
    assert states and all(not np.load(p).files for p in states)


def test_the_table_rate_is_lr_or_ufgraphfrs_item_rule():
    assert table_lr(0.1, 1682, 0.0) == 0.1                      # the authors' code: the core lr
    assert abs(table_lr(0.1, 1682, 80.0) - 13455.9) < 1e-9      # 0.1 · 1682 · 80 − 0.1 (UFGraphFR's engines)
    assert abs(table_lr(0.01, 10, 2.0) - 0.19) < 1e-12          # 0.01 · 10 · 2 − 0.01
    with pytest.raises(ConfigError, match="fedrecon-table-lr-eta"):
        resolve("fedrecon-ufgraphfr-ml100k", {"fedrecon-table-lr-eta": -1.0}, None)
