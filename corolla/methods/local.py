"""Local: no aggregation and nothing uploaded; every client trains and evaluates its own model
(the papers' "Local" rows)."""

from corolla.keys import Key
from corolla.methods.declaration import Method

KEYS = {
    "local-init": Key("shared", "Local (silo harness): the item table and tower each client starts from: 'shared', one draw "
                      "for every client (the draw FedAvg starts from), or 'per-client', a draw of each client's own, as "
                      "FedCIA's code builds one model per client for its no-aggregation (IM) rows", ("shared", "per-client")),
}

PROTOCOL = 'Nothing is aggregated and nothing is uploaded: every client trains and evaluates its own model; only metrics travel (0 bytes of parameters). The server sees per-user metric values only.'

METHODS = [
    Method("local", "silo", ("mf", "ncf", "lightgcn"), "strategies.fedavg:Local", "client_app.mf:LocalClient",
           "no aggregation: each silo trains its own model", heterogeneous=True, keys=KEYS),
    Method("local", "silo", ("gfcf",), "strategies.fedavg:Local", "client_app.gfcf:LocalGFCFClient",
           "GF-CF without aggregation: each client predicts R_k F_k from its own data", "FedCIA Table 1 GF-CF local",
           check=lambda cfg: _full_rank(cfg), key_owners=("fedcia",)),   # GF-CF's filter keys
    Method("local", "one-user", ("mf", "ncf"), "strategies.fedavg:Local", "client_app.pmf:OneUserClient",
           "each user trains its own PMF/NCF; nothing is uploaded", "FedCA Table 1 Local row",
           strategy_options={"fuses_after": False}, client_options={"start_from": "own", "uploads": False}),
]


def _full_rank(cfg):
    from corolla.keys import ConfigError

    if cfg["protocol"] != "full-rank":
        raise ConfigError("config key 'protocol': GF-CF scores every item; it needs protocol=full-rank")
