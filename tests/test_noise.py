"""corolla/noise.py: both Laplace samplers draw Laplace(0, b) (FedCIA paper §5.2.5)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from corolla.noise import laplace_noise


def test_numpy_sampler_is_the_authors_draw_cast_to_float32():
    got = laplace_noise(np.random.default_rng(7), 0.001, (40, 30), "numpy")
    want = np.random.default_rng(7).laplace(0.0, 0.001, (40, 30)).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, want)


@pytest.mark.parametrize("b", [0.001, 2.5])
def test_exponential_sampler_draws_the_same_law(b):
    """b * Exp(1) * sign is Laplace(0, b): Kolmogorov-Smirnov against scipy's Laplace and against
    the numpy sampler, and the moments E x = 0, E|x| = b, Var x = 2 b^2 (n = 400,000: the standard
    errors are about 0.3 % of b)."""
    n = 400_000
    x = laplace_noise(np.random.default_rng(3), b, (n,), "exponential").astype(np.float64)
    y = laplace_noise(np.random.default_rng(4), b, (n,), "numpy").astype(np.float64)
    assert stats.kstest(x, "laplace", args=(0.0, b)).pvalue > 0.01
    assert stats.ks_2samp(x, y).pvalue > 0.01
    assert abs(x.mean()) < 0.01 * b and abs(np.abs(x).mean() / b - 1) < 0.01 and abs(x.var() / (2 * b * b) - 1) < 0.02
    assert abs((x < 0).mean() - 0.5) < 0.005


def test_exponential_sampler_is_float32_and_reproducible():
    a = laplace_noise(np.random.default_rng(1), 0.5, (17, 5), "exponential")
    b = laplace_noise(np.random.default_rng(1), 0.5, (17, 5), "exponential")
    assert a.dtype == np.float32 and a.shape == (17, 5) and np.array_equal(a, b)
    z = laplace_noise(np.random.default_rng(1), 0.0, (3,), "exponential")
    assert z.tolist() == [0.0, 0.0, 0.0] and not np.signbit(z).any()


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="laplace sampler: expected one of .*'gauss'"):
        laplace_noise(np.random.default_rng(0), 0.1, (2,), "gauss")
    with pytest.raises(ValueError, match="laplace scale: expected >= 0, got -1"):
        laplace_noise(np.random.default_rng(0), -1, (2,), "numpy")
