"""PFedRec (Zhang et al., IJCAI'23; spec UFGRAPHFR §8): an item table and a personal score function
Linear(d, 1) per user, no user embedding; the server averages the item tables (unweighted)."""

from corolla.keys import Key
from corolla.methods.declaration import Method

KEYS = {
    "pfedrec-lr-eta": Key(80.0, "PFedRec: item-table learning rate = lr · n_items · pfedrec-lr-eta"),
}

METHODS = [
    Method("pfedrec", "one-user", ("pfedrec",), "strategies.pfedrec:PFedRec", "client_app.pfedrec:PFedRecClient",
           "item table + personal score function; the unweighted mean of the item tables",
           "UFGraphFR Table 2 PFedRec row",
           requires={"optimizer": "sgd"}, keys=KEYS),
]
