"""``one-user-eval = global`` (``client_app.pmf``): FedAvg's, FCF's and FedAtt's one-user clients
evaluated with the round's aggregate (the global item table the evaluation brings) and their own
user vector, instead of their post-training parameters (FedCA's code, the default); against a
brute-force ranking written out here, and through a run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from client_app.pmf import OneUserClient
from corolla.config import ConfigError, resolve
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions
from tests.test_oneuser_fullrank import brute, tiny_federation


def _clients(fed, cfg):
    return [SimpleNamespace(fed=fed, cfg=cfg, ks=[3], device="cpu", users=np.array([u]), item_mask=None,
                            global_eval=True) for u in range(fed.n_users)]


def test_global_evaluation_ranks_with_the_global_table_and_the_own_user_vector():
    fed = tiny_federation()
    g = np.random.default_rng(3)
    d = 4
    cfg = {"protocol": "full-rank", "compat-fedcia-metrics": False, "test-mask-valid": True, "rank-items": "own",
           "compat-sigmoid-ranking": False}
    glob = g.normal(size=(fed.n_items, d)).astype(np.float32)
    states = [{"user.weight": g.normal(size=(1, d)).astype(np.float32),
               "item.weight": g.normal(size=(fed.n_items, d)).astype(np.float32)} for _ in range(fed.n_users)]
    out = OneUserClient.batch_evaluate(_clients(fed, cfg), 3, states, {"item.weight": glob}, [{}] * fed.n_users)
    differs = 0
    for u, r in enumerate(out):
        assert r.state is None and r.payload == {}     # nothing kept, nothing uploaded
        truth = set(fed.rows("test", u).tolist())
        if not truth:
            continue
        exclude = set(fed.rows("train", u).tolist()) | set(fed.rows("valid", u).tolist())
        want = brute((glob.astype(np.float64) @ states[u]["user.weight"][0].astype(np.float64)), exclude, truth, 3)
        own = brute((states[u]["item.weight"].astype(np.float64) @ states[u]["user.weight"][0]), exclude, truth, 3)
        for name, v in want.items():
            assert r.metrics[f"test/{name}@3"] == [pytest.approx(v, abs=1e-6)], (u, name)
        differs += want != own
    assert differs > 0   # the client's own table would have ranked otherwise: the test can fail


def test_only_clients_that_start_from_the_global_table_and_not_lightgcn():
    for preset in ("fedavg-pmf-ml100k", "fcf-ncf-ml100k", "fedatt-pmf-ml100k"):
        assert resolve(preset, {"one-user-eval": "global"})["one-user-eval"] == "global"
    for preset, method in (("fedca-pmf-ml100k", "fedca"), ("local-pmf-ml100k", "local"), ("pfedrec-ml100k", "pfedrec")):
        with pytest.raises(ConfigError, match=f"one-user-eval.*method '{method}'"):
            resolve(preset, {"one-user-eval": "global"})
    with pytest.raises(ConfigError, match="one-user-eval.*lightgcn"):
        resolve("fedlightgcn-ufgraphfr-ml100k", {"one-user-eval": "global"})
    with pytest.raises(ConfigError, match="one-user-eval"):
        resolve("fedavg-pmf-ml100k", {"one-user-eval": "aggregate"})
    own = SimpleNamespace(start_from="global", p=SimpleNamespace(one_user_eval="own"))
    assert not OneUserClient.global_eval.fget(own)
    assert not OneUserClient.global_eval.fget(SimpleNamespace(start_from="own", p=SimpleNamespace(one_user_eval="global")))


def _run(tmp_path, name, data_dir, extra):
    t = InProcessTransport(partitions(2, {"data-dir": data_dir, "state-dir": str(tmp_path / name / "state")}))
    s = run_federation(t, {"preset": "fedavg-pmf-ml100k", "out-dir": str(tmp_path / name), "data-dir": data_dir,
                           "set": f"num-rounds=2 min-user-interactions=300 local-epochs=2 {extra}"})
    return s, [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]


def test_a_global_evaluation_run_evaluates_every_client_with_the_next_message(tmp_path, data_dir):
    a, ra = _run(tmp_path, "own", data_dir, "")
    b, rb = _run(tmp_path, "global", data_dir, "one-user-eval=global")
    assert a["status"] == b["status"] == "completed"
    assert rb[0]["users"]["test"] == ra[0]["users"]["test"] == 54
    # the training is the same; round 1's evaluation travels with round 2's message, the last its own
    assert [x["train"]["train-loss"] for x in ra] == [x["train"]["train-loss"] for x in rb]
    assert [p["name"] for p in ra[1]["phases"]] == ["train"]
    assert [p["name"] for p in rb[1]["phases"]] == ["train+evaluate", "evaluate"]
    assert a["metrics"] != b["metrics"]
