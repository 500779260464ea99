"""The centralised references (``method = central``, docs/methods/central.md): the declaration and its
checks, SGL's views, loss and Adam step against the authors' SGL-Torch on a tiny graph (golden
tensors written by ``benchmarks/authors_golden.py sgl`` from wujcan/SGL-Torch c5632881), SGL's
sampler, and central MF = the silo harness's Local with one client."""

from pathlib import Path

import numpy as np
import pytest
import torch

from corolla import methods
from corolla.config import resolve
from corolla.keys import ConfigError
from corolla.models.sgl import SGL, draw_views, edges_without, kept_edges, view_adjacency

GOLDEN = Path(__file__).parent / "data" / "sgl_golden.npz"


def golden():
    return dict(np.load(GOLDEN))


def test_declaration_and_checks():
    m = methods.find("central", "silo", "sgl")
    assert m.strategy == "strategies.fedavg:Local" and m.client == "client_app.central:CentralClient"
    for p in ("central-mf-ufgraphfr-ml100k", "central-ncf-ufgraphfr-ml100k", "central-sgl-ufgraphfr-ml100k",
              "central-mf-fedca-ml100k", "central-ncf-fedca-ml100k", "central-sgl-fedca-ml100k"):
        cfg = resolve(p)
        assert cfg["method"] == "central" and cfg["num-clients"] == 1 and cfg["optimizer-state"] == "persist"
    with pytest.raises(ConfigError, match="one logical client holding every user"):
        resolve("central-mf-ufgraphfr-ml100k", {"num-clients": 2})
    with pytest.raises(ConfigError, match="persist"):
        resolve("central-mf-ufgraphfr-ml100k", {"optimizer-state": "fresh"})
    with pytest.raises(ConfigError, match="SGL is trained with 'bpr'"):
        resolve("central-sgl-ufgraphfr-ml100k", {"loss": "bce"})


def test_sgl_views_equal_the_authors_create_adj_mat():
    """Edge dropout with the same kept edges and node dropout with the same dropped nodes give the
    authors' normalised sub-graph adjacencies (float32 vs their float64 scipy: 1e-7)."""
    g = golden()
    nu, ni = int(g["params"][0]), int(g["params"][1])
    u, i = g["users"], g["items"]
    full = view_adjacency(nu, ni, u, i, np.arange(len(u))).to_dense().numpy()
    np.testing.assert_allclose(full, g["full"], atol=1e-7)
    for keep, want in ((g["keep1"], g["view1"]), (g["keep2"], g["view2"])):
        np.testing.assert_allclose(view_adjacency(nu, ni, u, i, keep).to_dense().numpy(), want, atol=1e-7)
    keep = edges_without(u, i, nu, ni, g["nd_users"], g["nd_items"])
    np.testing.assert_allclose(view_adjacency(nu, ni, u, i, keep).to_dense().numpy(), g["view_nd"], atol=1e-7)
    # the draws: int(|E|·(1−ρ)) distinct edges; ρ·|U| users and ρ·|I| items dropped; rw one set per layer
    rng = np.random.default_rng(0)
    k = kept_edges(11, 0.3, rng)
    assert len(k) == 7 and len(set(k.tolist())) == 7
    assert len(draw_views(nu, ni, u, i, "rw", 0.3, 3, rng)) == 3


def test_sgl_loss_gradients_and_adam_step_equal_the_authors_code():
    """Same initial embeddings, views and batch: the code's BPR, InfoNCE and L2 sums, the gradients
    and the parameters after one Adam step agree within 1e-6 (float32; CSR vs COO products differ
    only in summation order)."""
    g = golden()
    nu, ni, d, layers = (int(x) for x in g["params"])
    ratio, temp, ssl_reg, reg = (float(x) for x in g["hyper"])
    m = SGL(nu, ni, d, layers, reg, ssl_reg, temp)
    m.set_arrays({"user.weight": g["user0"], "item.weight": g["item0"]})
    m.set_graph(g["users"], g["items"])
    m.set_views(g["users"], g["items"], [g["keep1"]], [g["keep2"]])
    batch = {k: torch.as_tensor(g[f"batch_{k}"]) for k in ("user", "pos", "neg")}
    t = m.loss_terms(batch)
    assert abs(t["bpr"].item() - float(g["bpr"])) < 1e-5
    assert abs(t["infonce"].item() - float(g["infonce"])) < 1e-5
    assert abs(t["reg"].item() - float(g["reg"])) < 1e-6
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    loss = m.loss(batch)
    assert abs(loss.item() - float(g["loss"])) < 1e-5
    loss.backward()
    np.testing.assert_allclose(m.user.weight.grad.numpy(), g["grad_user"], atol=1e-6)
    np.testing.assert_allclose(m.item.weight.grad.numpy(), g["grad_item"], atol=1e-6)
    opt.step()
    np.testing.assert_allclose(m.user.weight.detach().numpy(), g["user1"], atol=1e-6)
    np.testing.assert_allclose(m.item.weight.detach().numpy(), g["item1"], atol=1e-6)


def test_sgl_with_random_walk_views_and_no_ssl_term():
    """rw propagates each layer on its own view; ssl_reg = 0 leaves BPR + reg (LightGCN with sums)."""
    g = golden()
    nu, ni, d, layers = (int(x) for x in g["params"])
    m = SGL(nu, ni, d, layers, 0.0, 0.0, 0.2)
    m.set_arrays({"user.weight": g["user0"], "item.weight": g["item0"]})
    m.set_graph(g["users"], g["items"])
    rng = np.random.default_rng(1)
    m.set_views(g["users"], g["items"], draw_views(nu, ni, g["users"], g["items"], "rw", 0.3, layers, rng),
                draw_views(nu, ni, g["users"], g["items"], "rw", 0.3, layers, rng))
    batch = {k: torch.as_tensor(g[f"batch_{k}"]) for k in ("user", "pos", "neg")}
    assert abs(m.loss(batch).item() - float(g["bpr"])) < 1e-5
    assert torch.isfinite(m.loss_terms(batch)["infonce"])


def test_sgl_sampler_is_user_uniform_over_training_interactions(data_dir):
    """SGL's PairwiseSamplerV2: as many triples as training interactions, each positive in the user's
    training items and each negative outside them, users drawn uniformly (not by activity)."""
    from client_app.central import CentralClient
    from corolla.data import build_federation

    cfg = resolve("central-sgl-ufgraphfr-ml100k")
    fed = build_federation(cfg, data_dir)
    c = CentralClient(cfg, fed, 0, fed.clients[0], torch.device("cpu"))
    s = c.samples({}, 1)
    n = fed.count("train", fed.clients[0])
    assert len(s["user"]) == n
    for row in range(0, n, 997):
        train = set(fed.rows("train", int(fed.clients[0][s["user"][row]])).tolist())
        assert s["pos"][row] in train and s["neg"][row] not in train
    counts = np.bincount(s["user"], minlength=len(fed.clients[0]))
    assert counts.std() / counts.mean() < 0.2   # uniform over users (by activity it would be ~1)
    assert not np.array_equal(c.samples({}, 2)["pos"], s["pos"])   # re-drawn each epoch


def test_central_mf_equals_local_with_one_client(tmp_path, data_dir):
    """``central`` with MF is the silo harness's Local with one client holding every user: the same
    numbers, 0 bytes."""
    from server_app.app import run_federation
    from tests.inproc import InProcessTransport, partitions

    common = "num-rounds=2 max-users=100 batch-size=1024"
    out = {}
    for name, extra in (("central", ""), ("local", "method=local")):
        t = InProcessTransport(partitions(1, {"data-dir": data_dir}))
        out[name] = run_federation(t, {"preset": "central-mf-ufgraphfr-ml100k", "set": f"{common} {extra}",
                                       "out-dir": str(tmp_path / name), "data-dir": data_dir})
    assert out["central"]["metrics"] == out["local"]["metrics"]
    assert out["central"]["bytes_up"] == out["central"]["bytes_down"] == 0
