"""FedCIA GF-CF: the filter against a brute-force computation, the streaming server mean, the
Laplace noise scale."""

import numpy as np
import pytest

from corolla.config import resolve
from corolla.models.gfcf import gfcf_filter
from strategies.base import ClientResult
from strategies.fedcia import FedCIAGFCF


def brute_force_filter(r, k, wp):
    n, m = r.shape
    rt = np.zeros_like(r, dtype=np.float64)
    du = [1 / np.sqrt(r[u].sum()) if r[u].sum() else 0.0 for u in range(n)]
    di = [1 / np.sqrt(r[:, i].sum()) if r[:, i].sum() else 0.0 for i in range(m)]
    for u in range(n):
        for i in range(m):
            rt[u, i] = du[u] * r[u, i] * di[i]
    lam, vec = np.linalg.eigh(rt.T @ rt)          # right singular vectors = eigenvectors of R̃ᵀR̃
    v = vec[:, np.argsort(lam)[::-1][:k]].T       # top-k, as rows
    f = np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            inv = 1 / di[j] if di[j] else 0.0
            f[i, j] = (rt[:, i] * rt[:, j]).sum() + wp * di[i] * (v[:, i] * v[:, j]).sum() * inv
    return f


def test_gfcf_filter_matches_brute_force():
    g = np.random.default_rng(0)
    r = (g.random((40, 25)) < 0.3).astype(np.float32)
    r[:, 3] = 0  # an unseen item: D_i^{+1/2} is 0 there
    got = gfcf_filter(r, k=5, wp=0.3)
    assert got.shape == (25, 25) and got.dtype == np.float32
    np.testing.assert_allclose(got, brute_force_filter(r, 5, 0.3), atol=1e-5)
    # drop mode equals lapack mode when rank >= k
    np.testing.assert_allclose(gfcf_filter(r, 5, 0.3, "drop"), got, atol=1e-5)


def test_gfcf_drop_null_rows_uses_only_the_row_space():
    r = np.array([[1, 1, 0, 0], [0, 1, 1, 0]], np.float32)  # rank 2 < k = 3
    f = gfcf_filter(r, 3, 1.0, "drop")
    np.testing.assert_allclose(f, brute_force_filter(r, 2, 1.0), atol=1e-6)


def test_streaming_server_mean_equals_mean():
    from server_app.roster import Roster

    s = FedCIAGFCF(resolve("fedcia-gfcf-ml100k"))
    s.roster = Roster()
    s.roster.n_items = 4
    g = np.random.default_rng(1)
    fs = [g.random((4, 4)).astype(np.float32) for _ in range(5)]
    for c, f in enumerate(fs):
        kept = s.accept("upload", 1, c, ClientResult({"filter": f}, {"num-examples": 1}))
        assert kept.payload == {}  # the payload is folded in and dropped
    s.aggregate_phase("upload", 1, {})
    np.testing.assert_allclose(s.f_agg, np.mean(fs, 0), rtol=1e-6)
    assert s.phases(2) == []  # one shot


def test_laplace_noise_scale(data_dir):
    from client_app.gfcf import GFCFClient
    from corolla.data import build_federation

    cfg = resolve("fedcia-gfcf-ml100k", {"laplace-scale": 0.01})
    fed = build_federation(cfg, data_dir)
    c = GFCFClient(cfg, fed, 0, fed.clients[0], None)
    up = c.phase_upload(1, {}, {}, {})
    # the node keeps the ideal basis; the filter rebuilt from it is the uploaded one minus the noise
    np.testing.assert_array_equal(up.state["basis"], c.basis({}))
    noise = up.payload["filter"].astype(np.float64) - c.filter(up.state["basis"])
    # Laplace(0, b): mean |x| = b, variance 2 b², i.i.d. (not symmetric)
    assert np.abs(noise).mean() == pytest.approx(0.01, rel=0.01)
    assert noise.var() == pytest.approx(2e-4, rel=0.02)
    assert not np.allclose(noise, noise.T)


@pytest.mark.parametrize("kind", ["fro", "mse"])
def test_finetune_closed_form_gradient_equals_autograd(kind):
    import torch

    from corolla.models.similarity import finetune, finetune_grad, finetune_loss

    g = torch.Generator().manual_seed(0)
    e = torch.randn(30, 4, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(30, 30, generator=g, dtype=torch.float64)  # asymmetric, like noised C_s
    loss = finetune_loss(e, c, kind)
    loss.backward()
    grad, val = finetune_grad(e.detach(), c + c.T, float((c ** 2).sum()), kind)
    assert val == pytest.approx(loss.item(), rel=1e-9)
    torch.testing.assert_close(grad, e.grad, rtol=1e-8, atol=1e-10)
    # finetune() = torch.optim.SGD(lr, weight_decay) on the same loss
    e2 = e.detach().clone().requires_grad_(True)
    opt = torch.optim.SGD([e2], lr=0.05, weight_decay=0.01)
    for _ in range(5):
        opt.zero_grad()
        finetune_loss(e2, c, kind).backward()
        opt.step()
    got, _ = finetune(e.detach(), c, 5, 0.05, 0.01, kind)
    torch.testing.assert_close(got, e2.detach(), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("kind", ["fro", "mse"])
def test_batched_finetune_equals_one_table_at_a_time(kind):
    import torch

    from corolla.models.similarity import finetune, finetune_many

    g = torch.Generator().manual_seed(1)
    c = torch.randn(25, 25, generator=g, dtype=torch.float64)
    es = [torch.randn(25, d, generator=g, dtype=torch.float64) for d in (4, 4, 3, 4, 3)]
    got, losses = finetune_many(es, c, 7, 0.05, 0.01, kind)
    # float64 throughout: 7 steps × lr 0.05 × a 100-term reduction × u64 (1.1e-16) is ~1e-13 even
    # at a gradient scale of 25, so rtol 1e-10 holds on any CPU (tests/tolerance.py) while one
    # step fewer moves the tables by 3e-2 (mse) to 9e-2 (fro)
    for e, ge, gl in zip(es, got, losses):
        want, wl = finetune(e, c, 7, 0.05, 0.01, kind)
        torch.testing.assert_close(ge, want, rtol=1e-10, atol=1e-12)
        assert gl == pytest.approx(wl, rel=1e-10)


def test_svd_upload_reconstructs_low_rank_similarity():
    from corolla.models.similarity import similarity, svd_factors, svd_reconstruct

    e = np.random.default_rng(2).normal(size=(50, 6)).astype(np.float32)
    c = similarity(e)
    vh, s = svd_factors(c, 6)
    assert vh.shape == (6, 50) and s.shape == (6,)
    np.testing.assert_allclose(svd_reconstruct(vh, s), c, atol=1e-4)
    # a lower rank gives the best rank-L approximation (Eckart–Young)
    vh3, s3 = svd_factors(c, 3)
    err = np.linalg.norm(svd_reconstruct(vh3, s3) - c)
    assert err == pytest.approx(np.sqrt((np.linalg.svd(c, compute_uv=False)[3:] ** 2).sum()), rel=1e-3)


def test_randomized_svd_upload_equals_full_svd_on_noisy_similarity():
    from corolla.models.similarity import similarity, svd_factors, svd_reconstruct

    g = np.random.default_rng(3)
    e = (g.normal(size=(400, 16)) * 0.3).astype(np.float32)
    c = similarity(e) + g.laplace(0, 1e-3, (400, 400)).astype(np.float32)   # asymmetric noise
    full = svd_reconstruct(*svd_factors(c, 16, "full"))
    fast = svd_reconstruct(*svd_factors(c, 16, "randomized", seed=1))
    np.testing.assert_allclose(fast, full, atol=1e-5)
    with pytest.raises(ValueError, match="fedcia-svd-solver"):
        svd_factors(c, 16, "nope")
