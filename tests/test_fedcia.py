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
    s = FedCIAGFCF(resolve("fedcia-gfcf-ml100k"))
    s.n_items = 4
    g = np.random.default_rng(1)
    fs = [g.random((4, 4)).astype(np.float32) for _ in range(5)]
    for c, f in enumerate(fs):
        kept = s.accept("upload", 1, c, ClientResult({"filter": f}, {"num-examples": 1}))
        assert kept.payload == {}  # the payload is folded in and dropped
    s.aggregate_phase("upload", 1, {})
    np.testing.assert_allclose(s.f_agg, np.mean(fs, 0), rtol=1e-6)
    assert s.phases(2) == []  # one shot


def test_laplace_noise_scale(data_dir):
    from client_app.fedcia import GFCFClient
    from corolla.data import build_federation

    cfg = resolve("fedcia-gfcf-ml100k", {"laplace-scale": 0.01})
    fed = build_federation(cfg, data_dir)
    c = GFCFClient(cfg, fed, 0, fed.clients[0], None)
    noise = c.phase_upload(1, {}, {}, {}).payload["filter"].astype(np.float64) - c.filter()
    # Laplace(0, b): mean |x| = b, variance 2 b², i.i.d. (not symmetric)
    assert np.abs(noise).mean() == pytest.approx(0.01, rel=0.01)
    assert noise.var() == pytest.approx(2e-4, rel=0.02)
    assert not np.allclose(noise, noise.T)
