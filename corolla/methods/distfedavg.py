"""Dist-FedAvg (Khouas et al. 2025, arXiv 2507.01285; docs/methods/distfedavg.md): one-user
LightGCN clients over expanded neighbourhoods pull and push rows of global user and item tables;
the server weights each user row's copies by inverse distance (Eq. 3-9)."""

from corolla.keys import Key
from corolla.methods.declaration import Method

KEYS = {
    "user-agg": Key("distfedavg", "Dist-FedAvg: rule for user rows (distfedavg, fedavg, simpleavg, fedmedian, fedatt)", ("distfedavg", "fedavg", "simpleavg", "fedmedian", "fedatt")),
    "item-agg": Key("fedavg", "Dist-FedAvg: rule for item rows (fedavg or simpleavg in the paper)", ("fedavg", "simpleavg", "fedmedian", "fedatt")),
    "distance-mode": Key("B", "Dist-FedAvg distance (paper §4, Eq. 3–4; the readings: docs/methods/distfedavg.md): 'B' user to the copy's anchor on the previous table, 'A' the copy to the user's previous row, 'C' the copy to the anchor's previous row", ("A", "B", "C")),
    "minkowski-p": Key(2.0, "Dist-FedAvg: order p of the Minkowski distance (Eq. 3)"),
    "distance-eps": Key(1e-8, "Dist-FedAvg: ε in 1/(D + ε) (Eq. 4)"),
    "alpha-schedule": Key("fixed", "Dist-FedAvg α_r of Eq. 7: 'fixed' (alpha-fixed), 'arithmetic' (Eq. 8) or 'geometric' (Eq. 9)", ("fixed", "arithmetic", "geometric")),
    "alpha-fixed": Key(0.5, "Dist-FedAvg: α with alpha-schedule=fixed"),
    "alpha0": Key(1.0, "Dist-FedAvg: α_0 of Eq. 8-9"),
    "alpha-min": Key(0.0, "Dist-FedAvg: α_min of Eq. 8-9"),
    "alpha-delta": Key(0.1, "Dist-FedAvg: δ of Eq. 8 (subtracted) or 9 (factor)"),
    "alpha-period": Key(10, "Dist-FedAvg: T, rounds per decay step (⌊r/T⌋)"),
    "alpha-warmup": Key(0, "Dist-FedAvg: first rounds with α = 1"),
}

PROTOCOL = "Once, users with a common item learn of each other through a matching party (expanded neighbourhoods); every round a sampled user pulls the rows of the global user and item tables for its expanded local graph, trains a LightGCN on it and pushes the rows back; the server aggregates each row's copies, weighting a user row's copies by inverse distance. The server sees the pushed rows and which users share items."

METHODS = [
    Method("distfedavg", "expanded", ("lightgcn",), "strategies.distfedavg:RowAggregation",
           "client_app.distfedavg:ExpandedClient",
           "inverse-distance weighted user rows (user-agg), item rows by item-agg", "Dist-FedAvg Table 3", keys=KEYS,
           key_owners=("fedatt",)),   # user-agg / item-agg = fedatt uses FedAtt's keys
]
