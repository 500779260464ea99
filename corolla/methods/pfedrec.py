"""PFedRec (Zhang et al., IJCAI'23; Zhangcx19/IJCAI-23-PFedRec abc2380, docs/methods/ufgraphfr.md): an item table and a personal score function
Linear(d, 1) per user, no user embedding; the server averages the item tables (unweighted)."""

from corolla.keys import Key
from corolla.methods.declaration import Method

KEYS = {
    "pfedrec-lr-eta": Key(80.0, "PFedRec: item-table learning rate = lr · n_items · pfedrec-lr-eta"),
}

PROTOCOL = "Each round the server sends the global item table (and score bias) once per node; every user trains its item table and its private score function Linear(d, 1) and uploads the item table and bias; the server averages them unweighted. The server sees every user's trained item table; the score function stays on the client."

METHODS = [
    Method("pfedrec", "one-user", ("pfedrec",), "strategies.pfedrec:PFedRec", "client_app.pfedrec:PFedRecClient",
           "item table + personal score function; the unweighted mean of the item tables",
           "UFGraphFR Table 2 PFedRec row",
           requires={"optimizer": "sgd"}, keys=KEYS, row_upload=True),
]
