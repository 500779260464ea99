"""FedRecon (Singhal et al., NeurIPS'21, "Federated Reconstruction: Partially Local Federated
Learning"; the authors' code google-research/federated a5af8c4 ``reconstruction/``;
docs/methods/fedrecon.md) on UFGraphFR's one-user harness: MF with the user vector local and the
item table global. Each round every client reconstructs a *fresh* user vector with the table
frozen, then trains the table with the user vector frozen and uploads it; the server applies the
example-weighted mean delta with a server learning rate. Evaluation reconstructs the user vector
from the client's training rows with the final global table (the code's evaluation computation)."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "fedrecon-recon-lr": Key(0.1, "FedRecon: SGD learning rate η_r of the reconstruction of the user vector, the item table frozen (code reconstruction_optimizer, default SGD 0.1); the table's client lr is the core 'lr'"),
    "fedrecon-recon-epochs": Key(1, "FedRecon: passes over the reconstruction batches (code recon_epochs_max; README ML-1M: 5)"),
    "fedrecon-recon-steps": Key(0, "FedRecon: at most this many reconstruction batches (code recon_steps_max; 0 = no cap; README ML-1M: 50)"),
    "fedrecon-post-steps": Key(0, "FedRecon: at most this many batches of the table update (code post_recon_steps_max; 0 = no cap; README ML-1M: 50); its passes are the core 'local-epochs' (code post_recon_epochs)"),
    "fedrecon-split-dataset": Key(False, "FedRecon: even-indexed batches reconstruct, odd-indexed ones update the table (code split_dataset; false: both use every batch)"),
    "fedrecon-joint": Key(False, "FedRecon: also train the user vector while the table is updated (code jointly_train_variables)"),
    "fedrecon-server-lr": Key(1.0, "FedRecon: server SGD learning rate η_s: g <- g + η_s · (weighted mean of the clients' tables − g) (code server_optimizer, default SGD 1.0)"),
    "fedrecon-weighting": Key("examples", "FedRecon: client weights, the examples of its table update ('examples', the code's default client_weight) or 1 each ('uniform', the code under DP)", ("examples", "uniform")),
    "fedrecon-init": Key("uniform", "FedRecon: initial user vector (each round) and item table: U(−s, s) ('uniform', Keras' 'uniform' initializer of the code's UserEmbedding and Embedding, s = fedrecon-init-scale) or N(0, init-std²) ('normal')", ("uniform", "normal")),
    "fedrecon-init-scale": Key(0.05, "FedRecon: s of the uniform initialisation (Keras' default 0.05)"),
    "fedrecon-eval-split": Key(False, "FedRecon evaluation: reconstruct on the even-indexed batches only (the code's evaluation split) instead of on every training row of the round (the held-out candidates are the query set either way)"),
    "fedrecon-table-lr-eta": Key(0.0, "FedRecon: the item table's client learning rate is the core 'lr' (0, the authors' code) or, with eta > 0, UFGraphFR's code base's item-table rate lr·M·eta − lr (its engines' item group; lr_eta = 80 in its Appendix A, the uniform setting of its Table 4)"),
    "fedrecon-loss": Key("bce", "FedRecon: BCE on sigmoid(p_u · q_i) ('bce', UFGraphFR's implicit protocol) or MSE on the raw p_u · q_i ('mse', the code's MF regression loss) against the 0/1 labels", ("bce", "mse")),
}


def check(cfg):
    for k in ("fedrecon-recon-epochs",):
        if cfg[k] < 1:
            raise ConfigError(f"config key '{k}': expected >= 1, got {cfg[k]}")
    for k in ("fedrecon-recon-steps", "fedrecon-post-steps"):
        if cfg[k] < 0:
            raise ConfigError(f"config key '{k}': expected >= 0 (0 = no cap), got {cfg[k]}")
    if cfg["fedrecon-table-lr-eta"] < 0:
        raise ConfigError(f"config key 'fedrecon-table-lr-eta': expected >= 0 (0 = the core 'lr'), got {cfg['fedrecon-table-lr-eta']}")
    if cfg["fedrecon-recon-lr"] < 0 or cfg["fedrecon-server-lr"] <= 0 or cfg["fedrecon-init-scale"] <= 0:
        raise ConfigError("config keys 'fedrecon-*': expected recon-lr >= 0, server-lr > 0, init-scale > 0")


PROTOCOL = ("Each round the server sends the global item table once per node (with item-upload = rows, the "
            "clients send back only the rows their round touched); every sampled user draws a fresh user vector, "
            "reconstructs it by SGD on its own rows with the table frozen, trains the table with the user vector "
            "frozen and uploads the table (or its rows) with its number of update examples; the server applies "
            "the example-weighted mean delta with a server learning rate. The server sees each client's trained "
            "item table (whose changed rows are the items of its round: positives and sampled negatives) and its "
            "count; the user vector is rebuilt each round and never leaves the client.")

METHODS = [
    Method("fedrecon", "one-user", ("mf",), "strategies.fedrecon:FedRecon", "client_app.fedrecon:FedReconClient",
           "fresh user vector reconstructed each round; the global item table federated",
           "UFGraphFR Table 4 FedRecon row; Singhal et al. 2021 Alg. 1", check=check, keys=KEYS,
           requires={"optimizer": "sgd"}, row_upload=True),
]
