"""PFedRec (Zhang et al., IJCAI'23; Zhangcx19/IJCAI-23-PFedRec abc2380, docs/methods/ufgraphfr.md): an item table and a personal score function
Linear(d, 1) per user (with ``pfedrec-score-layers``, ReLU layers before it: FedCA's NCF-backbone rows,
docs/methods/fedca.md), no user embedding; the server averages the item tables (unweighted)."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "pfedrec-lr-eta": Key(80.0, "PFedRec: item-table learning rate = lr · n_items · pfedrec-lr-eta"),
    "pfedrec-score-layers": Key("", "PFedRec: widths of ReLU layers of the personal score function before its "
                                "Linear(·, 1), comma-separated; '' = the code's Linear(d, 1); '16,8' = FedCA's NCF "
                                "tower (d = 32 -> 16 -> 8 -> 1) for FedCA Table 1's NCF-backbone rows"),
}


def parse_layers(spec) -> tuple[int, ...]:
    """``pfedrec-score-layers``: '' (the code's Linear(d, 1)) or comma-separated positive widths."""
    s = str(spec).strip()
    if not s:
        return ()
    parts = [p.strip() for p in s.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"config key 'pfedrec-score-layers': expected '' or comma-separated positive widths "
                         f"such as '16,8', got {spec!r}")
    return tuple(int(p) for p in parts)


def check(cfg):
    """The score function's widths parse."""
    try:
        parse_layers(cfg["pfedrec-score-layers"])
    except ValueError as e:
        raise ConfigError(str(e)) from None


PROTOCOL = "Each round the server sends the global item table (and score bias) once per node; every user trains its item table and its private score function (Linear(d, 1), or ReLU layers and Linear(·, 1)) and uploads the item table and bias; the server averages them unweighted. The server sees every user's trained item table; the score function stays on the client."

METHODS = [
    Method("pfedrec", "one-user", ("pfedrec",), "strategies.pfedrec:PFedRec", "client_app.pfedrec:PFedRecClient",
           "item table + personal score function; the unweighted mean of the item tables",
           "UFGraphFR Table 2 PFedRec row",
           check=check, requires={"optimizer": "sgd"}, keys=KEYS, row_upload=True),
]
