"""FedMedian (Yin et al. 2018; Dist-FedAvg paper §5.2): the coordinate-wise median of each
user and item row's copies, on Dist-FedAvg's expanded harness."""

from corolla.methods.declaration import Method

PROTOCOL = "As Dist-FedAvg's harness (pull the rows of the expanded local graph, train LightGCN, push the rows back); the server takes the coordinate-wise median of each row's copies. It sees the pushed rows."

METHODS = [
    Method("fedmedian", "expanded", ("lightgcn",), "strategies.distfedavg:RowAggregation",
           "client_app.distfedavg:ExpandedClient", "coordinate-wise median of each row's copies",
           "Dist-FedAvg Table 3 FedMedian row", key_owners=("distfedavg",), strategy_options={"rule": "fedmedian"}),
]
