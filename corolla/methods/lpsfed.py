"""LPSFed (ICLR'26, arXiv 2603.20338; docs/methods/lpsfed.md): LGCN subgraph
clients send their MLPs and spectral scalars (KL similarity ρ_c, margin M_c); the server mixes
the MLPs per client by closeness to a reference graph's kernel (Eq. 11-15)."""

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Method

KEYS = {
    "lgcn-layers": Key(2, "LGCN: low-pass convolution layers"),
    "lgcn-phi": Key(64, "LGCN: eigenvectors Φ of the client subgraph's normalised Laplacian (the cut-off)"),
    "lgcn-mlp": Key("paper", "LGCN pooling/predictive MLPs: the paper's two layers (192→128→64, 192→64→1) or the code's one ('code')", ("paper", "code")),
    "lpsfed-loss": Key("bc", "LPSFed: the bias-aware contrastive loss with popularity-bias encoders ('bc') or BPR ('bpr': LPSFed (BPR), the FedAvg baseline)", ("bc", "bpr")),
    "lpsfed-scorer": Key("paper", "LPSFed: R̂ from the predictive MLP in training and ranking ('paper') or arccos of the cosine of the pooled embeddings ('code')", ("paper", "code")),
    "lpsfed-tau1": Key(0.07, "LPSFed: temperature τ1 of the BC loss (Eq. 9)"),
    "lpsfed-tau2": Key(0.08, "LPSFed: temperature τ2 of the bias loss (Eq. 7)"),
    "lpsfed-gamma": Key(1.0, "LPSFed: γ of the margin min{γ ξ̂, π − R̂} (Eq. 8)"),
    "lpsfed-omega": Key(0.5, "LPSFed: ω of the refined margin ω M_c + (1 − ω) M_ui (Eq. 15)"),
    "lpsfed-bias-train": Key("freeze", "LPSFed: how the popularity-bias encoders train: 'freeze' — on L_bias alone for the first lpsfed-freeze-epochs, then frozen while the model trains on the BC loss (the BC-Loss schedule the paper describes); 'joint' — the authors' code: no warm-up, never frozen, trained by the BC loss through the margin ξ̂ (which drives the margins towards 0)", ("freeze", "joint")),
    "lpsfed-freeze-epochs": Key(10, "LPSFed: the first N local epochs of the run train only the bias encoders (L_bias); later ones the model with the encoders frozen (the paper's 'first two global epochs')"),
    "lpsfed-weight-decay": Key(0.02, "LPSFed / LGCN: RMSprop weight decay"),
    "lpsfed-personalize": Key(True, "LPSFed: personalised distribution θ_c ← ρ̄θ̄ + (1−ρ̄)θ_c (false: ρ̄ ≡ 1, the 'w/o per' ablation)"),
    "lpsfed-stats": Key(True, "LPSFed: clients send subgraph statistics once for the reference graph (false: fixed sizes, the 'w/o stats' ablation)"),
    "lpsfed-reference": Key("gnmk", "LPSFed reference graph: GNMK or Erdős–Rényi", ("gnmk", "er")),
    "lpsfed-gnmk-edges": Key("mean", "LPSFed GNMK edges: the clients' mean edge count ('mean') or a quarter of it (the code's k = E/16 with E/4 per client: 'code')", ("mean", "code")),
    "lpsfed-similarity": Key("distribution", "LPSFed ρ_c: KL between the normalised |K_R| and |K_c| over Φ components ('distribution') or the code's 1-bin histogram densities ('code-exact')", ("distribution", "code-exact")),
    "lpsfed-normalize": Key("minmax", "LPSFed ρ̄ (Eq. 12): 1 − (ρ−min)/(max−min) (README) or 1 − ρ/max (code)", ("minmax", "code")),
    "lpsfed-margin": Key("personalized", "LPSFed margin sent back: ρ̄M̄ + (1−ρ̄)M_c (paper Eq. 14–15) or M̄ (the code)", ("personalized", "global")),
}


def check(cfg):
    if cfg["partition"] != "spectral" or cfg["protocol"] != "full-rank":
        raise ConfigError("config key 'partition': model 'lgcn' needs partition='spectral' (subgraph clients) "
                          "and protocol='full-rank'")


PROTOCOL = "Once, each subgraph client sends 4 statistics (users, items, edges, mean degree) and receives the reference graph's 64 eigenvalues; every round it trains its LGCN and uploads only its pooling and predictive MLPs (45,377 floats), a spectral KL scalar ρ_c and a margin M_c; the server sends each client its personalised mix ρ̄_c θ̄ + (1 − ρ̄_c) θ_c. Embeddings, kernels and eigenvectors never leave the client."

METHODS = [
    Method("lpsfed", "silo", ("lgcn",), "strategies.lpsfed:LPSFed", "client_app.lpsfed:LPSFedClient",
           "LGCN subgraph clients; MLPs mixed per client by spectral similarity to a reference graph",
           "LPSFed Tables 1 and 4", check=check, keys=KEYS),
]
