"""FedCA's composite aggregation (FedCA paper §5, Eq. 3–6; its code's ``tools.py``, docs/methods/fedca.md) and the
FedAtt aggregation rule (Ji et al. 2019; shaoxiongji/fed-att ``src/agg/aggregate.py``). Pure numpy, no Flower.

Per aggregated client u over the aggregation subset S (|S| = n):

* similarity σ_uv (Eq. 5): the code's ``pca1`` variant, σ = 1/(1+‖z_u − z_v‖₂) of the 1-D PCA
  projections z_u of the item tables, set to 1 where σ > 0.9 (``tools.py:83-113``); or the paper's
  ``frobenius`` σ = 1/(1+‖Q_u − Q_v‖²_F);
* complementarity c_uv = cos(φ(X_u, X_v)) (Eq. 6) from k principal directions per client:
  the code's descriptor is the PCA basis (right singular vectors of the mean-centred rows of the
  trained item table at the round's training samples, k × d) matched greedily on the signed
  cosines (``tools.py:116-131, 146-177``); the paper's is the first k left singular vectors of Q_u^s (the rows
  of the interacted items), zero-padded to a common length and matched l-th to l-th;
* weights w_u: the quadratic program over the simplex. The code's form (tools.py:52-80)
  ``min xᵀx + qᵀx, q = −2αc + 2β(−σ) − 2p`` has the closed form Proj_Δ(p + αc + βσ); the paper's
  Eq. 4, ``min Σ_v (x_v − p_v)² + α(x_v − σ_v)² − β x_v c_v``, has Proj_Δ((p + ασ + βc/2)/(1+α)).
  Both are solved in closed form by the Euclidean projection onto the simplex (Duchi et al. 2008)
  or, as a check and an option, with cvxpy; then entries below 1e-20 are zeroed and each row
  renormalised (``sub_matrix_shift``);
* the personalised aggregate Q_g[u] = Σ_v w_uv Q_v (Eq. 3's inner sum; tools.py:9-30).
"""

from __future__ import annotations

import numpy as np


# ------------------------------------------------------------------------------ simplex
def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of ``v`` onto the probability simplex {x ≥ 0, Σx = 1}."""
    v = np.asarray(v, np.float64)
    one = v.ndim == 1
    v = np.atleast_2d(v)
    n = v.shape[1]
    u = -np.sort(-v, axis=1)
    css = np.cumsum(u, axis=1) - 1.0
    ind = np.arange(1, n + 1)
    cond = u - css / ind > 0
    rho = n - 1 - np.argmax(cond[:, ::-1], axis=1)          # last index where cond holds
    theta = css[np.arange(len(v)), rho] / (rho + 1.0)
    out = np.maximum(v - theta[:, None], 0.0)
    return out[0] if one else out


def shift_rows(w: np.ndarray, tol: float = 1e-20) -> np.ndarray:
    """FedCA's ``sub_matrix_shift``: zero |w| < tol, renormalise each row to sum 1."""
    w = np.where(np.abs(w) < tol, 0.0, w)
    return w / w.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------ similarity
# sklearn's PCA signs its components by U (the projections) up to 1.4 and by Vᵀ (the components)
# from 1.5 on; the FedCA code calls sklearn's PCA, so which one a run gets depends on the installed sklearn
PCA_SIGNS = ("u", "v")


def _v_signs(vt: np.ndarray) -> np.ndarray:
    """sklearn ≥ 1.5's ``svd_flip(u_based_decision=False)``: each row of ``vt`` signed so that its entry
    of largest magnitude (the first, on ties) is positive."""
    s = np.sign(vt[np.arange(len(vt)), np.argmax(np.abs(vt), axis=1)])
    s[s == 0] = 1.0
    return vt * s[:, None]


def _check_sign(sign: str) -> None:
    if sign not in PCA_SIGNS:
        raise ValueError(f"PCA sign convention: expected one of {PCA_SIGNS}, got {sign!r}")


def pca1_projection(q: np.ndarray, sign: str = "u") -> np.ndarray:
    """The 1-D PCA projection of the rows of ``q`` (M × d) -> (M,). ``sign="u"``: as sklearn ≤ 1.4's
    ``svd_flip(u_based_decision=True)``, the projection's entry of largest magnitude is positive;
    ``"v"``: as sklearn ≥ 1.5's ``u_based_decision=False``, the component's is."""
    _check_sign(sign)
    x = np.asarray(q, np.float64)
    x = x - x.mean(axis=0)
    # the top right singular vector from the d × d scatter matrix (d is small)
    _, vecs = np.linalg.eigh(x.T @ x)
    v = vecs[:, -1]
    if sign == "v":
        return x @ _v_signs(v[None, :])[0]
    z = x @ v
    i = int(np.argmax(np.abs(z)))
    return z if z[i] >= 0 else -z


def similarity_pca1(z: np.ndarray, clamp: float = 0.9) -> np.ndarray:
    """σ_uv = 1/(1 + ‖z_u − z_v‖₂) of the rows of ``z`` (n × M); values above ``clamp`` set to 1."""
    z = np.asarray(z, np.float64)
    sq = (z * z).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (z @ z.T), 0.0)
    np.fill_diagonal(d2, 0.0)
    s = 1.0 / (1.0 + np.sqrt(d2))
    s[s > clamp] = 1.0
    return s


def similarity_frobenius(qs: np.ndarray) -> np.ndarray:
    """The paper's σ_uv = 1/(1 + ‖Q_u − Q_v‖²_F) for tables ``qs`` (n × M × d)."""
    f = np.asarray(qs, np.float64).reshape(len(qs), -1)
    sq = (f * f).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (f @ f.T), 0.0)
    np.fill_diagonal(d2, 0.0)
    return 1.0 / (1.0 + d2)


# ------------------------------------------------------------------------------ complementarity
def principal_basis(rows: np.ndarray, k: int, sign: str = "u") -> np.ndarray:
    """The code's X_u: ``PCA(n_components=k).fit(rows).components_`` (k × d), the right singular
    vectors of the mean-centred rows, signs as sklearn ≤ 1.4 (``"u"``: u-based ``svd_flip``) or
    ≥ 1.5 (``"v"``: each component's largest-magnitude entry positive)."""
    _check_sign(sign)
    x = np.asarray(rows, np.float64)
    if x.ndim != 2 or x.shape[0] < k or x.shape[1] < k:
        raise ValueError(f"principal_basis: expected at least k={k} rows and columns, got shape {x.shape}")
    x = x - x.mean(axis=0)
    # right singular vectors from the d × d scatter matrix (d is small), largest first; the
    # u-based sign needs only the argmax of |column| of U ∝ X v_j
    _, vecs = np.linalg.eigh(x.T @ x)
    vt = vecs[:, ::-1][:, :k].T
    if sign == "v":
        return _v_signs(vt)
    proj = x @ vt.T
    signs = np.sign(proj[np.argmax(np.abs(proj), axis=0), np.arange(k)])
    signs[signs == 0] = 1.0
    return vt * signs[:, None]


def left_basis(rows: np.ndarray, k: int) -> np.ndarray:
    """The paper's X_u: the first k left singular vectors of Q_u^s (|I_u| × d), as k rows of
    length |I_u| (zero-padded to a common length by :func:`complementarity`)."""
    x = np.asarray(rows, np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"left_basis: expected a non-empty 2-D array, got shape {x.shape}")
    u, _, _ = np.linalg.svd(x, full_matrices=False)
    out = np.zeros((k, x.shape[0]))
    r = min(k, u.shape[1])
    out[:r] = u[:, :r].T
    return out


def complementarity(xs: list[np.ndarray], matching: str = "greedy") -> np.ndarray:
    """c_uv = cos(mean_l arccos(cos_l)) for bases ``xs`` (each k × length; rows unit norm).

    ``greedy`` (code, tools.py:116-131): k times take the largest signed cosine of X_u X_vᵀ and
    strike its row and column. ``ordered`` (paper Eq. 6): the l-th row with the l-th row. Bases
    of different lengths are zero-padded.
    """
    n = len(xs)
    k = xs[0].shape[0]
    length = max(x.shape[1] for x in xs)
    x = np.zeros((n, k, length))
    for i, xi in enumerate(xs):
        if xi.shape[0] != k:
            raise ValueError(f"complementarity: basis {i} has {xi.shape[0]} rows, expected {k}")
        x[i, :, :xi.shape[1]] = xi
    cos = np.einsum("ukd,vld->uvkl", x, x)                 # n × n × k × k
    if matching == "ordered":
        picked = np.diagonal(cos, axis1=2, axis2=3)       # n × n × k
    elif matching == "greedy":
        work = cos.reshape(n, n, k * k).copy()
        picked = np.empty((n, n, k))
        for step in range(k):
            flat = np.argmax(work, axis=2)
            picked[:, :, step] = np.take_along_axis(work, flat[..., None], 2)[..., 0]
            r, c = flat // k, flat % k
            rows = (np.arange(k)[None, None, :, None] == r[..., None, None])
            cols = (np.arange(k)[None, None, None, :] == c[..., None, None])
            mask = (rows | cols).reshape(n, n, k * k)
            work[mask] = -np.inf
    else:
        raise ValueError(f"fedca-matching: expected 'greedy' or 'ordered', got {matching!r}")
    phi = np.arccos(np.clip(picked, -1.0, 1.0)).mean(axis=2)
    return np.cos(phi)


# ------------------------------------------------------------------------------ weights
def qp_target(p: np.ndarray, sigma: np.ndarray, comp: np.ndarray, alpha: float, beta: float,
              form: str) -> np.ndarray:
    """The point whose simplex projection solves the weight QP (rows: aggregated clients)."""
    p = np.asarray(p, np.float64)[None, :]
    if form == "code":   # α → complementarity, β → similarity (FedCA's tools.py:37-44; docs/methods/fedca.md)
        return p + alpha * comp + beta * sigma
    if form == "paper":  # Eq. 4 with Eq. 5, 6
        return (p + alpha * sigma + 0.5 * beta * comp) / (1.0 + alpha)
    raise ValueError(f"fedca-weights: expected 'code' or 'paper', got {form!r}")


def composite_weights(p: np.ndarray, sigma: np.ndarray, comp: np.ndarray, alpha: float, beta: float,
                      form: str = "code", solver: str = "closed-form") -> np.ndarray:
    """w (n × n): row u = the aggregation weights of client u over the subset."""
    if solver == "closed-form":
        w = project_simplex(qp_target(p, sigma, comp, alpha, beta, form))
    elif solver == "cvxpy":
        w = np.stack([solve_qp_cvxpy(p, sigma[u], comp[u], alpha, beta, form) for u in range(len(sigma))])
    else:
        raise ValueError(f"fedca-qp: expected 'closed-form' or 'cvxpy', got {solver!r}")
    return shift_rows(np.maximum(w, 0.0))


def solve_qp_cvxpy(p: np.ndarray, sigma_u: np.ndarray, comp_u: np.ndarray, alpha: float, beta: float,
                   form: str) -> np.ndarray:
    """One client's weight QP, written as the code (``form='code'``) or the paper (Eq. 4) writes it."""
    from corolla.extras import require

    require("qp")
    import cvxpy as cp

    n = len(p)
    x = cp.Variable(n)
    if form == "code":
        q = -2 * alpha * comp_u + 2 * beta * (-sigma_u) - 2 * p
        obj = cp.quad_form(x, np.eye(n)) + q @ x
    elif form == "paper":
        obj = cp.sum_squares(x - p) + alpha * cp.sum_squares(x - sigma_u) - beta * (comp_u @ x)
    else:
        raise ValueError(f"fedca-weights: expected 'code' or 'paper', got {form!r}")
    prob = cp.Problem(cp.Minimize(obj), [x >= 0, cp.sum(x) == 1])
    prob.solve()
    if x.value is None:
        raise RuntimeError(f"cvxpy: weight QP not solved ({prob.status})")
    return np.asarray(x.value, np.float64)


def personalised(w: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """Q_g[u] = Σ_v w_uv Q_v for every row u of ``w``; ``tables`` is n × (any shape)."""
    t = np.asarray(tables)
    flat = t.reshape(len(t), -1).astype(np.float64)
    return (np.asarray(w, np.float64) @ flat).reshape((len(w),) + t.shape[1:]).astype(np.float32)


# ------------------------------------------------------------------------------ FedAtt
def fedatt_weights(s: np.ndarray, weights: str = "softmax") -> np.ndarray:
    """FedAtt's client weights from the distances ``s``: ``softmax`` (fed-att ``aggregate_att``) or
    ``distance``, proportional to them (FedCA paper §4's p_u; equal weights when every distance is 0)."""
    s = np.asarray(s, np.float64)
    if weights == "softmax":
        att = np.exp(s - s.max())
    elif weights == "distance":
        att = s.copy() if s.sum() > 0 else np.ones_like(s)
    else:
        raise ValueError(f"fedatt-weights: expected 'softmax' or 'distance', got {weights!r}")
    return att / att.sum()


FEDATT_NORMS = ("flattened", "matrix")


def fedatt_distances(server: np.ndarray, clients: np.ndarray, ord_: float = 2,
                     norm: str = "matrix") -> tuple[np.ndarray, np.ndarray]:
    """(w_server − w_c for every client c, ‖w_server − w_c‖_ord), in float64.

    ``norm = "flattened"``: the ord-norm of the tensor's entries taken as one vector (at ord 2 the
    Frobenius norm). ``norm = "matrix"``: ``linalg.norm(tensor, ord)`` as fed-att's ``aggregate_att``
    calls it (``scipy.linalg.norm(w_server[k] − w_clients[i][k], ord=metric)``): the same for a
    vector, but for a 2-D tensor the matrix norm, at ord 2 its largest singular value."""
    if norm not in FEDATT_NORMS:
        raise ValueError(f"fedatt-norm: expected one of {FEDATT_NORMS}, got {norm!r}")
    diff = np.asarray(server, np.float64)[None] - np.asarray(clients, np.float64)
    if norm == "flattened" or diff.ndim <= 2:
        return diff, np.array([np.linalg.norm(d.reshape(-1), ord=ord_) for d in diff])
    if diff.ndim > 3:
        raise ValueError(f"fedatt-norm = matrix: expected vectors or matrices, got a tensor of shape {diff.shape[1:]}")
    if ord_ not in (1, -1, 2, -2, np.inf, -np.inf):
        raise ValueError(f"fedatt-ord = {ord_!r} with fedatt-norm = matrix: a matrix norm's order must be one of "
                         "1, -1, 2, -2, inf, -inf (numpy's and scipy's linalg.norm)")
    if ord_ == 2:   # the largest singular value of every client's difference, in one batched call
        return diff, np.linalg.svd(diff, compute_uv=False)[:, 0]
    return diff, np.array([np.linalg.norm(d, ord=ord_) for d in diff])


def fedatt(server: np.ndarray, clients: np.ndarray, epsilon: float, ord_: float = 2,
           dp: float = 0.0, g: np.random.Generator | None = None, weights: str = "softmax",
           norm: str = "matrix") -> np.ndarray:
    """FedAtt for one parameter tensor (fed-att ``aggregate_att``): attention
    att_c = softmax_c(‖w_server − w_c‖_ord) (``weights = "distance"``: att_c ∝ ‖w_server − w_c‖_ord;
    the norm of a matrix as ``fedatt_distances``' ``norm`` says)
    and w_new = w_server − ε Σ_c att_c (w_server − w_c) + dp · N(0, I)."""
    server = np.asarray(server, np.float64)
    diff, s = fedatt_distances(server, clients, ord_, norm)
    att = fedatt_weights(s, weights)
    out = server - epsilon * np.tensordot(att, diff, axes=1)
    if dp > 0:
        out = out + dp * (g or np.random.default_rng()).standard_normal(out.shape)
    return out.astype(np.float32)
