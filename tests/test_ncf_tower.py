"""``ncf-tower = personal`` (one-user harness, FedAvg and FCF with the NCF model): only the item
table crosses and each client keeps its own tower (the FedCA paper's §3, "we will use item
embedding table Q_u to instantiate general Θ_u"), against the default, FedCA's code, which averages
the tower with the table."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from client_app.pmf import OneUserClient
from corolla.config import ConfigError, resolve
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions

TOWER = 32 * 16 + 16 + 16 * 8 + 8 + 8 + 1     # 32 -> 16 -> 8 -> 1, float32


def test_only_the_averaging_baselines_with_the_ncf_model_take_it():
    for preset in ("fedavg-ncf-ml100k", "fcf-ncf-filmtrust"):
        assert resolve(preset, {"ncf-tower": "personal"})["ncf-tower"] == "personal"
    assert resolve("fedavg-ncf-ml100k")["ncf-tower"] == "shared"
    for preset, method in (("fedca-ncf-ml100k", "fedca"), ("fedatt-ncf-ml100k", "fedatt"), ("local-ncf-ml100k", "local")):
        with pytest.raises(ConfigError, match=f"ncf-tower.*method '{method}'"):
            resolve(preset, {"ncf-tower": "personal"})
    with pytest.raises(ConfigError, match="ncf-tower.*model='mf'"):
        resolve("fedavg-pmf-ml100k", {"ncf-tower": "personal"})
    for extra in ({"one-user-eval": "global"}, {"item-upload": "rows"}):
        with pytest.raises(ConfigError, match="ncf-tower.*item-upload='full' and one-user-eval='own'"):
            resolve("fedavg-ncf-ml100k", {"ncf-tower": "personal", **extra})
    with pytest.raises(ConfigError, match="ncf-tower"):
        resolve("fedavg-ncf-ml100k", {"ncf-tower": "local"})


def test_the_upload_leaves_the_tower_home():
    new = {"user.weight": np.zeros((1, 4)), "item.weight": np.ones((5, 4)), "mlp.0.weight": np.ones((2, 8))}
    for tower, want in (("shared", ["item.weight", "mlp.0.weight"]), ("personal", ["item.weight"])):
        c = SimpleNamespace(uploads=True, p=SimpleNamespace(ncf_tower=tower))
        assert sorted(OneUserClient.upload(c, new, None, {})) == want


def _run(tmp_path, name, data_dir, extra):
    t = InProcessTransport(partitions(2, {"data-dir": data_dir, "state-dir": str(tmp_path / name / "state")}))
    s = run_federation(t, {"preset": "fedavg-ncf-ml100k", "out-dir": str(tmp_path / name), "data-dir": data_dir,
                           "set": f"num-rounds=2 min-user-interactions=300 local-epochs=2 {extra}"})
    rounds = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    with np.load(tmp_path / name / "checkpoint.npz") as z:
        server = sorted(k for k in z.files if k.startswith("global/"))
    return s, rounds, server


def test_a_personal_tower_run_sends_the_table_only_and_trains_on_from_its_own_tower(tmp_path, data_dir):
    a, ra, sa = _run(tmp_path, "shared", data_dir, "")
    b, rb, sb = _run(tmp_path, "personal", data_dir, "ncf-tower=personal")
    assert a["status"] == b["status"] == "completed"
    assert sb == ["global/item.weight"] and "global/mlp.0.weight" in sa   # the server never holds a tower
    n = ra[0]["clients"]
    for x, y in zip(ra, rb):     # every client's upload and download is one tower lighter
        up = x["phases"][0]["bytes_up"] - y["phases"][0]["bytes_up"]
        assert up >= n * TOWER * 4 and x["phases"][0]["bytes_down"] > y["phases"][0]["bytes_down"]
    # round 1 starts from the same shared initialisation; round 2 from the client's own tower
    assert ra[0]["train"]["train-loss"] == rb[0]["train"]["train-loss"]
    assert ra[1]["train"]["train-loss"] != rb[1]["train"]["train-loss"]
