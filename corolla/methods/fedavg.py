"""FedAvg (McMahan et al. 2017; FedMF / FedNCF in the papers' tables) on every harness.

* ``silo``: the example-weighted mean of the clients' shared parameters (FedCIA code
  ``fedavg.py:51-71``); ``strategies/fedavg.py``, ``client_app/mf.py``.
* ``silo`` with ``lgcn``: FedAvg-LGCN, LPSFed's "w/o per & bias" row (LPSFed paper Table 4, Eq. 13 with ρ̄ ≡ 1):
  the LPSFed strategy with the plain mean of the MLPs (ρ̄ ≡ 1) and a fixed-size reference graph.
* ``one-user``: FedMF on FedCA's / UFGraphFR's protocol (FedCA paper Table 1, UFGraphFR paper Table 4): each user trains
  from the global item table; ``client_app/pmf.py``. With ``model = lightgcn``: FedLightGCN (UFGraphFR Table 4, from
  GPFedRec's paper: each client trains LightGCN on its first-order interaction subgraph), ``corolla/models/star.py``.
  The harness's BCE on each positive and its negatives, or with ``loss = bpr`` (LightGCN's own loss; neither paper
  gives FedLightGCN's) BPR on the same positives and negatives paired.
* ``expanded``: FedAvg of the user and item rows on Dist-FedAvg's harness (Dist-FedAvg paper Eq. 1).
"""

from corolla.keys import ConfigError
from corolla.methods.declaration import Method
from corolla.methods.lpsfed import check as lgcn_check


def check_one_user_lightgcn(cfg) -> None:
    """FedLightGCN scores with the rows of each user's positives (its graph): item-upload = rows,
    whose clients keep only the rows they trained, is not for it."""
    if cfg["model"] == "lightgcn" and cfg["item-upload"] == "rows":
        raise ConfigError("config key 'item-upload': 'rows' is not supported with model='lightgcn' on "
                          "harness='one-user' (its scores need the user's positive rows); use item-upload='full'")


PROTOCOL = "Each round the server sends the global shared parameters (the item table, and the NCF tower) once per node; every sampled client trains them with its private user table and uploads the shared parameters with its number of training examples; the server sees each client's trained item table and replaces the global one by their example-weighted mean. On the one-user harness the same happens per user (with ncf-tower = personal the NCF tower stays on each client and only the item table crosses); on the expanded harness the rows are user and item rows of global tables; with the LGCN model only the pooling and predictive MLPs travel (LPSFed's FedAvg row)."

METHODS = [
    Method("fedavg", "silo", ("mf", "ncf", "lightgcn"), "strategies.fedavg:FedAvg", "client_app.mf:FedAvgClient",
           "example-weighted mean of the shared parameters (item table, NCF tower)", "FedCIA Table 1 FedMF/FedNCF rows", secure_phase="train"),
    Method("fedavg", "silo", ("lgcn",), "strategies.lpsfed:LPSFed", "client_app.lpsfed:LPSFedClient",
           "FedAvg-LGCN: the plain mean of the LGCN clients' MLPs (LPSFed's 'w/o per & bias')",
           "LPSFed Table 1 FedAvg row", key_owners=("lpsfed",), check=lgcn_check,
           strategy_options={"personalized": False, "uses_stats": False}),
    Method("fedavg", "one-user", ("mf", "ncf", "lightgcn"), "strategies.fedavg:FedAvg", "client_app.pmf:OneUserClient",
           "FedMF on one-user clients: each user trains from the global item table; with lightgcn, FedLightGCN: "
           "LightGCN over each user's first-order graph", "FedCA Table 1 FedAvg row; UFGraphFR Table 4 FedLightGCN row",
           client_options={"start_from": "global"}, row_upload=True, check=check_one_user_lightgcn,
           requires={"optimizer": ("adam", "sgd"), "loss": ("bce", "bpr")}),
    Method("fedavg", "expanded", ("lightgcn",), "strategies.distfedavg:RowAggregation",
           "client_app.distfedavg:ExpandedClient", "example-weighted mean of each user and item row",
           "Dist-FedAvg Table 3 FedAvg row", key_owners=("distfedavg",), strategy_options={"rule": "fedavg"}),
]
