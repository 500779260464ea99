"""pFedGraph (Ye et al., "Personalized Federated Learning with Inferred Collaboration Graphs",
ICML 2023; the authors' code MediaBrain-SJTU/pFedGraph@4f5f17c, ``pytorch/pfedgraph_cosine.py``
and ``pytorch/pfedgraph_cosine/utils.py``; docs/methods/pfedgraph.md) on FedCA's one-user harness
with the PMF and NCF backbones (FedCA paper Table 1): the server infers a collaboration graph from
the cosine similarity of the clients' model changes and their data sizes, sends each client its
graph-weighted aggregate, and each client's local loss carries a similarity term towards it."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

TARGET = "target."   # prefix of the target c_u's arrays in a client's download (both sides read it)

KEYS = {
    "pfedgraph-alpha": Key(0.8, "pFedGraph: α of the graph QP min_x α‖x − p‖² + Σ_j x_j d_ij on the simplex "
                           "(p = data shares, d = −cosine of the model changes; the code's --alpha, "
                           "utils.py:69-90); its solution is Proj_Δ(p − d_i/(2α))"),
    "pfedgraph-lambda": Key(0.01, "pFedGraph: λ of the local similarity term ±λ·⟨c_u, θ⟩/‖θ‖ over the shared "
                            "parameters θ (the code's --lam, pfedgraph_cosine.py:64-70; 0 = none)"),
    "pfedgraph-sign": Key("code", "pFedGraph: sign of the similarity term: 'code' adds +λ·sim to the loss (pushes "
                          "θ away from c_u, pfedgraph_cosine.py:69), 'paper' −λ·sim (pulls it towards c_u: the "
                          "paper's objective as the authors' issue #1 reads Eq. 1)", ("code", "paper")),
    "pfedgraph-target": Key("normalized", "pFedGraph: the term's target c_u: 'normalized' Σ_j A_uj θ_j/‖θ_j‖, sent "
                            "with the aggregate (pfedgraph_cosine/utils.py:129-131), or 'aggregate' the "
                            "aggregate itself, normalised, which the client already has (pfedgraph_approx: "
                            "half the download)", ("normalized", "aggregate")),
    "pfedgraph-clamp": Key(0.9, "pFedGraph: cosines above this count as 1 (utils.py:44-45; 1 = never)"),
    "pfedgraph-qp": Key("closed-form", "pFedGraph: solver of the graph QP: Euclidean projection onto the simplex, or "
                        "cvxpy as the code (extra 'qp')", ("closed-form", "cvxpy")),
    "pfedgraph-eval": Key("trained", "pFedGraph: a client is evaluated with its post-training parameters (FedCA's "
                          "harness, in the training reply) or with the aggregate it receives ('aggregated': the "
                          "code's 'test1' model, what starts the next round; one evaluation download)",
                          ("trained", "aggregated")),
}


def check(cfg):
    if cfg["pfedgraph-alpha"] <= 0:
        raise ConfigError(f"config key 'pfedgraph-alpha': expected > 0, got {cfg['pfedgraph-alpha']}")
    if cfg["pfedgraph-lambda"] < 0:
        raise ConfigError(f"config key 'pfedgraph-lambda': expected >= 0, got {cfg['pfedgraph-lambda']}")
    if not 0.0 < cfg["pfedgraph-clamp"] <= 1.0:
        raise ConfigError(f"config key 'pfedgraph-clamp': expected in (0, 1], got {cfg['pfedgraph-clamp']}")


PROTOCOL = ("Each round every sampled one-user client trains its PMF/NCF copy (its loss carrying ±λ·⟨c_u, θ⟩/‖θ‖ "
            "from the second round) and uploads its item table (+ NCF tower) with its example count; the server "
            "computes the cosines of the clients' changes from the initial model, one simplex QP per client over "
            "them and the data shares (the collaboration graph A), and sends each client its aggregate Σ_v A_uv θ_v "
            "and, with pfedgraph-target = normalized, its target Σ_v A_uv θ_v/‖θ_v‖, which the client starts the "
            "next round from. The user vector never leaves; the server sees every uploading client's item table, "
            "its example count, the cosine matrix and the graph.")

METHODS = [
    Method("pfedgraph", "one-user", ("mf", "ncf"), "strategies.pfedgraph:PFedGraph", "client_app.pfedgraph:PFedGraphClient",
           "collaboration graph from cosine similarity and data sizes; personalised aggregates; a similarity term "
           "in the local loss", "FedCA Table 1 pFedGraph rows (PMF and NCF backbones)", check=check, keys=KEYS),
]
