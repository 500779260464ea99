"""FedCIA (Han et al., SIGIR'25; docs/methods/fedcia.md): clients upload
item–item similarity matrices (M×M, or truncated-SVD factors) and GF-CF filters; the server sums
them and sends the global similarity back; parameter models fine-tune towards it (Eq. 6)."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "svd-number": Key(32, "GF-CF: rows k of the ideal low-pass filter"),
    "gfcf-wp": Key(0.3, "GF-CF: weight of the ideal low-pass filter"),
    "gfcf-upload": Key("per-client", "FedCIA GF-CF: each client uploads its filter (the paper) or 'node-sum': a node adds its clients' filters in float64 and uploads one sum (the server sees per-node sums only; same F_agg up to float64 summation order; a node's invalid client excludes its whole sum)", ("per-client", "node-sum")),
    "gfcf-null-rows": Key("lapack", "GF-CF with fewer users than svd-number: keep LAPACK's null-space rows (code) or drop them", ("lapack", "drop")),
    "agg-beta": Key(60.0, "FedCIA GF-CF: prediction R F_k + agg-beta * R F_agg"),
    "laplace-scale": Key(0.001, "FedCIA: scale b of the i.i.d. Laplace noise added to every uploaded matrix (0 = none)"),
    "laplace-sampler": Key("numpy", "FedCIA: how the Laplace noise is drawn: NumPy's float64 laplace cast to float32 (as the code) or 'exponential': b * Exp(1) * random sign in float32, the same law, about 2.4x faster to draw (corolla/noise.py); different draws for one seed", ("numpy", "exponential")),
    "fedcia-upload": Key("full", "FedCIA parameter models: upload the M×M similarity ('full') or its truncated SVD ('svd')", ("full", "svd")),
    "fedcia-svd-solver": Key("randomized", "FedCIA fedcia-upload=svd: the client's SVD: LAPACK's full SVD (as the code) or a seeded randomized top-L SVD (same factors to float32 precision, ~50x faster at M=1682)", ("full", "randomized")),
    "svd-rank": Key(0, "FedCIA fedcia-upload=svd: rank L (0 = dim, as the code's latent_dim)"),
    "finetune-steps": Key(100, "FedCIA: SGD steps towards the global similarity after each round"),
    "finetune-lr": Key(0.1, "FedCIA: fine-tuning learning rate (agg_lr)"),
    "finetune-loss": Key("fro", "FedCIA fine-tuning loss: the code's Frobenius norm ('fro') or the paper's MSE ('mse', Eq. 6)", ("fro", "mse")),
}


def check_gfcf(cfg):
    if cfg["protocol"] != "full-rank":
        raise ConfigError("config key 'protocol': GF-CF scores every item; it needs protocol=full-rank")


def check_param(cfg):
    if cfg["secagg"] != "none" and cfg["fedcia-upload"] != "full":
        raise ConfigError("config key 'secagg': secure aggregation sums full uploads; it needs fedcia-upload=full")


PROTOCOL = "Parameter models: each round a client trains its model and uploads an M×M item–item similarity of its item embeddings (11.3 MB at M = 1,682; or its truncated-SVD factors with fedcia-upload = svd), plus Laplace noise; the server sums them and sends the mean similarity back once per node; clients fine-tune towards it. GF-CF: one shot, each client uploads its M×M GF-CF filter and receives the mean filter (with gfcf-upload = node-sum a node uploads the float64 sum of its clients' filters instead). The server sees each client's (noised) similarity or filter — with node-sum only each node's sum — never embeddings or interactions."

METHODS = [
    Method("fedcia", "silo", ("gfcf",), "strategies.fedcia:FedCIAGFCF", "client_app.gfcf:GFCFClient",
           "one-shot upload of each client's GF-CF filter; the server sums them", "FedCIA Table 1 GF-CF row",
           check=check_gfcf, keys=KEYS, secure_phase="upload"),
    Method("fedcia", "silo", ("mf", "ncf", "lightgcn"), "strategies.fedcia:FedCIAParam",
           "client_app.fedcia:FedCIAParamClient",
           "item-item similarity of each client's item table summed on the server; fine-tuning towards it",
           "FedCIA Table 1 MF/MLP/LightGCN rows", heterogeneous=True, keys=KEYS, check=check_param,
           secure_phase="train"),
]
