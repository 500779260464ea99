"""FCF / SimpleAvg (Ammad-ud-din et al. 2019): the unweighted mean of the clients' uploads, as
the FedCA and Dist-FedAvg papers use it (FedCA paper §6.1; Dist-FedAvg paper §5.2, SimpleAvg)."""

from corolla.methods.declaration import Method

PROTOCOL = "As FedAvg (the global shared parameters down, each client's trained ones up), but the server averages the uploads unweighted; it sees every client's trained item table."

METHODS = [
    Method("fcf", "silo", ("mf", "ncf", "lightgcn"), "strategies.fedavg:FCF", "client_app.mf:FedAvgClient",
           "unweighted mean of the shared parameters", secure_phase="train"),
    Method("fcf", "one-user", ("mf", "ncf"), "strategies.fedavg:FCF", "client_app.pmf:OneUserClient",
           "unweighted mean of the one-user clients' item tables", "FedCA Table 1 FCF row",
           client_options={"start_from": "global"}, row_upload=True),
    Method("fcf", "expanded", ("lightgcn",), "strategies.distfedavg:RowAggregation",
           "client_app.distfedavg:ExpandedClient", "SimpleAvg: unweighted mean of each user and item row",
           "Dist-FedAvg Table 3 SimpleAvg row", key_owners=("distfedavg",), strategy_options={"rule": "simpleavg"}),
]
