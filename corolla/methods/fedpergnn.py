"""FedPerGNN (Wu et al., "A federated graph neural network framework for privacy-preserving
personalization", Nat. Commun. 13:3091, 2022; the authors' code wuch15/FedPerGNN 9e77e2e;
docs/methods/fedpergnn.md) on UFGraphFR's one-user harness (its Table 4 baseline): each client
is one user with a private user vector; a matching party expands its history items with the user
vectors of co-interacting users; a GAT over each item's neighbours and an attention over the
history give the user representation; each round the sampled clients upload clipped, noised
gradients of the shared network and of their item rows (plus pseudo-interacted items), and the
server takes one SGD step with their mean (FedSGD)."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "fedpergnn-history-len": Key(100, "FedPerGNN: history items a client keeps and expands (a seeded shuffle of its training items, cut to this; code HIS_LEN, preprocess.py:5-17)"),
    "fedpergnn-neighbours": Key(100, "FedPerGNN: neighbour users per history item, re-drawn each time the matching party sends them (0 = all; code NEIGHBOR_LEN, expansion.py:52-53)"),
    "fedpergnn-include-self": Key(False, "FedPerGNN: the matching party lists the client itself among an item's holders (true: the code's cipher2userid, expansion.py:21-27; false: other users only, the paper's neighbours)"),
    "fedpergnn-neighbour-softmax": Key(True, "FedPerGNN: GAT weights are a softmax over the item's present neighbours (true: the paper's graph attention) or the code's raw LeakyReLU scores with -99 on empty slots (false; model.py:38-40)"),
    "fedpergnn-history-mask": Key("correct", "FedPerGNN: history attention masks the padding slots ('correct') or, as the code's ComputeMasking, adds -99 to the real items and 0 to the padding ('reference', model.py:10-17, 48-53)", ("correct", "reference")),
    "fedpergnn-pool": Key("aggregated", "FedPerGNN: the history attention pools the GAT-aggregated items ('aggregated', the paper's GNN user embedding) or the plain item representations ('reference': model.py:54 pools uiemb, so the neighbours only steer the attention)", ("aggregated", "reference")),
    "fedpergnn-dropout": Key(0.2, "FedPerGNN: dropout on the user and candidate representations in training (code DROP, model.py:44, 46)"),
    "fedpergnn-clip": Key(0.1, "FedPerGNN: L2 clip δ of each gradient tensor a client computes (code CLIP, Keras clipnorm per tensor)"),
    "fedpergnn-epsilon": Key(1.0, "FedPerGNN: LDP ε; the Laplace scale is λ = 2δ/ε on each client's upload (noise-rule 'paper') or lr·2δ/√B/ε on the server's weights (noise-rule 'reference', run.py:45-47; B = clients of the round)"),
    "fedpergnn-noise-rule": Key("paper", "FedPerGNN: 'paper': each client adds M pseudo-item rows and Laplace(2δ/ε) to its clipped upload; 'reference': the code's noise after the server's step (Gaussian pseudo-item noise on the item table, run.py:38-42, then Laplace(lr·2δ/√B/ε) on every weight, run.py:45-47), clients upload clipped gradients of their real rows only; 'none': clipped gradients, no pseudo items, no noise", ("paper", "reference", "none")),
    "fedpergnn-pseudo-items": Key(1000, "FedPerGNN: M pseudo-interacted items a client adds to its upload with gradients drawn from N(mean, std²) of its real item-row gradients per dimension (noise-rule 'paper'; with 'reference' the server's noise scale √(M·B/I); code PSEUDO; 0 = none)"),
    "fedpergnn-item-agg": Key("clients", "FedPerGNN: an item row's step uses the sum of its uploaded gradients over the round's clients ('clients': the FedSGD gradient of the mean client loss) or their mean over the clients that sent that row ('senders')", ("clients", "senders")),
    "fedpergnn-label-cast": Key(False, "FedPerGNN demonstration: labels y/100 cast to int32 as the code does (preprocess.py:32-38, const.py:1): every 0/1 label becomes 0, the model learns nothing and ranks at chance (UFGraphFR Table 4's FedPerGNN numbers)"),
}


def check(cfg):
    for k in ("fedpergnn-history-len",):
        if cfg[k] < 1:
            raise ConfigError(f"config key '{k}': expected an integer >= 1, got {cfg[k]}")
    for k in ("fedpergnn-neighbours", "fedpergnn-pseudo-items"):
        if cfg[k] < 0:
            raise ConfigError(f"config key '{k}': expected an integer >= 0 (0 = {'all' if 'neigh' in k else 'none'}), "
                              f"got {cfg[k]}")
    for k in ("fedpergnn-clip", "fedpergnn-epsilon"):
        if not cfg[k] > 0:
            raise ConfigError(f"config key '{k}': expected a number > 0, got {cfg[k]}")
    if not 0 <= cfg["fedpergnn-dropout"] < 1:
        raise ConfigError(f"config key 'fedpergnn-dropout': expected 0 <= p < 1, got {cfg['fedpergnn-dropout']}")


PROTOCOL = ("Round 1 starts with the expansion: every client sends the pseudonyms (salted hashes) of its history "
            "items and its user vector to the matching party, which sends each client, per history item, up to "
            "fedpergnn-neighbours user vectors of other users holding that item (as distinct rows and slot indices, "
            "no user ids). Each round the sampled clients receive the shared network and the item table (once per "
            "node) and fresh neighbour rows, compute the gradient of their mean BCE loss, update their own user "
            "vector, and upload clipped gradients of the network and of their item rows (with the paper's noise "
            "rule: plus M pseudo-item rows and Laplace noise) and their new user vector (for the matching party); "
            "the server takes one SGD step with the mean. In Corolla the matching party runs in the ServerApp "
            "process: the server sees every client's item pseudonyms (so the co-interaction graph) and user vectors "
            "as well as the noised gradients.")

METHODS = [
    Method("fedpergnn", "one-user", ("pergnn",), "strategies.fedpergnn:FedPerGNN", "client_app.fedpergnn:FedPerGNNClient",
           "GAT over matched neighbours, private user vectors, clipped+noised FedSGD gradients with pseudo items",
           "UFGraphFR Table 4 FedPerGNN row; Wu et al. 2022 (Nat. Commun.), code wuch15/FedPerGNN 9e77e2e",
           check=check, keys=KEYS, requires={"optimizer": "sgd", "local-epochs": 1}),
]
