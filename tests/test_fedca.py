"""FedCA harness: the batched one-user training equals one user at a time; client/strategy."""

import numpy as np
import pytest
import torch

from corolla.models.base import build_model
from corolla.models.stacked import (epoch_permutations, stack, train_one, train_stacked, train_users,
                                    training_rows, unstack)


def _cfg(model):
    return {"model": model, "dim": 4, "loss": "bce", "weight-decay": 0.0, "mlp-layers": "8,4"}


@pytest.mark.parametrize("model", ["mf", "ncf"])
@pytest.mark.parametrize("early_break", [0.0, 1e-2])
def test_batched_training_equals_one_user_at_a_time(model, early_break):
    g = np.random.default_rng(0)
    m_items, users = 40, 6
    states, samples, perms = [], [], []
    torch.manual_seed(0)
    template = build_model(_cfg(model), 1, m_items)
    for u in range(users):
        st = {k: v.detach().numpy().copy() for k, v in template.named_parameters()}
        st["user.weight"] = g.normal(size=(1, 4)).astype(np.float32)
        states.append(st)
        pos = g.choice(m_items, size=int(g.integers(1, 9)), replace=False)
        pool = np.setdiff1d(np.arange(m_items), pos)
        s = training_rows(pos, pool, 4, g)
        samples.append(s)
        perms.append(epoch_permutations(g, len(s["item"]), 5))
    names = list(states[0])
    params = stack(states, names, torch.device("cpu"))
    params, losses = train_stacked(params, samples, perms, 8, 0.05, 0.02, 1e-3, early_break)
    got = unstack(params)
    compact, closses = train_users(states, samples, perms, 8, 0.05, 0.02, 1e-3, early_break,
                                   torch.device("cpu"), chunk=4)
    for u in range(users):
        assert closses[u] == pytest.approx(losses[u], rel=1e-6)
        for k in got[u]:
            np.testing.assert_allclose(compact[u][k], got[u][k], rtol=1e-6, atol=1e-7)
        ref = build_model(_cfg(model), 1, m_items)
        ref.set_arrays(states[u])
        loss = train_one(ref, samples[u], perms[u], 8, 0.05, 0.02, 1e-3, early_break)
        assert losses[u] == pytest.approx(loss, rel=1e-5)
        for k, v in ref.get_arrays().items():
            np.testing.assert_allclose(got[u][k], v, rtol=1e-5, atol=1e-6, err_msg=f"user {u} {k}")


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
