"""MetaMF (Lin et al., SIGIR'20, Fig. 1; the authors' code TempSDU/MetaMF bbfdf0b ``MetaMF.py``;
docs/methods/metamf.md) on UFGraphFR's one-user harness: the server holds the meta network (``corolla.models.metamf``) and
the users' embeddings; each round it generates every sampled user's private RP model and item
table and sends them to that user alone; the user computes the gradient of its loss on its own
rows with respect to what it received and returns it; the server back-propagates the returned
gradients through the generator and takes one optimiser step (federated SGD). The client keeps
nothing. The authors' code trains the same network centrally on mixed-user mini-batches."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "metamf-user-dim": Key(32, "MetaMF: size of the user embedding e_u (code user_emb_size)"),
    "metamf-memory": Key(128, "MetaMF: size of the collaborative vector c_u = e_u M (code mem_size)"),
    "metamf-hidden": Key(512, "MetaMF: hidden width of each generator (code hidden_size)"),
    "metamf-rank": Key(8, "MetaMF: rank k of the generated item table Q_u = L_u R_u (code item_mem_num)"),
    "metamf-weight-decay": Key(1e-3, "MetaMF: Adam weight decay of every server parameter (Run.ipynb cell 15)"),
    "metamf-clip": Key(5.0, "MetaMF: global gradient-norm clip of each server step (Run.ipynb cell 17; 0 = off)"),
    "metamf-loss": Key("mse", "MetaMF: the client's loss, MSE on the raw output against the 0/1 labels ('mse', the code's MetaMF.loss) or BCE on its sigmoid ('bce')", ("mse", "bce")),
    "metamf-rows-per-round": Key(0, "MetaMF: rows a client uses per round, a seeded subset of its positives and negatives (0 = all)"),
    "metamf-weighting": Key("examples", "MetaMF: weight of a client's gradient in the server step: its rows / all rows ('examples': the step of the code's mean over one mini-batch holding every row) or 1 / clients ('uniform')", ("examples", "uniform")),
}


def check(cfg):
    for k in ("metamf-user-dim", "metamf-memory", "metamf-hidden", "metamf-rank"):
        if cfg[k] < 1:
            raise ConfigError(f"config key '{k}': expected >= 1, got {cfg[k]}")
    if cfg["dim"] < 4:
        raise ConfigError(f"config key 'dim': MetaMF's RP model is d -> d/4 -> 1, expected dim >= 4, got {cfg['dim']}")
    for k, what in (("metamf-clip", "0 = off"), ("metamf-weight-decay", "0 = none"),
                    ("metamf-rows-per-round", "0 = all")):
        if cfg[k] < 0:
            raise ConfigError(f"config key '{k}': expected >= 0 ({what}), got {cfg[k]}")


PROTOCOL = ("Each round the server generates, for every sampled user, its private item table Q_u (items x d) and "
            "the weights of its rating-prediction model from the meta network and the user's embedding, both of "
            "which only the server holds, and sends them to that user alone; the user computes the gradient of "
            "its loss on its own rows with respect to them and returns it (the rows of Q_u it used, with their "
            "item ids, and the RP gradients) with its number of rows; the server back-propagates the weighted "
            "gradients into the meta network and the embeddings and takes one Adam step. The server sees which "
            "items each user trained on (positives and sampled negatives) and, as it can compute every "
            "prediction itself, the labels behind an MSE gradient; the client keeps no parameter.")

METHODS = [
    Method("metamf", "one-user", ("metamf",), "strategies.metamf:MetaMF", "client_app.metamf:MetaMFClient",
           "server-side meta network generates each user's private model; clients return gradients",
           "UFGraphFR Table 4 MetaMF row; Lin et al. 2020 Fig. 1 (CM and MR modules on the server, RP module on "
           "the device)", check=check, keys=KEYS, requires={"optimizer": "adam"}),
]
