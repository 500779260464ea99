"""``local-init`` (Local on the silo harness, ``client_app.mf.LocalClient``): ``shared`` starts
every client from one draw of the item table and tower, ``per-client`` from a draw of each
client's own, as FedCIA's code builds one model per client for its no-aggregation rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client_app.mf import LocalClient
from corolla.config import resolve
from corolla.keys import ConfigError
from corolla.models.factory import shared_init
from tests.test_oneuser_fullrank import tiny_federation


def _starts(cls, mode):
    over = {"dim": 4, "mlp-layers": "8,4", "local-init": mode}
    cfg = resolve("local-mlp-ml100k-943", over)
    fed = tiny_federation()
    states = [cls(cfg, fed, c, np.array([c]), torch.device("cpu")).init_state() for c in range(3)]
    return cfg, fed, states


def test_shared_start_is_one_draw_for_every_client():
    assert resolve("fedavg-mf-ml100k", {"method": "local"})["local-init"] == "shared"      # the default
    cfg, fed, states = _starts(LocalClient, "shared")
    want = shared_init(cfg, fed.n_items)
    for st in states:
        for k, v in want.items():
            np.testing.assert_array_equal(st[k], v)


def test_per_client_start_is_each_clients_own_draw_and_the_same_on_a_rerun():
    cfg, fed, states = _starts(LocalClient, "per-client")
    names = [k for k in shared_init(cfg, fed.n_items)]
    assert "item.weight" in names and len(names) > 1            # the tower too
    for k in names:
        assert not np.array_equal(states[0][k], states[1][k]) and not np.array_equal(states[1][k], states[2][k])
    for st in states:                                            # each drawn as the shared one is
        assert np.isclose(st["item.weight"].std(), cfg["init-std"], rtol=0.3)
    _, _, again = _starts(LocalClient, "per-client")
    for a, b in zip(states, again):
        np.testing.assert_array_equal(a["item.weight"], b["item.weight"])


def test_local_init_is_a_key_of_local_only():
    with pytest.raises(ConfigError, match="local-init"):
        resolve("local-mlp-ml100k-943", {"local-init": "each"})
    with pytest.raises(ConfigError, match="local-init"):
        resolve("fedavg-mlp-ml100k-943", {"local-init": "per-client"})
