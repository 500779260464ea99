"""Graph-guided aggregation on the silo harness (``method = gpfedrec``, ``harness = silo``: FedCIA
Table 3's GGA column; ``client_app.gga``, ``strategies.ufgraphfr.GraphAggregation``).

The federation over 2 nodes is compared with its rounds written out one client at a time: one
model and one ``torch.optim.Adam`` per client living across rounds (FedCIA's kept optimiser
state), the item table overwritten by the server's global table before each round, the loss plus
λ·mean((Q − r_u)²), and the server's threshold graph over the uploaded tables (``corolla.graph``),
R = A E, global = mean of R's rows, r_u = R[u]."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from corolla import graph
from server_app.app import run_federation
from tests.inproc import InProcessTransport, client_states, partitions
from tests.tolerance import assert_far_beyond, f32_train_atol, max_abs_diff

# 54 heavy users of ML-100K on a random 8:1:1 split (FedCIA's published split keeps all 943)
SMALL = {"split": "ratio", "min-user-interactions": 300, "num-rounds": 2, "patience": 0, "eval-every": 1}


def _overrides(extra):
    return " ".join(f"{k}={v}" for k, v in {**SMALL, **extra}.items())


def _written_out(cfg, fed, clients, rounds, use_target=True, start_from_global=True):
    from corolla.models.factory import build_model, shared_init
    from corolla.util import rng

    init_table = shared_init(cfg, fed.n_items)["item.weight"]
    models, opts, samples = [], [], []
    for c in clients:
        st = c.init_state()
        m = build_model(cfg, 1, fed.n_items)
        m.set_arrays({k: v for k, v in st.items() if not k.startswith("samples/")})
        models.append(m)
        opts.append(torch.optim.Adam(m.parameters(), lr=cfg["lr"]))
        samples.append({k[len("samples/"):]: torch.as_tensor(v) for k, v in st.items() if k.startswith("samples/")})
    glob, pers = None, {}
    for rnd in range(1, rounds + 1):
        for j, (c, m, opt, s) in enumerate(zip(clients, models, opts, samples)):
            table = dict(m.named_parameters())["item.weight"]
            if glob is not None and start_from_global:
                with torch.no_grad():
                    table.copy_(torch.as_tensor(glob))
            target = torch.as_tensor(pers[j] if (use_target and j in pers) else init_table)
            m.train()
            n = len(s["user"])
            perm = torch.as_tensor(rng(cfg["seed"], "shuffle", c.cid, rnd).permutation(n))
            for a in range(0, n, cfg["batch-size"]):
                batch = {k: v[perm[a:a + cfg["batch-size"]]] for k, v in s.items()}
                opt.zero_grad(set_to_none=True)
                loss = m.loss(batch) + cfg["item-reg"] * ((table - target) ** 2).mean()
                loss.backward()
                opt.step()
        e = np.stack([dict(m.named_parameters())["item.weight"].detach().numpy().reshape(-1) for m in models])
        r = graph.propagate(graph.build_graph(e, "reference", 0, 1.0), e)
        glob = r.mean(0).reshape(fed.n_items, cfg["dim"]).astype(np.float32)
        pers = {j: r[j].reshape(fed.n_items, cfg["dim"]).astype(np.float32) for j in range(len(clients))}
    return [{k: v.detach().numpy() for k, v in m.named_parameters()} for m in models], glob


@pytest.mark.parametrize("preset", ["gga-mlp-ml100k-943", "gga-mf-ml100k-943"])
def test_gga_federation_equals_its_rounds_written_out(tmp_path, data_dir, preset):
    from client_app.gga import GGAClient
    from corolla.config import resolve
    from corolla.data import build_federation

    extra = {"dim": 16} if "mf" in preset else {}
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": _overrides(extra), "out-dir": str(tmp_path / "run"),
                           "data-dir": data_dir})
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
    rounds = [json.loads(x) for x in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    cfg = resolve(preset, {**SMALL, **extra})
    fed = build_federation(cfg, data_dir)
    n = len(fed.clients)
    table = fed.n_items * cfg["dim"] * 4 + 128
    assert rounds[0]["phases"][0]["bytes_up"] == n * table                  # the item table alone goes up
    assert rounds[1]["phases"][0]["bytes_down"] == 2 * table + n * table    # global once per node + r_u each
    clients = [GGAClient(cfg, fed, c, fed.clients[c], torch.device("cpu"), data_dir) for c in range(n)]
    want, glob = _written_out(cfg, fed, clients, 2)
    got = [{k: a[k] for k in want[0]} for a in client_states(tmp_path / "run", [c.cid for c in clients], 2)]
    # Adam moves a parameter by about lr a step whatever the gradient; 2 steps (one batch a round:
    # at most 4,096 rows) whose longest float32 reduction is a batch's sum
    atol = f32_train_atol(2, cfg["lr"], cfg["batch-size"])
    for j, c in enumerate(clients):
        for k, v in want[j].items():
            np.testing.assert_allclose(got[j][k], v, rtol=0, atol=atol, err_msg=f"client {c.cid} {k}")
    np.testing.assert_allclose(np.load(tmp_path / "run" / "checkpoint.npz")["global"], glob, rtol=0, atol=atol)
    for what, kw in (("target = initial table", {"use_target": False}),
                     ("start from the own table", {"start_from_global": False})):
        wrong, _ = _written_out(cfg, fed, clients, 2, **kw)
        assert_far_beyond(max(max_abs_diff(w, g) for w, g in zip(wrong, got)), atol, what=what)


def test_gga_client_uploads_only_its_table_and_evaluates_its_own_model(data_dir):
    from client_app.gga import GGAClient
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve("gga-mlp-ml100k-943", {**SMALL, "upload-noise": 0.1})
    fed = build_federation(cfg, data_dir)
    c = GGAClient(cfg, fed, 0, fed.clients[0], torch.device("cpu"), data_dir)
    st = c.init_state()
    glob = np.full_like(st["item.weight"], 0.5)
    res = c.phase_train(1, st, {"item.global": glob}, {"item.target": glob})
    assert set(res.payload) == {"item.weight"}                                 # user vector and tower stay
    noise = res.payload["item.weight"] - res.state["item.weight"]
    assert np.abs(noise).mean() == pytest.approx(0.1, rel=0.05)                # Laplace(0, 0.1) on the upload
    assert np.abs(res.state["item.weight"] - 0.5).max() < 0.01                 # started from the global table
    users = np.arange(1)
    own = c.scores(res.state, {}, {}, users, None)
    other = {k: np.zeros_like(v) for k, v in res.state.items() if k.startswith(("item.", "mlp."))}
    np.testing.assert_array_equal(c.scores(res.state, other, {}, users, None), own)   # the download is not used


def test_gga_refuses_heterogeneous_clients():
    from corolla.config import resolve
    from corolla.keys import ConfigError

    with pytest.raises(ConfigError, match="client-models"):
        resolve("gga-mf-ml100k-943", {"client-models": "mf:64|mf:32"}, None)
