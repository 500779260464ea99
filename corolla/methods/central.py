"""Centralised references (UFGraphFR paper Table 4's "CenRec" rows MF, NCF and SGL;
docs/methods/central.md): one logical client holding every user, the same models and the same
evaluation as the federated rows, no federation. Nothing is aggregated and nothing is uploaded
(``strategies.fedavg:Local``); one optimiser across epochs (``optimizer-state = persist``), a
round is an epoch.

* MF and NCF: the silo harness's shared models (``corolla.models``; NCF's MLP tower as
  hexiangnan/neural_collaborative_filtering ``MLP.py``), BCE on the harness's rows;
* SGL: ``corolla.models.sgl`` (LightGCN + two graph views per epoch + InfoNCE; wujcan/SGL-Torch
  c5632881), BPR on SGL's user-uniform triples re-drawn each epoch (its ``PairwiseSamplerV2``).
"""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "sgl-aug-type": Key("ed", "SGL (model = sgl): view augmentation, edge dropout 'ed', node dropout 'nd' or random walk 'rw' (another edge mask per layer) (SGL.ini aug_type)", ("ed", "nd", "rw")),
    "sgl-ssl-ratio": Key(0.1, "SGL: fraction ρ of the edges (ed, rw) or nodes (nd) each view drops (SGL.ini ssl_ratio)"),
    "sgl-ssl-temp": Key(0.2, "SGL: InfoNCE temperature τ (SGL.ini ssl_temp)"),
    "sgl-ssl-reg": Key(0.1, "SGL: weight λ1 of the InfoNCE term (SGL.ini ssl_reg; 0 = LightGCN with SGL's sums)"),
    "sgl-sampler": Key("user-uniform", "SGL: BPR triples of an epoch: as many as training interactions, user uniform, then a positive and a negative uniform ('user-uniform', SGL's PairwiseSamplerV2, re-drawn each epoch) or the core train-samples ('core')", ("user-uniform", "core")),
    "sgl-init": Key("xavier-uniform", "SGL: embedding init, Xavier-uniform ('xavier-uniform', SGL.ini param_init) or N(0, init-std²) ('normal')", ("xavier-uniform", "normal")),
}


def check(cfg):
    if cfg["partition"] not in ("blocks", "random") or cfg["num-clients"] != 1:
        raise ConfigError("config key 'num-clients': method 'central' is one logical client holding every user: "
                          f"partition='blocks' (or 'random') with num-clients=1, got partition={cfg['partition']!r}, "
                          f"num-clients={cfg['num-clients']}")
    if cfg["optimizer-state"] != "persist":
        raise ConfigError("config key 'optimizer-state': centralised training keeps one optimiser across epochs "
                          "(persist)")
    if cfg["model"] == "sgl":
        if cfg["loss"] != "bpr":
            raise ConfigError(f"config key 'loss': SGL is trained with 'bpr', got {cfg['loss']!r}")
        if not 0.0 <= cfg["sgl-ssl-ratio"] < 1.0 or cfg["sgl-ssl-temp"] <= 0 or cfg["sgl-ssl-reg"] < 0:
            raise ConfigError("config keys 'sgl-*': expected 0 <= sgl-ssl-ratio < 1, sgl-ssl-temp > 0, sgl-ssl-reg >= 0")


PROTOCOL = ("A centralised reference, not a federated method: one logical client holds every user's training data "
            "and trains the model (MF, NCF or SGL) alone; nothing is aggregated and no parameter is uploaded or "
            "downloaded (0 bytes). Only per-user metric values travel to the server, which therefore sees no "
            "model and no interaction, but the one client sees every user's data, which is what federation avoids.")

METHODS = [
    Method("central", "silo", ("mf", "ncf", "sgl"), "strategies.fedavg:Local", "client_app.central:CentralClient",
           "one client holding every user: the papers' centralised references", "UFGraphFR Table 4 CenRec rows",
           check=check, keys=KEYS),
]
