"""The harnesses: how a method's logical clients train, and the checks every method on a harness
shares.

* ``silo``: a logical client holds one or more users and one model (FedCIA, FedMF, LPSFed);
* ``one-user``: one user per client with its own full item table, evaluated with its own
  post-training parameters, hosted users trained batched (FedCA, PFedRec, UFGraphFR, GPFedRec;
  docs/methods/fedca.md, docs/methods/ufgraphfr.md);
* ``expanded``: one user per client with a LightGCN over its expanded local graph, pulling and
  pushing rows of global user and item tables (Dist-FedAvg and its baselines;
  docs/methods/distfedavg.md).
"""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Harness

ONE_USER_KEYS = {
    "lr-mlp": Key(0.01, "one-user harness: Adam learning rate of the NCF tower (lr_structure)"),
    "mlp-weight-decay": Key(0.0, "one-user harness: Adam weight decay of the NCF tower"),
    "early-break": Key(0.0, "one-user harness: stop a client's local epochs once the relative change of its cumulative mean loss is below this (FedCA code: 1e-4; 0 = off)"),
    "item-upload": Key("full", "one-user harness: each client uploads its whole trained item table ('full', the papers' protocol) or only the rows its round trained, with their ids ('rows': every other row equals the global table it received, so the server rebuilds the same tables; the mean is the same up to float64 rounding; the client keeps no copy of the global table in its state). For methods whose clients start each round from the global table (FedAvg, FCF, PFedRec); what lets them reach tens of thousands of users", ("full", "rows")),
    "lr-eta": Key(80.0, "one-user harness, optimizer = 'sgd' (UFGraphFR's code base: UFGraphFR, GPFedRec, and FedAvg's SGD reading): learning-rate multiplier: item table lr·M·lr-eta − lr, user part lr·lr-eta − lr, the rest lr (the code's lr_eta)"),
    "one-user-eval": Key("own", "one-user harness, methods whose clients start each round from the global item table (FedAvg, FCF, FedAtt): each client is evaluated with its own post-training parameters ('own', FedCA's code, engine.py:210-221) or with the round's aggregate, the global item table (and tower) the server computed, and its own user vector ('global', FedMF's model: one global item model; evaluated with the next round's message)", ("own", "global")),
    "ncf-tower": Key("shared", "one-user harness, model = 'ncf', methods whose clients start each round from the global item table (FedAvg, FCF): the NCF tower is averaged with the item table and sent back with it ('shared', FedCA's code: tools.py:9-30 aggregates the MLP with the item table's weights) or stays on each client, trained from the shared initialisation, and only the item table crosses ('personal', the FedCA paper's §3: 'we will use item embedding table Q_u to instantiate general Θ_u')", ("shared", "personal")),
    "rank-items": Key("own", "one-user harness, partition = 'spectral', full ranking: each user's items are ranked among its subgraph's items ('own', LPSFed's construction: a client ranks its local item set, its test items are in it) or among all items of the dataset ('all': the same trained models, the other subgraphs' items as candidates too; a reading of a baseline's row whose ranking the paper does not describe)", ("own", "all")),
    "user-init": Key("per-client", "initial user vectors: seeded per client, or one shared vector for all (FedCA code: a deepcopy of the template model)", ("per-client", "shared")),
}

EXPANDED_KEYS = {
    "max-neighbors-per-item": Key(0, "expansion: at most this many matched users per item (0 = no cap; FedPerGNN 100)"),
    "max-items": Key(0, "expansion: at most this many of a user's items are matched (0 = no cap; FedPerGNN 100)"),
    "eval-embeddings": Key("propagated", "expanded harness evaluation: LightGCN-propagated global tables over the training graph the server learned in the expansion ('propagated', docs/methods/distfedavg.md) or the global tables as they are ('layer0')", ("propagated", "layer0")),
    "neg-pool-size": Key(100, "expanded harness: negative item rows a client pulls for its next round (its BPR negatives)"),
}


def check_silo(cfg, method):
    # a silo client trains its model's own loss: LightGCN's is BPR (``corolla.models.lightgcn``); the
    # one-user harness trains BCE on sampled rows whatever the model, the expanded one BPR (below)
    if cfg["model"] == "lightgcn" and cfg["loss"] != "bpr":
        raise ConfigError("config key 'loss': LightGCN is trained with 'bpr'")


def check_one_user(cfg, method):
    if cfg["partition"] not in ("user", "spectral"):
        raise ConfigError("config key 'partition': harness='one-user' needs partition='user' (or 'spectral': every "
                          "user its own client inside LPSFed's subgraphs)")
    if cfg["partition"] == "spectral" and cfg["protocol"] != "full-rank":
        raise ConfigError("config key 'protocol': harness='one-user' with partition='spectral' ranks each user over "
                          "its subgraph's items: it needs protocol='full-rank'")
    if cfg["rank-items"] == "all" and cfg["partition"] != "spectral":
        raise ConfigError("config key 'rank-items': 'all' widens the ranking beyond a user's subgraph; with "
                          f"partition={cfg['partition']!r} every user already ranks all items, so use 'own'")
    if cfg["client-models"]:
        raise ConfigError("config key 'client-models': not supported with harness='one-user'")
    if cfg["item-upload"] == "rows" and not method.row_upload:
        raise ConfigError(f"config key 'item-upload': 'rows' needs clients that start each round from the global item "
                          f"table (fedavg, fcf, pfedrec on harness='one-user'); method '{method.name}' keeps its own "
                          f"table, so use item-upload='full'")
    if cfg["one-user-eval"] == "global":
        if method.client_options.get("start_from") != "global":
            raise ConfigError(f"config key 'one-user-eval': 'global' is for methods whose clients start each round from "
                              f"the global item table (fedavg, fcf, fedatt on harness='one-user'); method "
                              f"'{method.name}' keeps its own, so use 'own'")
        if cfg["model"] == "lightgcn":
            raise ConfigError("config key 'one-user-eval': 'global' scores the global table without the user's graph; "
                              "with model='lightgcn' use 'own'")
    if cfg["ncf-tower"] == "personal":
        if method.name not in ("fedavg", "fcf"):
            raise ConfigError(f"config key 'ncf-tower': 'personal' is for the averaging baselines whose clients start "
                              f"each round from the global item table (fedavg, fcf on harness='one-user'); method "
                              f"'{method.name}' does not take it, so use 'shared'")
        if cfg["model"] != "ncf":
            raise ConfigError(f"config key 'ncf-tower': 'personal' keeps the NCF tower on the client; model="
                              f"{cfg['model']!r} has no tower, so use 'shared'")
        if cfg["item-upload"] != "full" or cfg["one-user-eval"] != "own":
            raise ConfigError("config key 'ncf-tower': 'personal' needs item-upload='full' and one-user-eval='own' "
                              "(the client's own tower lives in its state and scores its own evaluation)")
    want = {"loss": "bce", "optimizer-state": "fresh", "weight-decay": 0.0, "optimizer": "adam",
            "train-samples": "per-positive", **method.requires}
    for key, value in want.items():
        if cfg[key] not in (value if isinstance(value, tuple) else (value,)):
            value = " or ".join(repr(v) for v in value) if isinstance(value, tuple) else repr(value)
            raise ConfigError(f"config key '{key}': harness='one-user' trains method '{method.name}' with {key}={value} "
                              f"(BCE on sigmoid scores, a fresh optimiser each round, negatives re-drawn "
                              f"each round; the tower's decay is 'mlp-weight-decay'), got {cfg[key]!r}")


def check_expanded(cfg, method):
    want = {"model": "lightgcn", "partition": "user", "protocol": "full-rank", "loss": "bpr"}
    for key, value in want.items():
        if cfg[key] != value:
            raise ConfigError(f"config key '{key}': harness='expanded' runs LightGCN clients of one user each "
                              f"with BPR and full ranking ({key}={value!r}), got {cfg[key]!r}")


HARNESSES = {
    "silo": Harness("silo", "a logical client holds one or more users and one model", check=check_silo),
    "one-user": Harness("one-user", "one user per client, its own full item table, evaluated with its own "
                        "post-training parameters", ONE_USER_KEYS, check_one_user, evaluates_in_reply=True),
    "expanded": Harness("expanded", "one user per client, a LightGCN over its expanded local graph, rows of "
                        "global user and item tables", EXPANDED_KEYS, check_expanded),
}
