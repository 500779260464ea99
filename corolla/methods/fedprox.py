"""FedProx (Li et al., MLSys 2020, "Federated Optimization in Heterogeneous Networks", Eq. 2): each
client minimises its local loss plus the proximal term (μ/2)·‖w − w^t‖² towards the global
parameters w^t it received; the server aggregates as FedAvg (example-weighted mean). With μ = 0 it
is FedAvg exactly (a test). None of the five papers ships it; it is the walk-through of
``docs/adding-a-method.md``.
"""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "fedprox-mu": Key(0.01, "FedProx: μ of the proximal term (μ/2)·‖w − w_global‖² over the shared parameters (0 = FedAvg)"),
}


def check(cfg):
    if cfg["fedprox-mu"] < 0:
        raise ConfigError(f"config key 'fedprox-mu': expected >= 0, got {cfg['fedprox-mu']}")


PROTOCOL = "As FedAvg: the global shared parameters down once per node, each client's trained shared parameters and example count up, the example-weighted mean on the server; only the clients' local objective differs (the proximal term μ/2‖w − w_global‖²). Same bytes as FedAvg; the server sees every client's trained item table."

METHODS = [
    Method("fedprox", "silo", ("mf", "ncf"), "strategies.fedavg:FedAvg", "client_app.fedprox:FedProxClient",
           "FedAvg with a proximal term μ/2‖w − w_global‖² in the local loss", "Li et al. 2020, Eq. 2",
           check=check, keys=KEYS),
]
