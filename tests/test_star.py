"""FedLightGCN on the one-user harness: LightGCN's closed form on one user's first-order graph
(``corolla.models.star``) against the explicit graph, the batched trainer against one user at a
time with ``corolla.models.LightGCN``, and the configuration it refuses."""

from functools import partial

import numpy as np
import pytest
import torch

from corolla.models.factory import build_model
from corolla.models.lightgcn import normalized_adjacency, propagate
from corolla.models.stacked import stack, train_one, train_stacked, train_users, unstack
from corolla.models.star import star_embeddings, star_logits
from tests.oneuser import one_user_problem
from tests.tolerance import assert_far_beyond, f32_train_atol, max_abs_diff

M, D = 30, 4


def _explicit(user, table, pos_items, layers):
    """LightGCN on the explicit (1 + M)-node graph of one user: (ū, ī for every item), float64."""
    adj = normalized_adjacency(1, M, np.zeros(len(pos_items), np.int64), np.asarray(pos_items, np.int64))
    idx = adj.indices().numpy()
    deg = np.bincount(idx[0], minlength=1 + M).astype(np.float64)   # its edges, weights in float64
    vals = deg[idx[0]] ** -0.5 * deg[idx[1]] ** -0.5
    adj = torch.sparse_coo_tensor(idx, vals, adj.shape, check_invariants=True).coalesce()
    out = propagate(adj, torch.cat([user[None], table]).double(), layers)
    return out[0], out[1:]


@pytest.mark.parametrize("layers", [0, 1, 2, 3, 4, 5])
def test_closed_form_equals_the_explicit_graph(layers):
    g = torch.Generator().manual_seed(layers)
    sizes = [1, 3, 7, 0]                       # the last client has no positive: no edge at all
    user = torch.randn(len(sizes), D, generator=g, dtype=torch.float64)
    table = torch.randn(len(sizes), M, D, generator=g, dtype=torch.float64)
    pos = torch.zeros(len(sizes), M, dtype=torch.float64)
    chosen = []
    for b, n in enumerate(sizes):
        items = torch.randperm(M, generator=g)[:n]
        pos[b, items] = 1.0
        chosen.append(items.numpy())
    u_bar, c = star_embeddings(user, table, pos, layers)
    items = torch.arange(M).expand(len(sizes), M)
    logits = star_logits(user, table, pos, items, layers)
    for b in range(len(sizes)):
        want_u, want_i = _explicit(user[b], table[b], chosen[b], layers)
        np.testing.assert_allclose(u_bar[b].numpy(), want_u.numpy(), rtol=0, atol=1e-12)
        got_i = (table[b] + pos[b, :, None] * c[b]) / (layers + 1)
        np.testing.assert_allclose(got_i.numpy(), want_i.numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(logits[b].numpy(), (want_i @ want_u).numpy(), rtol=0, atol=1e-12)
    if layers:
        # the positives' rows differ from layer 0 alone (the user's part), the others do not
        b = 2
        assert not np.allclose(logits[b].numpy(), ((table[b] / (layers + 1)) @ u_bar[b]).numpy())


def test_by_hand_one_layer():
    # one user e_u = (1, 0), positives e_1 = (0, 2) and e_2 = (2, 0), n = 2, w = 1/√2, K = 1:
    # ū = (e_u + w(e_1 + e_2)) / 2 = ((1 + √2), √2) / 2; ī_1 = (e_1 + w e_u) / 2, ī_0 = e_0 / 2
    user = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    table = torch.tensor([[[5.0, 5.0], [0.0, 2.0], [2.0, 0.0]]], dtype=torch.float64)
    pos = torch.tensor([[0.0, 1.0, 1.0]], dtype=torch.float64)
    w = 2 ** -0.5
    u_bar = np.array([1 + w * 2, w * 2]) / 2
    i = [np.array([5.0, 5.0]) / 2, (np.array([0.0, 2.0]) + w * np.array([1.0, 0.0])) / 2,
         (np.array([2.0, 0.0]) + w * np.array([1.0, 0.0])) / 2]
    got = star_logits(user, table, pos, torch.tensor([[0, 1, 2]]), 1)
    np.testing.assert_allclose(got[0].numpy(), [u_bar @ x for x in i], rtol=0, atol=1e-12)


BATCH, LR, EPOCHS, LAYERS = 8, 0.05, 4, 3


def _cfg():
    return {"model": "lightgcn", "dim": D, "loss": "bce", "weight-decay": 0.0, "gcn-layers": LAYERS}


def _problem(users=5):
    return one_user_problem(_cfg(), users, M, 3, (1, 9), EPOCHS)


def _reference(state, sample, perm, pos, lr=LR):
    ref = build_model(_cfg(), 1, M)
    ref.set_arrays(state)
    ref.set_graph(np.zeros(len(pos), np.int64), pos.astype(np.int64))
    loss = train_one(ref, sample, perm, BATCH, lr, 0.0, 0.0, 0.0)
    return ref.get_arrays(), loss


def _batched_equals_reference(states, samples, perms, positives, terms: int):
    """Train the clients batched (:func:`train_stacked`, and compacted through :func:`train_users`)
    and check each against ``corolla.models.LightGCN`` trained alone (:func:`_reference`); returns
    (the batched states, the tolerance). ``terms``: the logit columns a row's loss reads (1 for
    BCE, 2 for a BPR pair)."""
    names = list(states[0])
    params, losses = train_stacked(stack(states, names, torch.device("cpu")), samples, perms, BATCH, LR, 0.0, 0.0,
                                   0.0, graph_layers=LAYERS)
    got = unstack(params)
    trainer = partial(train_stacked, batch_size=BATCH, lr_emb=LR, lr_mlp=0.0, wd_mlp=0.0, early_break=0.0,
                      graph_layers=LAYERS)
    compact, closses = train_users(states, samples, perms, trainer, torch.device("cpu"), chunk=2)
    # each step's longest float32 reduction: a mini-batch of rows (times the columns a row's loss
    # reads) over d, and the sum over the positives (at most 8) in each of the K + 1 layers
    # (tests/tolerance.py)
    steps = EPOCHS * max(-(-len(s["item"]) // BATCH) for s in samples)
    atol = f32_train_atol(steps, LR, terms * (BATCH + 8) * D * (LAYERS + 1))
    for u in range(len(states)):
        want, loss = _reference(states[u], samples[u], perms[u], positives[u])
        assert losses[u] == pytest.approx(loss, abs=atol)
        assert closses[u] == pytest.approx(loss, abs=atol)
        for k, v in want.items():
            np.testing.assert_allclose(got[u][k], v, rtol=0, atol=atol, err_msg=f"user {u} {k}")
            np.testing.assert_allclose(compact[u][k], v, rtol=0, atol=atol, err_msg=f"compact, user {u} {k}")
    return got, atol


def test_batched_training_equals_lightgcn_one_user_at_a_time():
    states, samples, perms, positives = _problem()
    names = list(states[0])
    got, atol = _batched_equals_reference(states, samples, perms, positives, terms=1)
    # the comparison can fail: MF's logits (no graph), or a 1 % larger learning rate
    u = int(np.argmax([len(p) for p in positives]))
    mf, _ = train_stacked(stack([states[u]], names, torch.device("cpu")), [samples[u]], [perms[u]], BATCH, LR, 0.0,
                          0.0, 0.0)
    assert_far_beyond(max_abs_diff(unstack(mf)[0], got[u]), atol, what="no graph")
    wrong, _ = _reference(states[u], samples[u], perms[u], positives[u], lr=LR * 1.01)
    assert_far_beyond(max_abs_diff(wrong, got[u]), atol, what="lr x 1.01")


def test_fedlightgcn_refuses_row_uploads():
    from corolla.config import ConfigError, resolve

    with pytest.raises(ConfigError, match="'item-upload'.*lightgcn"):
        resolve("fedlightgcn-ufgraphfr-ml100k", {"item-upload": "rows"}, None)
    with pytest.raises(ValueError, match="gcn-layers"):
        star_embeddings(torch.zeros(1, 2), torch.zeros(1, 3, 2), torch.zeros(1, 3), -1)


def test_lightgcn_loss_is_the_harness_rule():
    from corolla.config import ConfigError, resolve

    assert resolve("fedlightgcn-ufgraphfr-ml100k", {}, None)["loss"] == "bce"   # one-user: the harness's BCE
    with pytest.raises(ConfigError, match="'loss'.*bpr"):
        resolve("fedavg-lightgcn-ml100k", {"loss": "bce"}, None)                  # silo: LightGCN's own BPR


# --------------------------------------------------------------------------- loss = bpr


def test_bpr_pairs_by_hand():
    from corolla.models.stacked import bpr_pairs

    rows = {"item": np.array([3, 7, 8, 5, 1, 2]), "label": np.array([1, 0, 0, 1, 0, 0], np.float32)}
    got = bpr_pairs(rows, 2)
    np.testing.assert_array_equal(got["item"], [3, 3, 5, 5])
    np.testing.assert_array_equal(got["neg"], [7, 8, 1, 2])
    np.testing.assert_array_equal(got["label"], [1, 1, 1, 1])
    with pytest.raises(ValueError, match="k=4"):
        bpr_pairs(rows, 4)                      # 6 rows are not blocks of 5
    with pytest.raises(ValueError, match="positive"):
        bpr_pairs({"item": rows["item"], "label": rows["label"][::-1].copy()}, 2)


def _pair_problem(users=5):
    from corolla.models.stacked import bpr_pairs, epoch_permutations

    states, samples, _, positives = _problem(users)
    g = np.random.default_rng(11)
    pairs = [bpr_pairs(s, 4) for s in samples]
    return states, pairs, [epoch_permutations(g, len(p["item"]), EPOCHS) for p in pairs], positives


def test_batched_bpr_equals_lightgcn_one_user_at_a_time():
    """``loss = bpr`` (FedLightGCN with LightGCN's own loss): the batched trainer on BPR pairs equals
    ``corolla.models.LightGCN`` trained one user at a time on softplus(s_neg − s_pos)."""
    states, samples, perms, positives = _pair_problem()
    names = list(states[0])
    got, atol = _batched_equals_reference(states, samples, perms, positives, terms=2)
    # the comparison can fail: the BCE on the same pairs' items (the 'neg' column dropped), or the
    # negatives of another user
    u = int(np.argmax([len(p) for p in positives]))
    bce = {"item": samples[u]["item"], "label": samples[u]["label"]}
    wrong, _ = _reference(states[u], bce, perms[u], positives[u])
    assert_far_beyond(max_abs_diff(wrong, got[u]), atol, what="BCE instead of BPR")
    shifted = {**samples[u], "neg": (samples[u]["neg"] + 1) % M}
    wrong, _ = _reference(states[u], shifted, perms[u], positives[u])
    assert_far_beyond(max_abs_diff(wrong, got[u]), atol, what="other negatives")
    with pytest.raises(ValueError, match="one kind"):
        train_stacked(stack(states[:2], names, torch.device("cpu")), [samples[0], bce], perms[:2], BATCH, LR, 0.0,
                      0.0, 0.0, graph_layers=LAYERS)


def test_fedlightgcn_bpr_is_fedavgs_only_and_trains_the_same_rows(data_dir):
    """``loss = bpr`` on the one-user harness: FedAvg's clients (FedMF, FedNCF, FedLightGCN) take it,
    other methods refuse it; a client's pairs are its BCE rows' positives and negatives."""
    from client_app.oneuser import round_samples
    from client_app.pmf import OneUserClient
    from corolla.config import ConfigError, resolve
    from corolla.data.federation import build_federation
    from corolla.methods import run_params

    assert resolve("fedlightgcn-ufgraphfr-ml100k", {"loss": "bpr"}, None)["loss"] == "bpr"
    with pytest.raises(ConfigError, match="'loss'"):
        resolve("pfedrec-ml100k", {"loss": "bpr"}, None)
    cfgs = {loss: resolve("fedlightgcn-ufgraphfr-ml100k", {"loss": loss}, None) for loss in ("bce", "bpr")}
    fed = build_federation(cfgs["bce"], data_dir)
    got = {}
    for loss, cfg in cfgs.items():
        clients = [OneUserClient(cfg, fed, c, fed.clients[c], torch.device("cpu"), data_dir, run_params(cfg))
                   for c in (0, 5)]
        got[loss] = round_samples(clients, 3)
    for rows, pairs, perm in zip(got["bce"][0], got["bpr"][0], got["bpr"][1]):
        k = cfgs["bce"]["num-negatives"]
        block = rows["item"].reshape(-1, k + 1)
        np.testing.assert_array_equal(pairs["item"], np.repeat(block[:, 0], k))
        np.testing.assert_array_equal(pairs["neg"], block[:, 1:].reshape(-1))
        assert all(len(p) == len(pairs["item"]) for p in perm)
