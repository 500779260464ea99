"""FedCA's aggregation math and FedAtt against brute force, sklearn and cvxpy."""

import itertools

import numpy as np
import pytest

from corolla import composite as C


def test_simplex_projection_matches_brute_force_kkt():
    g = np.random.default_rng(0)
    for n in (1, 2, 5, 30):
        v = g.normal(size=(20, n)) * 3
        w = C.project_simplex(v)
        assert np.all(w >= 0) and np.allclose(w.sum(1), 1)
        # KKT: w = max(v - θ, 0) with one θ per row; every positive entry shares the same v - w
        for vi, wi in zip(v, w):
            theta = (vi - wi)[wi > 0]
            assert np.ptp(theta) < 1e-12
            assert np.all(vi[wi == 0] <= theta[0] + 1e-12)
    assert np.allclose(C.project_simplex(np.array([0.2, 0.3, 0.5])), [0.2, 0.3, 0.5])
    assert np.allclose(C.project_simplex(np.array([2.0, 0.0])), [1.0, 0.0])


@pytest.mark.parametrize("form", ["code", "paper"])
def test_closed_form_weights_equal_cvxpy(form):
    g = np.random.default_rng(1)
    for trial in range(4):
        n = 12
        p = g.random(n)
        p /= p.sum()
        sigma = g.random((n, n))
        comp = g.uniform(-1, 1, (n, n))
        alpha, beta = g.random(2)
        closed = C.composite_weights(p, sigma, comp, alpha, beta, form, "closed-form")
        solved = C.composite_weights(p, sigma, comp, alpha, beta, form, "cvxpy")
        np.testing.assert_allclose(closed, solved, atol=1e-6)


def test_weights_with_alpha_beta_zero_are_the_sample_shares():
    p = np.array([0.1, 0.2, 0.7])
    s = np.ones((3, 3))
    w = C.composite_weights(p, s, s, 0.0, 0.0, "code")
    np.testing.assert_allclose(w, np.tile(p, (3, 1)))


def test_pca1_and_principal_basis_match_sklearn_up_to_sign():
    from sklearn.decomposition import PCA

    g = np.random.default_rng(2)
    q = g.normal(size=(200, 16)) * np.linspace(3, 0.5, 16)
    z = C.pca1_projection(q)
    ref = PCA(1, svd_solver="full").fit_transform(q)[:, 0]
    assert np.allclose(np.abs(z), np.abs(ref)) and (np.allclose(z, ref) or np.allclose(z, -ref))
    assert z[np.argmax(np.abs(z))] > 0
    rows = g.normal(size=(50, 16)) * np.linspace(3, 0.5, 16)
    x = C.principal_basis(rows, 4)
    ref = PCA(4, svd_solver="full").fit(rows).components_
    for a, b in zip(x, ref):
        assert np.allclose(a, b) or np.allclose(a, -b)
    np.testing.assert_allclose(x @ x.T, np.eye(4), atol=1e-12)



def test_pca_sign_v_is_sklearn_1_5_and_later_and_u_flips_by_the_projection():
    import sklearn
    from sklearn.decomposition import PCA

    g = np.random.default_rng(5)
    q = g.normal(size=(300, 16)) * np.linspace(3, 0.5, 16)
    rows = g.normal(size=(60, 16)) * np.linspace(3, 0.5, 16)
    zu, zv = C.pca1_projection(q, "u"), C.pca1_projection(q, "v")
    xu, xv = C.principal_basis(rows, 4, "u"), C.principal_basis(rows, 4, "v")
    if tuple(int(s) for s in sklearn.__version__.split(".")[:2]) >= (1, 5):   # the installed sklearn is v-based
        np.testing.assert_allclose(zv, PCA(1, svd_solver="full").fit_transform(q)[:, 0], atol=1e-9)
        np.testing.assert_allclose(zv, PCA(1, svd_solver="randomized", random_state=42).fit_transform(q)[:, 0], atol=1e-4)   # randomized: approximate
        np.testing.assert_allclose(xv, PCA(4, svd_solver="full").fit(rows).components_, atol=1e-9)
    # by hand: "u" makes the largest |projection| positive, "v" the largest |component entry|
    assert zu[np.argmax(np.abs(zu))] > 0 and np.allclose(np.abs(zu), np.abs(zv))
    for a, b in zip(xu, xv):
        assert b[np.argmax(np.abs(b))] > 0 and (np.allclose(a, b) or np.allclose(a, -b))
        proj = (rows - rows.mean(0)) @ a
        assert proj[np.argmax(np.abs(proj))] > 0
    # a table whose two conventions disagree: the projections' largest entry points against the component's
    x = np.array([[3.0, 0.0], [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.1]])
    assert np.allclose(C.pca1_projection(-x, "v"), -C.pca1_projection(-x, "u"))
    with pytest.raises(ValueError, match="sign convention"):
        C.pca1_projection(q, "w")

def test_similarity_pca1_by_hand():
    z = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 0.05]])
    s = C.similarity_pca1(z)
    assert s[0, 1] == pytest.approx(1 / 6)       # distance 5
    assert s[0, 2] == 1.0                        # 1/(1.05) > 0.9 -> 1
    assert np.allclose(np.diag(s), 1) and np.allclose(s, s.T)
    qs = np.array([np.zeros((2, 2)), np.ones((2, 2))])
    assert C.similarity_frobenius(qs)[0, 1] == pytest.approx(1 / 5)


def _greedy_brute(xu, xv):
    cos = xu @ xv.T
    rows, cols = list(range(len(xu))), list(range(len(xv)))
    picked = []
    for _ in range(len(xu)):
        r, c = max(itertools.product(rows, cols), key=lambda rc: cos[rc])
        picked.append(cos[r, c])
        rows.remove(r)
        cols.remove(c)
    return np.cos(np.mean(np.arccos(np.clip(picked, -1, 1))))


def test_complementarity_greedy_and_ordered_against_loops():
    g = np.random.default_rng(3)
    xs = [np.linalg.qr(g.normal(size=(16, 4)))[0].T for _ in range(6)]
    c = C.complementarity(xs, "greedy")
    for u, v in itertools.product(range(6), range(6)):
        assert c[u, v] == pytest.approx(_greedy_brute(xs[u], xs[v]), abs=1e-12)
    assert np.allclose(np.diag(c), 1)
    o = C.complementarity(xs, "ordered")
    want = np.cos(np.mean(np.arccos(np.clip(np.sum(xs[0] * xs[1], 1), -1, 1))))
    assert o[0, 1] == pytest.approx(want)
    # different lengths are zero-padded (the paper's left singular vectors)
    lb = [C.left_basis(g.normal(size=(n, 16)), 4) for n in (5, 9)]
    assert C.complementarity(lb, "ordered").shape == (2, 2)


def test_personalised_aggregate_is_weighted_sum():
    g = np.random.default_rng(4)
    t = g.normal(size=(3, 5, 2)).astype(np.float32)
    w = np.array([[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
    out = C.personalised(w, t)
    np.testing.assert_allclose(out[2], 0.2 * t[0] + 0.3 * t[1] + 0.5 * t[2], rtol=1e-6)


def test_fedatt_by_hand():
    server = np.zeros(2)
    clients = np.array([[1.0, 0.0], [0.0, 2.0]])
    att = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum()
    out = C.fedatt(server, clients, epsilon=1.0)
    np.testing.assert_allclose(out, att[0] * clients[0] + att[1] * clients[1], rtol=1e-6)
    # fedatt-weights = distance (FedCA paper §4's p_u): weights proportional to the distances 1 and 2
    out = C.fedatt(server, clients, epsilon=1.0, weights="distance")
    np.testing.assert_allclose(out, (1 * clients[0] + 2 * clients[1]) / 3, rtol=1e-6)
    np.testing.assert_allclose(C.fedatt_weights(np.zeros(3), "distance"), np.full(3, 1 / 3))   # all at the server
    with pytest.raises(ValueError, match="fedatt-weights"):
        C.fedatt(server, clients, epsilon=1.0, weights="linear")


def test_fedatt_norm_of_a_table_by_hand():
    """fedatt-norm: 'flattened' takes the Frobenius norm of a table's difference, 'matrix' its largest
    singular value (fed-att's scipy.linalg.norm(·, ord=2) on a 2-D tensor); vectors are the same."""
    server = np.zeros((2, 2))
    # client 0: diag(3, 4): Frobenius 5, spectral 4; client 1: [[3, 0], [0, 0]]: both 3
    clients = np.array([[[3.0, 0.0], [0.0, 4.0]], [[3.0, 0.0], [0.0, 0.0]]])
    _, s = C.fedatt_distances(server, clients, 2, "flattened")
    np.testing.assert_allclose(s, [5.0, 3.0])
    _, s = C.fedatt_distances(server, clients, 2, "matrix")
    np.testing.assert_allclose(s, [4.0, 3.0])
    _, s = C.fedatt_distances(server, clients, 1, "matrix")          # ord 1 of a matrix: the largest column sum
    np.testing.assert_allclose(s, [4.0, 3.0])
    att = np.exp([4.0, 3.0]) / np.exp([4.0, 3.0]).sum()              # softmax over the spectral norms
    out = C.fedatt(server, clients, epsilon=1.0, norm="matrix")
    np.testing.assert_allclose(out, att[0] * clients[0] + att[1] * clients[1], rtol=1e-6)
    np.testing.assert_array_equal(out, C.fedatt(server, clients, epsilon=1.0))   # the code's reading is the default
    assert not np.allclose(out, C.fedatt(server, clients, epsilon=1.0, norm="flattened"))   # Frobenius weights otherwise
    vec = np.array([[1.0, 2.0], [2.0, 2.0]])
    np.testing.assert_allclose(C.fedatt_distances(np.zeros(2), vec, 2, "matrix")[1],
                               C.fedatt_distances(np.zeros(2), vec, 2, "flattened")[1])
    with pytest.raises(ValueError, match="fedatt-norm"):
        C.fedatt(server, clients, epsilon=1.0, norm="spectral")
    with pytest.raises(ValueError, match="fedatt-ord = 3 with fedatt-norm = matrix"):
        C.fedatt_distances(server, clients, 3, "matrix")
    np.testing.assert_allclose(C.fedatt_distances(server, clients, 3, "flattened")[1],   # entries: (27 + 64)^(1/3), 3
                               [91 ** (1 / 3), 3.0])
    with pytest.raises(ValueError, match="fedatt-norm = matrix: expected vectors or matrices"):
        C.fedatt_distances(np.zeros((2, 2, 2)), np.ones((3, 2, 2, 2)), 2, "matrix")
