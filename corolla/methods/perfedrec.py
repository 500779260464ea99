"""PerFedRec (Luo, Xiao, Song, "Personalized Federated Recommendation via Joint Representation
Learning, User Clustering, and Model Adaptation", CIKM 2022; the authors' code
sichunluo/PerFedRec@4d0c8f0, ``PerFedRec/PerFedRec.py``; docs/methods/perfedrec.md) on FedCA's
one-user harness with the PMF and NCF backbones (FedCA paper Table 1): the server clusters the
users' uploaded vectors with K-means, keeps a global and one model per cluster, draws each round's
clients partly by cluster size, and each user is scored by the mean of the global, its cluster's
and (when it trained that round) its own model."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "perfedrec-clusters": Key(5, "PerFedRec: K of the K-means over the server's user vectors (the code's n_cluster, "
                              "PerFedRec.py:38)"),
    "perfedrec-kmeans-init": Key(10, "PerFedRec: K-means restarts, the best by inertia (the code calls "
                                 "KMeans(n_clusters, random_state=0) with scikit-learn's default n_init: 10 before "
                                 "scikit-learn 1.4, the code's date, 1 since)"),
    "perfedrec-sampling": Key("code", "PerFedRec: a round's clients after the first: 'code' draws a share uniformly "
                              "and the rest with replacement ∝ the size of the user's cluster, de-duplicated and "
                              "topped up uniformly (PerFedRec.py:191-201); 'per-cluster' ⌈m/K⌉ uniformly from each "
                              "cluster (the paper's 'representative users from each cluster', abstract)",
                              ("code", "per-cluster")),
    "perfedrec-uniform-share": Key(0.5, "PerFedRec: with perfedrec-sampling = code, the share of a round's clients "
                                   "drawn uniformly (PerFedRec.py:191-192: half)"),
    "perfedrec-noise-rows": Key(100, "PerFedRec: item rows (uniform, with replacement) that get Laplace noise in each "
                                "upload (PerFedRec.py:105-109; 0 = none)"),
    "perfedrec-noise-scale": Key(0.02, "PerFedRec: scale b of that Laplace(0, b) noise (PerFedRec.py:107)"),
    "perfedrec-ensemble": Key("logit", "PerFedRec: a user's evaluation score: the mean of the raw scores (logits) of the "
                              "global, its cluster's and, if it trained in the evaluated round, its own model "
                              "(PerFedRec.py:151-154), or the mean of their probabilities ('prob')", ("logit", "prob")),
    "perfedrec-cluster-from": Key(3, "PerFedRec: the first round (1-based) whose clients start from, and are evaluated "
                                  "with, their cluster's model (the code: epoch > 1, PerFedRec.py:82,135)"),
    "perfedrec-weighted": Key(False, "PerFedRec: weight the global and cluster means by num-examples (the code's mean is "
                              "unweighted: FedAvg, PerFedRec.py:27-33)"),
}


def check(cfg):
    if cfg["protocol"] != "loo":
        raise ConfigError(f"config key 'protocol': PerFedRec's clients keep their own model on their evaluation "
                          f"candidates only (the 99 negatives and the held-out items), so it evaluates with "
                          f"protocol='loo', got {cfg['protocol']!r}")
    if cfg["perfedrec-clusters"] < 1:
        raise ConfigError(f"config key 'perfedrec-clusters': expected >= 1, got {cfg['perfedrec-clusters']}")
    if cfg["perfedrec-kmeans-init"] < 1:
        raise ConfigError(f"config key 'perfedrec-kmeans-init': expected >= 1, got {cfg['perfedrec-kmeans-init']}")
    if not 0.0 <= cfg["perfedrec-uniform-share"] <= 1.0:
        raise ConfigError(f"config key 'perfedrec-uniform-share': expected in [0, 1], got {cfg['perfedrec-uniform-share']}")
    if cfg["perfedrec-noise-rows"] < 0 or cfg["perfedrec-noise-scale"] < 0:
        raise ConfigError("config keys 'perfedrec-noise-rows', 'perfedrec-noise-scale': expected >= 0")
    if cfg["perfedrec-cluster-from"] < 2:
        raise ConfigError(f"config key 'perfedrec-cluster-from': expected >= 2 (cluster models exist from the end of "
                          f"round 2), got {cfg['perfedrec-cluster-from']}")


PROTOCOL = ("Each round the server sends the global item table (+ NCF tower) and, once clusters are in use, the K "
            "cluster tables once per node, and each sampled client its cluster id; the client trains from its "
            "cluster's (else the global) table with its own user vector and uploads the trained table with Laplace "
            "noise on 100 random rows, its user vector (the clustering input) and its example count. The server "
            "averages the uploads into the global model and per cluster into the cluster models, runs K-means on "
            "the user vectors and draws the next round's clients. Every client is then evaluated with the mean "
            "score of the global, its cluster's and its own post-training model. The server sees each sampled "
            "client's noised item table and its user vector, and the clustering.")

METHODS = [
    Method("perfedrec", "one-user", ("mf", "ncf"), "strategies.perfedrec:PerFedRec", "client_app.perfedrec:PerFedRecClient",
           "K-means over uploaded user vectors; global and cluster models; sampling by cluster size; a score "
           "ensemble of global, cluster and local models", "FedCA Table 1 PerFedRec rows (PMF and NCF backbones)",
           check=check, keys=KEYS),
]
