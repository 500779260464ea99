"""LPSFed: the spectral basis and LGCN layers against dense computation, the pairwise scorer, the
similarity and normalisation rules by hand, what crosses the network, and runs in process."""

import json

import numpy as np
import pytest
import torch

from client_app.lpsfed import kernel_similarity
from corolla.models import lgcn as L
from server_app.app import run_federation
from strategies.lpsfed import normalised_rho
from tests.inproc import InProcessTransport, partitions

SMALL = "num-rounds=2 eval-every=1 lpsfed-freeze-epochs=2 local-epochs=2 lgcn-phi=16 batch-size=2048"


def _graph(seed=0, nu=30, ni=40, edges=150):
    g = np.random.default_rng(seed)
    pairs = {(int(g.integers(nu)), int(g.integers(ni))) for _ in range(edges)}
    u, i = map(np.array, zip(*sorted(pairs)))
    return nu, ni, u, i


def _dense_laplacian(nu, ni, u, i):
    n = nu + ni
    a = np.zeros((n, n))
    a[u, nu + i] = a[nu + i, u] = 1
    d = a.sum(1)
    dinv = np.where(d > 0, 1 / np.sqrt(np.where(d > 0, d, 1)), 0)
    return np.eye(n) - dinv[:, None] * a * dinv[None, :]


@pytest.mark.parametrize("sizes", [(30, 40, 150), (200, 300, 1500)])   # dense path and Lanczos path
def test_spectral_basis_matches_dense_eigendecomposition(sizes):
    nu, ni, u, i = _graph(1, *sizes)
    p, lam = L.spectral_basis(nu, ni, u, i, 16)
    want = np.sort(np.linalg.eigvalsh(_dense_laplacian(nu, ni, u, i)))[:16]
    np.testing.assert_allclose(lam, want, atol=1e-6)
    np.testing.assert_allclose(p.T @ p, np.eye(16), atol=1e-5)            # orthonormal columns
    lap = _dense_laplacian(nu, ni, u, i)
    np.testing.assert_allclose(lap @ p, p * lam[None].astype(np.float32), atol=1e-4)   # eigenvectors


def test_lgcn_layers_equal_explicit_convolutions():
    nu, ni, u, i = _graph(2)
    p, _ = L.spectral_basis(nu, ni, u, i, 8)
    m = L.LGCN(nu, ni, dim=4, layers=2, phi=8, mlp="code", bias=False)
    m.init_params(0)
    m.basis = torch.as_tensor(p)
    nodes = torch.tensor([0, 5, nu + 3, nu + 39])
    got = m.pooled(nodes)
    e0 = torch.cat([m.user.weight, m.item.weight]).detach().double()
    pp = torch.as_tensor(p).double()
    k = m.kernel.detach().double()
    e1 = pp @ torch.diag(k[0]) @ pp.T @ e0                 # Eq. 2, layer by layer
    e2 = pp @ torch.diag(k[1]) @ pp.T @ e1
    x = torch.cat([e0, e1, e2], -1)[nodes]
    want = torch.tanh(m.pool[0](x.float()))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scorer, mlp", [("paper", "paper"), ("paper", "code"), ("code", "paper")])
@pytest.mark.parametrize("block", [4096, 3])   # one item block, and blocks that do not divide the items
def test_pairwise_angle_matrix_equals_per_pair_angle(scorer, mlp, block, monkeypatch):
    monkeypatch.setattr(L, "RANK_ITEM_BLOCK", block)
    torch.manual_seed(0)
    m = L.LGCN(5, 6, dim=8, layers=2, phi=4, mlp=mlp, bias=False)
    m.init_params(1)
    with torch.no_grad():
        for layer in m.pred:   # larger weights than the init, so the test is not trivially flat
            layer.weight.mul_(30)
    eu, ei = torch.randn(3, 8), torch.randn(7, 8)
    mat = m.angle_matrix(eu, ei, scorer)
    pairs = m.angle(eu[:, None, :].expand(3, 7, 8), ei[None].expand(3, 7, 8), scorer)
    torch.testing.assert_close(mat, pairs, atol=1e-5, rtol=1e-5)
    assert float(mat.min()) >= 0 and float(mat.max()) <= np.pi
    cos = m.cosine_matrix(eu, ei, scorer)
    torch.testing.assert_close(cos, m.cosine(eu[:, None, :].expand(3, 7, 8), ei[None].expand(3, 7, 8), scorer),
                               atol=1e-6, rtol=1e-6)
    rank = m.rank_matrix(eu, ei, scorer)                      # the ranking score: the order of R̂
    assert torch.equal(torch.argsort(rank, dim=1, descending=True, stable=True), torch.argsort(mat, dim=1, stable=True))


def test_ranking_score_keeps_the_order_where_tanh_saturates():
    """Beyond x = −19.06 cos R̂ = tanh x is exactly −1 even in float64 (and near R̂ = π tanh shrinks
    the differences of x by 1 − tanh² x before rounding them): ranked by cos R̂ or R̂ the items
    would tie and fall back to their id. rank_matrix (x itself) keeps R̂'s order."""
    m = L.LGCN(5, 6, dim=8, layers=2, phi=4, mlp="paper", bias=False).double()
    m.init_params(1)
    with torch.no_grad():
        m.pred[-1].bias.fill_(-40.0)
    eu, ei = torch.randn(3, 8, dtype=torch.float64), torch.randn(50, 8, dtype=torch.float64)
    with torch.no_grad():
        assert (m.cosine_matrix(eu, ei, "paper") == -1).all()
        x = m.rank_matrix(eu, ei, "paper")
    assert all(len(torch.unique(row)) == 50 for row in x)


def test_lgcn_is_invariant_to_the_sign_of_each_eigenvector():
    """Lanczos returns each eigenvector with a sign set by round-off (the ML-100K clients' bases
    flip 1 to 11 of 64 columns between OpenBLAS's SkylakeX and Haswell kernels): P diag(k) Pᵀ
    does not see it, bit for bit."""
    nu, ni, u, i = _graph(3, 200, 300, 1500)
    p, _ = L.spectral_basis(nu, ni, u, i, 16)
    m = L.LGCN(nu, ni, dim=8, layers=2, phi=16, mlp="paper", bias=False)
    m.init_params(0)
    nodes = torch.arange(nu + ni)
    with torch.no_grad():
        m.basis = torch.as_tensor(p)
        a = m.pooled(nodes)
        m.basis = torch.as_tensor(p * np.where(np.arange(16) % 3 == 0, -1, 1).astype(np.float32))
        b = m.pooled(nodes)
    assert torch.equal(a, b)


def test_ranking_does_not_depend_on_the_last_bits_of_the_parameters(data_dir):
    """An early-round LGCN scores every item at R̂ ≈ π/2 ± 1e-5: in float32 R̂ a user's items took a
    few dozen distinct values, so the top 20 was picked among exact ties by the last bits of the
    vector and BLAS kernels, which differ between CPUs (the four LGCN golden lines failed on a new
    machine). Ranked by cos R̂ in float64, no metric of any user changes when half of the
    parameters move by 16 float32 ulps (a relative 1e-6; the float32 ranking changed)."""
    from client_app.lpsfed import LPSFedClient
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve("lpsfed-ml100k", {"num-rounds": 2, "local-epochs": 1, "lgcn-phi": 16})
    fed = build_federation(cfg, data_dir)
    c = LPSFedClient(cfg, fed, 0, fed.clients[0], torch.device("cpu"), data_dir)
    state = c.init_state()
    g = np.random.default_rng(0)
    bumped = {}
    for k, v in state.items():
        w = v.copy()
        if v.dtype == np.float32:
            sel = g.random(v.shape) < 0.5
            for _ in range(16):
                w[sel] = np.nextafter(w[sel], np.float32(np.inf))
        bumped[k] = w
    for split in ("valid", "test"):
        a, b = c.evaluate_split(state, {}, {}, split), c.evaluate_split(bumped, {}, {}, split)
        assert a.keys() == b.keys() and len(a["recall@20"]) > 100
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{split} {k}")


def test_losses_on_saturated_cosines_keep_a_gradient():
    """BPR and the negatives of Eq. 9 use cos R̂ itself: cos(arccos(clamp(c))) would have no
    gradient once |c| reaches 1 (the clamp), which froze LGCN's training in collapsed states."""
    c = torch.tensor([1.0, -1.0], requires_grad=True)
    L.bpr(c[:1], c[1:]).backward()
    assert float(c.grad.abs().min()) > 0
    c.grad = None
    L.info_nce(torch.tensor([0.5]), c[:1], 0.07).backward()
    assert float(c.grad[0]) > 0


def _client(data_dir, **over):
    from client_app.lpsfed import LPSFedClient
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve("lpsfed-ml100k", {"num-rounds": 2, "local-epochs": 1, "lgcn-phi": 16, "batch-size": 4096, **over})
    fed = build_federation(cfg, data_dir)
    return LPSFedClient(cfg, fed, 1, fed.clients[1], torch.device("cpu"), data_dir)


def test_bias_encoder_schedules_and_the_warm_up_margin(data_dir):
    ref = {"reference": np.linspace(0, 1, 16).astype(np.float32)}
    changed = lambda a, b, pre: {k for k in a if k.startswith(pre) and not np.array_equal(a[k], b[k])}
    c = _client(data_dir, **{"lpsfed-freeze-epochs": 1})            # 'freeze' (default)
    s0 = c.init_state()
    r1 = c.phase_train(1, s0, ref, {})                                # warm-up: only the bias encoders train
    assert changed(r1.state, s0, "bias_") and not changed(r1.state, s0, ("user", "item", "pool", "pred", "kernel"))
    assert 0 < float(r1.payload["margin"][0]) < np.pi                 # M_c of Eq. 10 is sent already, not 0
    r2 = c.phase_train(2, r1.state, ref, {"margin": r1.payload["margin"]})
    assert not changed(r2.state, r1.state, "bias_") and changed(r2.state, r1.state, "user")
    j = _client(data_dir, **{"lpsfed-freeze-epochs": 1, "lpsfed-bias-train": "joint"})
    s0 = j.init_state()
    rj = j.phase_train(1, s0, ref, {})                                # the code: no warm-up, all train at once
    assert changed(rj.state, s0, "bias_") and changed(rj.state, s0, "user") and changed(rj.state, s0, "pool")


def test_popularity_buckets():
    assert L.pop_bucket(np.array([0, 10, 11, 50, 51, 100, 500, 501])).tolist() == [0, 0, 1, 4, 5, 5, 9, 10]


def test_kernel_similarity_and_normalisation_by_hand():
    ref, cl = np.array([1.0, 1.0, 2.0]), np.array([2.0, 1.0, 1.0])
    p, q = ref / 4, cl / 4
    assert kernel_similarity(ref, cl, "distribution", eps=0) == pytest.approx(float(np.sum(p * np.log(p / q))))
    assert kernel_similarity(ref, ref, "distribution") == pytest.approx(0.0, abs=1e-12)
    # the code's 1-bin histograms: densities 1/(max - min) = 1 and 1; equal → 0
    assert kernel_similarity(ref, cl, "code-exact") == pytest.approx(0.0, abs=1e-9)
    assert kernel_similarity(np.array([0.0, 2.0]), np.array([0.0, 1.0]), "code-exact") == pytest.approx(
        abs(0.5 * np.log(0.5 / 1.0)), rel=1e-6)
    np.testing.assert_allclose(normalised_rho(np.array([1.0, 3.0, 2.0]), "minmax"), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(normalised_rho(np.array([1.0, 4.0, 2.0]), "code"), [0.75, 0.0, 0.5])
    np.testing.assert_allclose(normalised_rho(np.zeros(3), "code"), [0.5] * 3)


def _run(tmp_path, name, data_dir, nodes, extra="", preset="lpsfed-ml100k"):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    return s, [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]


def test_lpsfed_sends_only_mlps_and_scalars_and_is_node_invariant(tmp_path, data_dir):
    import os
    import shutil

    shutil.rmtree(os.path.join(os.environ["COROLLA_CACHE"], "lgcn"), ignore_errors=True)   # no cached basis
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, rb = _run(tmp_path, "two", data_dir, 2)
    assert a["metrics"] == b["metrics"] and a["per_client_metrics"] == b["per_client_metrics"]
    assert set(a["per_client_metrics"]) == {"0", "1", "2", "3"}
    assert a["metrics_unweighted_mean"]["recall@20"] == pytest.approx(
        np.mean([m["recall@20"] for m in a["per_client_metrics"].values()]))
    assert all(ra[0]["train"][f"peak-rss-mb/{c}"] > 0 for c in range(4))   # memory per client's process
    # the basis's one-time cost: computed by every client in the first run, read from the node's
    # cache in the second (then not reported)
    assert all(ra[0]["train"].get(f"eig-s/{c}", 0) > 0 for c in range(4))
    assert not any(k.startswith("eig-s/") for r in rb for k in r["train"])
    sp = a["data"]["spectral"]
    assert sp["edges_kept"] + sp["edges_dropped"] == sp["edges"] and len(sp["users_per_client"]) == 4
    # what crosses the network: the MLPs, ρ_c and M_c; never embeddings, kernels, bases or bias tables
    from client_app.lpsfed import LPSFedClient
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve("lpsfed-ml100k", {"num-rounds": 1, "local-epochs": 1, "lgcn-phi": 16, "lpsfed-freeze-epochs": 0})
    fed = build_federation(cfg, data_dir)
    c = LPSFedClient(cfg, fed, 0, fed.clients[0], torch.device("cpu"), data_dir)
    res = c.phase_train(1, c.init_state(), {"reference": np.linspace(0, 1, 16).astype(np.float32)}, {})
    keys = set(res.payload)
    assert keys == {k for k in keys if k.startswith(("pool.", "pred."))} | {"rho", "margin"}
    assert not any(k.startswith(("user", "item", "kernel", "bias", "basis", "opt")) for k in keys)
    assert res.payload["rho"].shape == (1,) and res.payload["margin"].shape == (1,)
    up = ra[1]["phases"][0]["bytes_up"]
    mlp = sum(int(np.prod(v.shape)) * 4 + 128 for k, v in res.payload.items() if k not in ("rho", "margin"))
    assert up == 4 * (mlp + 2 * (4 + 128))                      # tiny by design: 4 clients × (MLPs + 2 scalars)


@pytest.mark.parametrize("extra", ["lpsfed-personalize=false", "lpsfed-stats=false", "lpsfed-loss=bpr",
                                   "lpsfed-scorer=code lgcn-mlp=code lpsfed-similarity=code-exact "
                                   "lpsfed-normalize=code lpsfed-margin=global lpsfed-reference=er"])
def test_lpsfed_variants_run(tmp_path, data_dir, extra):
    s, r = _run(tmp_path, "v", data_dir, 2, extra)
    assert s["status"] == "completed" and s["metrics"]["recall@20"] > 0
    if "personalize=false" in extra:
        assert all(r[0]["train"][f"rho-bar/{c}"] == 1.0 for c in range(4))


def test_fedavg_lgcn_baseline_runs(tmp_path, data_dir):
    s, r = _run(tmp_path, "fedavg", data_dir, 2, "method=fedavg lpsfed-loss=bpr")
    assert s["status"] == "completed" and s["method"] == "fedavg"
    assert [p["name"] for p in r[0]["phases"]] == ["train+evaluate"]        # no statistics phase
