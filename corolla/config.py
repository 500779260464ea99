"""Run configuration: the key schema, presets and their resolution.

A run's configuration is resolved as ``schema defaults < preset < --set overrides``.
Keys are kebab-case like Flower run-config keys; values are TOML scalars (lists are written
as comma-separated strings, e.g. ``topk = "5,10,20"``) because Flower run-config values must
be scalars. An unknown key is an error that lists the valid ones.

Presets live in ``corolla/presets/<name>.toml``: package data, read through
:mod:`importlib.resources`, so an installed wheel has them as a checkout does, and the Flower App
Bundle ships them (``fab-include`` in ``pyproject.toml``)::

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
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from corolla.keys import ConfigError, Key

# the presets are package data: a folder in a checkout, in site-packages after `pip install .`
PRESET_DIR: Traversable = resources.files("corolla") / "presets"


# fmt: off
CORE: dict[str, Key] = {
    # --- what runs
    "method": Key("fedavg", "federated method (the method table, corolla/methods/: 'corolla methods' lists them)"),
    "harness": Key("silo", "client training harness: 'silo' (a logical client holds one or more users and one model; FedCIA/FedMF), 'one-user' (FedCA/PFedRec/UFGraphFR/GPFedRec: one user per client, its own full item table, evaluated with its own post-training parameters; hosted users train batched) or 'expanded' (Dist-FedAvg and its baselines: one user per client with a LightGCN over its expanded local graph, pulling and pushing rows of global user and item tables)", ("silo", "one-user", "expanded")),
    "model": Key("mf", "model of every logical client ('pfedrec': item table + a personal Linear(d,1) score function, ReLU layers before it with pfedrec-score-layers, no user embedding; 'ufgraphfr' / 'gpfedrec': those papers' client networks, corolla/models/ufgraphfr.py; 'sgl': LightGCN with SGL's graph views and InfoNCE, corolla/models/sgl.py; 'metamf': MetaMF's server-side meta network, corolla/models/metamf.py; 'pergnn': FedPerGNN's GAT over matched neighbours, corolla/models/pergnn.py)", ("mf", "ncf", "lightgcn", "gfcf", "pfedrec", "ufgraphfr", "gpfedrec", "lgcn", "sgl", "metamf", "pergnn")),
    "client-models": Key("", "heterogeneous clients: '|'-separated 'model:dim' (e.g. 'mf:512|mf:256|mf:128'); logical clients are split into that many contiguous groups (FedCIA Fig. 5); empty = all use model/dim"),
    "num-rounds": Key(20, "number of federated rounds"),
    "seed": Key(42, "seed of every random choice (data, init, sampling)"),
    "fraction-train": Key(1.0, "fraction of logical clients sampled for training each round"),
    "clients-per-round": Key(0, "logical clients sampled for training each round (0: use fraction-train)"),
    "clients-per-message": Key(0, "at most this many logical clients in one message to a node (0 = all it hosts); bounds message size and server memory"),
    "phase-timeout": Key(300.0, "seconds to wait for the replies of one phase; missing replies are dropped"),
    "handshake-timeout": Key(600.0, "seconds to wait for a node's handshake reply, its first contact with the run (its ClientApp starting, loading and partitioning the data; also a node that joins later); the wait is the larger of this and phase-timeout, so a short phase-timeout that notices a lost node quickly does not also bound a node's start on a loaded machine; a node that has not answered by then is left out of the run"),
    # --- data
    "dataset": Key("ml-100k", "dataset name", ("ml-100k", "ml-1m", "lastfm-2k", "lastfm-2k-tagged", "filmtrust", "gowalla", "yelp2018", "amazon-book", "amazon-video")),
    "rating-threshold": Key(0.0, "keep interactions with rating >= threshold (0 keeps all)"),
    "min-user-interactions": Key(0, "drop users with fewer interactions (after the threshold)"),
    "max-users": Key(0, "keep only the first N users after the filters (raw-id order; their items re-indexed), 0 = all: scale measurements on a growing part of one dataset"),
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
    "compat-sigmoid-ranking": Key(False, "protocol=full-rank: rank sigmoid(score) computed in float32, as FedCIA's code (its models' getUsersRating) does: scores above about 16.6 round to 1.0 and tie (ties to the smaller item id), where ranking the scores themselves has no ties; every reported metric, validation and test, is then of that ranking"),
    "compat-ties-against-positive": Key(False, "also report loo metrics with ties ranked against the positive (FedCA/UFGraphFR code)"),
    "compat-select-on-test": Key(False, "also report the paper's test-selected round (best test metric, '>=')"),
    "test-mask-valid": Key(True, "protocol=full-rank: at test, mask each user's validation items as well as its train items (false: only its train items, so validation items stay in the test ranking as non-relevant items, as codes that rank the test against everything not trained on do)"),
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
    "mlp-reg": Key("none", "L2 on the NCF tower in the loss: 'none', or 'sum-squares' = weight-decay times the sum of the squares of the tower's weights and biases, not divided by the batch (FedCIA's model/MLP.py loss)", ("none", "sum-squares")),
    "ncf-arch": Key("mlp", "NCF network: 'mlp' = the tower over concat(p_u, q_i) (FedCA's NCF, FedCIA's model/MLP.py); 'neumf' = GMF and MLP side by side (FedCIA's model/NCF.py, He et al.'s NeuMF): user and item tables 2*dim wide, the first halves multiplied element-wise, the second halves through the tower (mlp-layers, no output layer), Linear(dim + last width, 1) over both; silo harness only", ("mlp", "neumf")),
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
    "compat-client-aggregation": Key("none", "also report the paper's client aggregation as metrics_paper_compat: "
                                     "'client-best-mean' = per client the best test value over the evaluated "
                                     "rounds, then the unweighted mean over clients (the LPSFed code's 'Final "
                                     "Results'; needs report-per-client)", ("none", "client-best-mean")),
    "report-per-client": Key(False, "also report each logical client's metrics and their unweighted mean (silo methods: LPSFed)"),
    # --- secure aggregation (corolla/secagg/; methods with a secure_phase in corolla/methods/)
    "secagg": Key("none", "secure aggregation of the summed upload: 'secaggplus' = SecAgg+ over the nodes (the server "
                  "learns only the sum of the nodes' vectors; each node sums its own logical clients first)",
                  ("none", "secaggplus")),
    "secagg-threshold": Key(0, "SecAgg+: shares needed to unmask (0 = the smallest majority of each node's neighbourhood)"),
    "secagg-neighbours": Key(0, "SecAgg+: neighbours per node in the masking graph (0 = every other node: plain SecAgg)"),
    "secagg-clip": Key(4.0, "SecAgg+: a node's vector (its clients' weighted sum over the round's total weight) must lie "
                       "in [-clip, clip]"),
    "secagg-bits": Key(24, "SecAgg+: quantisation levels 2^bits over [-clip, clip] (nodes x 2^bits < 2^32)"),
    # --- outputs
    "export-topk": Key(0, "write OUT/topk.jsonl with the top-K items of every user (0 = off)"),
}
# fmt: on


def _schema() -> dict[str, Key]:
    """The core keys and every key a method or harness declares (``corolla.methods``)."""
    from corolla import methods

    out = dict(CORE)
    for k, (owner, spec) in methods.method_keys().items():
        if k in out:
            raise RuntimeError(f"config key '{k}' of {owner} is also a core key")
        out[k] = spec
    names = tuple(methods.names())
    out["method"] = Key(CORE["method"].default, CORE["method"].help, names)
    return out


SCHEMA: dict[str, Key] = _schema()



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


def preset_path(name: str) -> Traversable:
    return PRESET_DIR / f"{name}.toml"


def preset_names() -> list[str]:
    """The shipped presets, sorted (the ``.toml`` files of the package's ``presets`` folder)."""
    return sorted(p.name[:-len(".toml")] for p in PRESET_DIR.iterdir() if p.name.endswith(".toml") and p.is_file())


def list_presets() -> list[Preset]:
    return [load_preset(n) for n in preset_names()]


def load_preset(name: str) -> Preset:
    path = preset_path(name)
    if not path.is_file():
        raise ConfigError(f"unknown preset '{name}' (no {path}). Presets: {', '.join(preset_names())}")
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
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
        layers.append((f"config file {config_file}", load_config_file(config_file)))
    if overrides:
        layers.append(("overrides", overrides))
    given: dict[str, str] = {}
    for where, layer in layers:
        for k, v in layer.items():
            if k not in SCHEMA:
                raise unknown_key_error(k, where)
            cfg[k] = _coerce(k, v)
            given[k] = where
    validate(cfg)
    return run_schema(cfg, given)


def run_schema(cfg: dict[str, Any], given: dict[str, str] | None = None) -> dict[str, Any]:
    """``cfg`` reduced to the run's schema: the core keys and the keys its method owns (its
    harness's, its own and those of the modules its declaration names). A key of another method
    set by a config file or an override is an error naming its owner; one a preset sets is dropped
    (``--preset fedca-pmf-ml100k --set method=fedavg``: FedCA's data and training with FedAvg's
    aggregation, without FedCA's own keys)."""
    from corolla import methods

    m = methods.lookup(cfg)
    keep = set(CORE) | set(methods.owner_keys(m))
    owners = methods.method_keys()
    for k, where in sorted((given or {}).items()):
        if k not in keep and not where.startswith("preset "):
            raise ConfigError(f"config key '{k}' (in {where}) belongs to {owners[k][0]}, not to this run's method "
                              f"{m.label}: its keys are 'corolla keys --method {m.name}'")
    return {k: v for k, v in cfg.items() if k in keep}


def load_config_file(path: str) -> dict[str, Any]:
    """A ``--config`` TOML file of config keys; a missing or unreadable file or invalid TOML is a
    :class:`ConfigError` naming the file and the reason."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file (expected a TOML file of config keys, "
                          f"e.g. 'num-rounds = 5')") from None
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config {path}: not valid TOML ({e})") from None
    if "config" in doc and isinstance(doc["config"], dict) and set(doc) <= {"preset", "config", "paper"}:
        return doc["config"]   # a preset file works as a config file too
    return doc


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
    if cfg["compat-client-aggregation"] != "none" and not cfg["report-per-client"]:
        raise ConfigError(f"config key 'compat-client-aggregation'={cfg['compat-client-aggregation']!r} needs the "
                          "per-client metrics: set report-per-client=true")
    ks = int_list(cfg, "topk")
    if any(k < 1 for k in ks):
        raise ConfigError(f"config key 'topk': expected positive integers, got {cfg['topk']!r}")
    if cfg["max-users"] < 0:
        raise ConfigError(f"config key 'max-users': expected 0 (all users) or a positive count, got {cfg['max-users']}")
    if cfg["max-users"] and cfg["split"] in ("given", "fedcia"):
        raise ConfigError(f"config key 'max-users': applies to split='loo' or 'ratio' (a fixed split keeps its own "
                          f"users), got split={cfg['split']!r}")
    r = float_list(cfg, "split-ratios")
    if len(r) != 3 or any(x < 0 for x in r) or abs(sum(r) - 1.0) > 1e-6:
        raise ConfigError(f"config key 'split-ratios': expected three non-negative fractions summing to 1, got {cfg['split-ratios']!r}")
    if not cfg["test-mask-valid"] and cfg["protocol"] != "full-rank":
        raise ConfigError(f"config key 'test-mask-valid': applies to protocol='full-rank' (leave-one-out ranks the "
                          f"held-out item against its sampled negatives only), got protocol={cfg['protocol']!r}")
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
    from corolla.data.loaders import LIGHTGCN_ITEMS   # LightGCN's splits: their own train/test files

    lightgcn = tuple(LIGHTGCN_ITEMS)
    if cfg["split"] == "given" and cfg["dataset"] not in lightgcn:
        raise ConfigError(f"config key 'split': 'given' uses a dataset's own train/test files; only dataset="
                          f"{', '.join(lightgcn)} have them, got dataset={cfg['dataset']!r}")
    if cfg["dataset"] in lightgcn and cfg["split"] not in ("given", "loo"):
        raise ConfigError(f"dataset {cfg['dataset']!r} is a LightGCN split; it needs split=given (its train/test files) or "
                          "split=loo (both pooled, leave-one-out by file order: it has no timestamps; scale runs)")
    from corolla import methods

    method = methods.check(cfg)   # the method table: harness, model, the method's and its harness's checks
    if cfg["secagg"] != "none":
        if not method.secure_sum:
            raise ConfigError(f"config key 'secagg': method {method.label} does not aggregate a sum; secure "
                              f"aggregation supports {', '.join(methods.secure_sum_methods())}")
        if not 1 <= cfg["secagg-bits"] <= 24 or cfg["secagg-clip"] <= 0 or cfg["secagg-threshold"] < 0 \
                or cfg["secagg-neighbours"] < 0:
            raise ConfigError("config keys 'secagg-*': expected bits in 1..24, clip > 0, threshold >= 0, "
                              "neighbours >= 0")
    if cfg["client-models"]:
        if not method.heterogeneous:
            raise ConfigError("config key 'client-models': heterogeneous models need a method that does not "
                              "average parameters (fedcia or local)")
        for part in cfg["client-models"].split("|"):
            name, _, dim = part.partition(":")
            if name not in ("mf", "ncf", "lightgcn") or not dim.isdigit():
                raise ConfigError(f"config key 'client-models': expected 'model:dim' entries with model in "
                                  f"mf/ncf/lightgcn, got {part!r}")
    if cfg["mlp-reg"] != "none":
        ncf = cfg["model"] == "ncf" or any(p.startswith("ncf:") for p in cfg["client-models"].split("|"))
        if not ncf or cfg["harness"] != "silo":
            raise ConfigError(f"config key 'mlp-reg': {cfg['mlp-reg']!r} regularises the NCF tower of the 'silo' "
                              f"harness's clients (FedCIA's MLP); got model={cfg['model']!r}, harness={cfg['harness']!r}")
    if cfg["ncf-arch"] != "mlp" and (cfg["model"] != "ncf" or cfg["harness"] != "silo" or cfg["client-models"]):
        raise ConfigError(f"config key 'ncf-arch': {cfg['ncf-arch']!r} builds the 'silo' harness's NCF (FedCIA's "
                          f"model/NCF.py; a one-user client's user vector is dim wide); got model={cfg['model']!r}, "
                          f"harness={cfg['harness']!r}, client-models={cfg['client-models']!r}")
    if cfg["model"] == "ncf" and not cfg["client-models"]:
        layers = int_list(cfg, "mlp-layers")
        if layers[0] != 2 * cfg["dim"]:
            raise ConfigError(f"config key 'mlp-layers': the first width must be 2*dim={2 * cfg['dim']}, got {layers[0]}")
    for key in ("dim", "local-epochs", "batch-size", "num-negatives", "eval-every"):
        if cfg[key] < 1:
            raise ConfigError(f"config key '{key}': expected >= 1, got {cfg[key]}")
    if cfg["eval-negatives"] < 1:
        raise ConfigError(f"config key 'eval-negatives': expected >= 1, got {cfg['eval-negatives']}")
