"""FedFast (Muhammad et al., "FedFast: Going Beyond Average for Faster Training of Federated
Recommender Systems", KDD 2020; docs/methods/fedfast.md) on FedCA's one-user harness with the PMF
and NCF backbones (FedCA paper Table 1). The authors published no code: the algorithm is the
paper's Algorithms 1–2 (ActvSAMP, ActvAGG) as described in the paper's abstract and in third-party
readings of it; every value its description leaves open is a guess, marked so in the help below
and in docs/methods/fedfast.md."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "fedfast-clusters": Key(10, "FedFast: p, the K-means clusters of the server's user vectors (ActvSAMP, ActvAGG); "
                            "[guessed: the paper's value could not be read; tune]"),
    "fedfast-kmeans-init": Key(10, "FedFast: K-means restarts, the best by inertia (corolla.kmeans) [guessed]"),
    "fedfast-gamma": Key(1.0, "FedFast: γ₀, the discount of a cluster's mean delegate user update added to the "
                         "cluster's other users (ActvAGG; 0 = no propagation) [guessed]"),
    "fedfast-gamma-decay": Key(1.0, "FedFast: γ_t = γ₀·decay^(t−1) (the paper lowers γ over training; its schedule is "
                               "not published) [guessed: constant]"),
    "fedfast-item-weight": Key("l1", "FedFast: a delegate's weight in an item row's average: the L1 ('l1', both "
                               "third-party codes) or L2 norm of its change of that row from the global row, or 1 "
                               "per delegate that changed it ('count')", ("l1", "l2", "count")),
    "fedfast-sampling": Key("active", "FedFast: a round's clients: ActvSAMP (⌈m/p⌉ uniformly from each cluster, topped "
                            "up or trimmed to m) or FedAvg's uniform draw ('uniform', an ablation)", ("active", "uniform")),
    "fedfast-eval": Key("global", "FedFast: every client is evaluated with the global model, its user vector as the "
                        "server holds it ('global': FedFast's model lives on the server) or the round's clients with "
                        "their post-training parameters and the others with the global model ('own': FedCA's "
                        "harness rule)", ("global", "own")),
}


def check(cfg):
    if cfg["fedfast-clusters"] < 1 or cfg["fedfast-kmeans-init"] < 1:
        raise ConfigError("config keys 'fedfast-clusters', 'fedfast-kmeans-init': expected >= 1")
    if cfg["fedfast-gamma"] < 0:
        raise ConfigError(f"config key 'fedfast-gamma': expected >= 0, got {cfg['fedfast-gamma']}")
    if not 0.0 < cfg["fedfast-gamma-decay"] <= 1.0:
        raise ConfigError(f"config key 'fedfast-gamma-decay': expected in (0, 1], got {cfg['fedfast-gamma-decay']}")


PROTOCOL = ("Each round the server sends the global item table (+ NCF tower) once per node and each sampled client "
            "its user vector as the server holds it; the client trains them on its data and uploads the trained "
            "table, its user vector and its example count. The server averages each item row over the clients "
            "that changed it, weighted by the size of their change, the tower by example counts, copies the "
            "delegates' user vectors, re-clusters all user vectors (K-means) and adds each cluster's mean "
            "delegate update to its other users' vectors; it then draws the next round's clients cluster by "
            "cluster. Every client is evaluated with the global table and its server-held user vector. The "
            "server sees each sampled client's trained item table (which rows it changed) and holds every user's "
            "vector.")

METHODS = [
    Method("fedfast", "one-user", ("mf", "ncf"), "strategies.fedfast:FedFast", "client_app.fedfast:FedFastClient",
           "active sampling by K-means clusters of the user vectors; item rows averaged by the size of their "
           "change; delegates' user updates propagated within their cluster",
           "FedCA Table 1 FedFast rows (PMF and NCF backbones)", check=check, keys=KEYS),
]
