"""GPFedRec (Zhang et al., KDD'24, arXiv 2305.07866; docs/methods/ufgraphfr.md): UFGraphFR's harness with a free user vector; the
server builds the user graph from the uploaded item tables and sends each user its
graph-aggregated table and the global one. Reads UFGraphFR's graph keys.

On the silo harness it is FedCIA Table 3's GGA column (FedCIA §6.3: "clients aggregate parameters
by forming a relationship graph based on item similarity (e.g., GPFedRec)"): the same server
around FedCIA's MF and MLP clients (``client_app.gga``)."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method
from corolla.methods.ufgraphfr import check as check_network

KEYS = {
    "gpfedrec-head": Key("64,32,16,8", "GPFedRec on the one-user harness: widths of its ReLU score head, the first the "
                         "concatenated user and item vectors (2 × 32); the code's mlp.py:6-35 is 64,32,16,8, FedCIA's "
                         "MLP backbone (its Table 3) 64,32"),
}


def check(cfg):
    """GPFedRec on the one-user harness: UFGraphFR's network and graph checks, and its head."""
    check_network(cfg)
    widths = str(cfg["gpfedrec-head"]).split(",")
    if not all(w.strip().isdigit() and int(w) > 0 for w in widths) or int(widths[0]) != 64:
        raise ConfigError(f"config key 'gpfedrec-head': expected comma-separated positive widths starting with 64 "
                          f"(the 32-d user and item vectors side by side), got {cfg['gpfedrec-head']!r}")


def check_silo(cfg):
    """GGA on the silo harness: one model per client, its item table the graph's input."""
    if cfg["client-models"]:
        raise ConfigError("config key 'client-models': gpfedrec on harness='silo' builds its user graph from item "
                          "tables of one width; heterogeneous clients are not supported")
    if cfg["graph-mode"] == "paper" and cfg["neighborhood-size"] <= 0:
        raise ConfigError("config key 'neighborhood-size': graph-mode='paper' connects each user to its K most "
                          "similar users; expected K > 0")
    if cfg["upload-noise"] < 0:
        raise ConfigError(f"config key 'upload-noise': expected >= 0, got {cfg['upload-noise']}")

PROTOCOL = "Every round each user trains and uploads its item table (with noise where set); the server builds a user graph from the uploaded tables and sends each user its graph-aggregated table and the global one. The server sees every user's item table."

METHODS = [
    Method("gpfedrec", "one-user", ("gpfedrec",), "strategies.ufgraphfr:GraphAggregation",
           "client_app.ufgraphfr:GraphClient",
           "user graph from the uploaded item tables; personalised and global tables back",
           "UFGraphFR Table 2 GPFedRec row", check=check, key_owners=("ufgraphfr",),
           strategy_options={"global_table_too": True},
           requires={"optimizer": "sgd"}, keys=KEYS),
    Method("gpfedrec", "silo", ("mf", "ncf"), "strategies.ufgraphfr:GraphAggregation", "client_app.gga:GGAClient",
           "graph-guided aggregation (GGA): GPFedRec's user graph over the clients' item tables, around FedCIA's MF "
           "and MLP clients", "FedCIA Table 3 GGA column", check=check_silo, key_owners=("ufgraphfr",),
           strategy_options={"global_table_too": True}),
]
