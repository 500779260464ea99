"""FedAtt (Ji et al. 2019; shaoxiongji/fed-att ``src/agg/aggregate.py``): per parameter tensor, attention
softmax_c(‖w_server − w_c‖) and w ← w_server − ε Σ_c att_c (w_server − w_c) + dp·N(0, I)."""

from corolla.keys import Key
from corolla.methods.declaration import Method

KEYS = {
    "fedatt-epsilon": Key(1.0, "FedAtt: step size ε"),
    "fedatt-ord": Key(2, "FedAtt: order of the distance norm"),
    "fedatt-dp": Key(0.001, "FedAtt: std of the Gaussian noise added to the new global parameters"),
}

PROTOCOL = "As FedAvg (the global shared parameters down, each client's trained ones up); the server moves the global parameters towards the clients' by attention weights softmax(‖w_server − w_c‖) and adds Gaussian noise of std fedatt-dp; it sees every client's trained item table."

METHODS = [
    Method("fedatt", "silo", ("mf", "ncf", "lightgcn"), "strategies.fedatt:FedAtt", "client_app.mf:FedAvgClient",
           "attention-weighted step of the global parameters towards the clients'", keys=KEYS),
    Method("fedatt", "one-user", ("mf", "ncf"), "strategies.fedatt:FedAtt", "client_app.pmf:OneUserClient",
           "FedAtt of the one-user clients' item tables", "FedCA Table 1 FedAtt row",
           client_options={"start_from": "global"}, keys=KEYS),
    Method("fedatt", "expanded", ("lightgcn",), "strategies.distfedavg:RowAggregation",
           "client_app.distfedavg:ExpandedClient", "FedAtt of each user and item row",
           "Dist-FedAvg Table 3 FedAtt row", key_owners=("distfedavg",), strategy_options={"rule": "fedatt"}, keys=KEYS),
]
