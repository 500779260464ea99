"""FedCA (Zhang et al., "Beyond Similarity: Personalized Federated Recommendation with Composite Aggregation"; docs/methods/fedca.md): one-user clients upload their
item tables and a subspace descriptor; the server solves a simplex QP per client (composite
weights of size, similarity and complementarity) and sends each a personalised aggregate."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "agg-fraction": Key(0.1, "FedCA: fraction of the round's clients drawn for aggregation (int(f·n), at least 1)"),
    "fedca-alpha": Key(0.3, "FedCA: α (the code's complementarity coefficient; the paper's similarity coefficient with fedca-weights=paper)"),
    "fedca-beta": Key(0.3, "FedCA: β (the code's similarity coefficient; the paper's complementarity coefficient with fedca-weights=paper)"),
    "fedca-rho": Key(0.9, "FedCA: interpolation ρ: Q_u <- ρ·Q_u + (1-ρ)·Q_g[u] for the aggregated clients"),
    "fedca-k": Key(4, "FedCA: principal directions k of the complementarity descriptor X_u"),
    "fedca-similarity": Key("pca1", "FedCA σ: the code's 1/(1+‖z_u−z_v‖) on 1-D PCA projections, clamped to 1 above 0.9 ('pca1'), or the paper's 1/(1+‖Q_u−Q_v‖²_F) ('frobenius')", ("pca1", "frobenius")),
    "fedca-pca-sign": Key("u", "FedCA: the sign convention of the code's PCA (σ's 1-D projections and the PCA descriptor X_u): sklearn ≤ 1.4's, the projection's largest-magnitude entry positive ('u'), or sklearn ≥ 1.5's, the component's ('v'); the code calls sklearn's PCA, so it gets whichever its sklearn has", ("u", "v")),
    "fedca-subspace": Key("pca", "FedCA X_u: the code's PCA basis of the item rows of the round's samples (k×d, 'pca') or the paper's first k left singular vectors of the interacted items' rows ('left')", ("pca", "left")),
    "fedca-matching": Key("greedy", "FedCA principal angles: the code's greedy signed matching or the paper's l-th to l-th ('ordered')", ("greedy", "ordered")),
    "fedca-weights": Key("code", "FedCA weight QP: the code's coefficients (min xᵀx − 2(p + αc + βσ)ᵀx) or the paper's Eq. 4 ('paper')", ("code", "paper")),
    "fedca-qp": Key("closed-form", "FedCA weight QP solver: Euclidean projection onto the simplex or cvxpy", ("closed-form", "cvxpy")),
    "fedca-block": Key(0, "FedCA: 0 = the paper's aggregation over all drawn clients (|S|² similarities, one |S|-dimensional QP per client); B > 0 = the drawn clients in seeded random blocks of at most B, each aggregated on its own (server cost |S|·B·M·d instead of |S|²·M·d; a scale option, measured against the exact result in docs/results.md)"),
    "fedca-upload": Key("all", "FedCA: every client uploads its table ('all', as the code) or only the clients drawn for aggregation ('subset': same result, 10% of the bytes)", ("all", "subset")),
}


def check(cfg):
    if not 0.0 < cfg["agg-fraction"] <= 1.0:
        raise ConfigError(f"config key 'agg-fraction': expected in (0, 1], got {cfg['agg-fraction']}")
    if not 0.0 <= cfg["fedca-rho"] <= 1.0:
        raise ConfigError(f"config key 'fedca-rho': expected in [0, 1], got {cfg['fedca-rho']}")
    if cfg["fedca-block"] < 0 or cfg["fedca-block"] == 1:
        raise ConfigError(f"config key 'fedca-block': expected 0 (exact) or a block size >= 2, got {cfg['fedca-block']}")
    if cfg["fedca-k"] > cfg["dim"]:
        raise ConfigError(f"config key 'fedca-k': expected <= dim={cfg['dim']}, got {cfg['fedca-k']}")


PROTOCOL = "Each round every one-user client trains its PMF/NCF copy and uploads its item table (M × d) and a k × d subspace descriptor with its example count; the server draws 10 % of them, solves a simplex QP per drawn client (size, similarity, complementarity) and sends each its personalised aggregate table, which it interpolates with its own (ρ). The server sees every uploading client's item table and descriptor."

METHODS = [
    Method("fedca", "one-user", ("mf", "ncf"), "strategies.fedca:FedCA", "client_app.fedca:FedCAClient",
           "composite aggregation: personalised item tables from a simplex QP per client",
           "FedCA Table 1 (PMF and NCF backbones)", check=check, keys=KEYS),
]
