"""FedAtt (Ji et al. 2019; shaoxiongji/fed-att ``src/agg/aggregate.py``): per parameter tensor, attention
softmax_c(‖w_server − w_c‖) and w ← w_server − ε Σ_c att_c (w_server − w_c) + dp·N(0, I).

The code takes ‖·‖ with ``scipy.linalg.norm(w_server[k] − w_clients[i][k], ord=2)`` per parameter tensor,
which for a matrix (an item table) is its largest singular value, not the Frobenius norm of its entries;
``fedatt-norm = matrix`` is that (the default since 2026-12-02), ``flattened`` the entries' norm (every
FedAtt result recorded before "FedAtt's norm of a table" in ``docs/results.md``).

FedCA's paper (§4, "Relations with Classic Aggregation") describes its FedAtt baseline as FedCA with
α = β = 0 and the proxy coefficient p_u "set to the degree of difference between local and global
models", without the softmax; ``fedatt-weights = distance`` is that reading, att_c ∝ ‖w_server − w_c‖."""

from corolla.keys import Key
from corolla.methods.declaration import Method

KEYS = {
    "fedatt-epsilon": Key(1.0, "FedAtt: step size ε"),
    "fedatt-ord": Key(2, "FedAtt: order of the distance norm"),
    "fedatt-dp": Key(0.001, "FedAtt: std of the Gaussian noise added to the new global parameters"),
    "fedatt-weights": Key("softmax", "FedAtt: client weights from the distances ‖w_server − w_c‖: 'softmax' of them (the fed-att code) "
                          "or 'distance', proportional to them (the FedCA paper's §4 reading, p_u = the degree of difference "
                          "between local and global models)", ("softmax", "distance")),
    "fedatt-norm": Key("matrix", "FedAtt: the distance ‖w_server − w_c‖ of a matrix-shaped tensor (an item table): "
                       "'flattened', the norm of its entries as one vector (Frobenius at ord 2), or 'matrix', "
                       "linalg.norm(tensor, ord) as the fed-att code calls it (at ord 2 the largest singular value; the default); "
                       "vectors (every row of the expanded harness) give the same under both", ("flattened", "matrix")),
}

PROTOCOL = "As FedAvg (the global shared parameters down, each client's trained ones up); the server moves the global parameters towards the clients' by attention weights softmax(‖w_server − w_c‖) (or, with fedatt-weights = distance, proportional to the distances) and adds Gaussian noise of std fedatt-dp; it sees every client's trained item table."

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
