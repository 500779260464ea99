"""Tolerances for comparing two float32 training paths that compute the same thing in a different
summation order (batched vs one at a time, chunked vs stacked).

Neither path is more exact than the other: a reduction of ``n`` float32 terms carries a rounding
error of up to γ_n ≈ n·u relative to the sum of the magnitudes (u = 2⁻²⁴, the float32 unit
roundoff; Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1), and which terms a BLAS
or vectorised kernel adds first depends on the CPU (AVX-512 vs AVX2) and the library. One
optimiser step moves a parameter by ``lr`` times a quantity of order one (Adam's m/√v) or of the
order of the gradient (SGD), so the two paths may drift apart by about ``lr · n · u`` per step,
and the drifts add up over the steps. :func:`f32_train_atol` is that bound; a comparison with it
does not depend on the machine, and a test that uses it also shows that a deliberately wrong
variant (:func:`assert_far_beyond`) lies far outside it, so the test can still fail.
"""

from __future__ import annotations

import numpy as np

U32 = 2.0 ** -24   # float32 unit roundoff


def f32_train_atol(steps: int, lr: float, n_acc: int, grad_scale: float = 1.0) -> float:
    """Absolute tolerance after ``steps`` optimiser steps of size ``lr`` whose update is a
    reduction of at most ``n_acc`` float32 terms (of order ``grad_scale``)."""
    return steps * lr * n_acc * U32 * grad_scale


def max_abs_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)))) for k in a)


def assert_far_beyond(diff: float, atol: float, factor: float = 100.0, what: str = "") -> None:
    """The wrong variant ``what`` must differ by at least ``factor`` × the tolerance."""
    assert diff > factor * atol, (f"the wrong variant ({what}) differs by {diff:.3g}, not far beyond the "
                                  f"tolerance {atol:.3g}: the comparison could not tell it apart")
