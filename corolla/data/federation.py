"""Build a run's federation: dataset -> filter -> split -> partition, cached and deterministic.

Everything is a pure function of the data-relevant run-config keys (:data:`DATA_KEYS`) and the
seed, so every node computes the same federation independently (tested across processes).
The result is cached on the node under ``$COROLLA_CACHE/prepared/<key>.npz``, the key being the
data configuration and the source files' checksums (:func:`data_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corolla.config import float_list
from corolla.data import loaders, partition, splits
from corolla.data.sources import FILES, default_cache
from corolla.util import atomic_save_npz, load_npz, rng, stable_seed

PREP_VERSION = 5
DATA_KEYS = ("dataset", "rating-threshold", "min-user-interactions", "split", "split-ratios",
             "eval-negatives", "eval-neg-pool", "eval-neg-sampler", "ml100k-file", "partition", "num-clients",
             "protocol", "seed")


def _csr(user: np.ndarray, item: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((item, user))
    indptr = np.zeros(n_users + 1, np.int64)
    np.cumsum(np.bincount(user, minlength=n_users), out=indptr[1:])
    return indptr, item[order].astype(np.int64)


@dataclass
class Federation:
    """The prepared data of a run. Items of user ``u`` in split ``s``: ``rows(s, u)``."""

    n_users: int
    n_items: int
    indptr: dict[str, np.ndarray]
    indices: dict[str, np.ndarray]
    clients: list[np.ndarray]              # global user ids of each logical client
    neg_valid: np.ndarray | None = None    # (n_users, N) for protocol=loo
    neg_test: np.ndarray | None = None
    item_owner: np.ndarray | None = None   # spectral partition: owning client of each item
    stats: dict[str, Any] = field(default_factory=dict)
    user_ids: np.ndarray | None = None     # raw user id of each dense user index (profiles, prompts)
    client_group: np.ndarray | None = None  # one-user clients on a spectral partition: each one's subgraph
    _owned: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def owned_items(self, group: int) -> np.ndarray | None:
        """The item universe (bool mask over items) of subgraph ``group``, one shared read-only
        array per group (29,858 one-user clients of 4 subgraphs hold 4 masks, not 29,858);
        None without a spectral partition."""
        if self.item_owner is None:
            return None
        if group not in self._owned:
            m = self.item_owner == group
            m.flags.writeable = False
            self._owned[group] = m
        return self._owned[group]

    def group_of(self, cid: int) -> int:
        """The subgraph of logical client ``cid``: itself on the silo harness, its user's
        subgraph for one-user clients on a spectral partition (:func:`one_user_groups`)."""
        return cid if self.client_group is None else int(self.client_group[cid])

    def rows(self, split: str, u: int) -> np.ndarray:
        p = self.indptr[split]
        return self.indices[split][p[u]:p[u + 1]]

    def count(self, split: str, users: np.ndarray) -> int:
        p = self.indptr[split]
        return int((p[users + 1] - p[users]).sum())

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    # --- persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"meta": np.frombuffer(json.dumps({"n_users": self.n_users, "n_items": self.n_items,
                                                  "stats": self.stats}).encode(), np.uint8),
               "client_sizes": np.array([len(c) for c in self.clients], np.int64),
               "client_users": np.concatenate(self.clients) if self.clients else np.zeros(0, np.int64)}
        for s in ("train", "valid", "test"):
            out[f"indptr_{s}"] = self.indptr[s]
            out[f"indices_{s}"] = self.indices[s]
        for name in ("neg_valid", "neg_test", "item_owner", "user_ids"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        return out

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> "Federation":
        meta = json.loads(bytes(a["meta"]).decode())
        bounds = np.r_[0, np.cumsum(a["client_sizes"])]
        clients = [a["client_users"][bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
        return cls(meta["n_users"], meta["n_items"],
                   {s: a[f"indptr_{s}"] for s in ("train", "valid", "test")},
                   {s: a[f"indices_{s}"] for s in ("train", "valid", "test")},
                   clients, a.get("neg_valid"), a.get("neg_test"), a.get("item_owner"), meta["stats"],
                   a.get("user_ids"))


def source_checksums(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """The checksums of the files a run's federation is built from (every file is verified
    against them when it is read, so they identify the content)."""
    names = loaders.INTERACTION_FILES["fedcia-split" if cfg["split"] == "fedcia" else loaders.source_name(cfg)]
    return [(n, FILES[n].sha256 or FILES[n].git_blob or "") for n in names]


def data_key(cfg: dict[str, Any], content: bytes = b"") -> str:
    """Cache key of a federation: the data-relevant config keys, the source files' checksums and,
    for an edge node, the SHA-256 of its own file's ``content``."""
    sel: dict[str, Any] = {k: cfg[k] for k in DATA_KEYS}
    if cfg.get("max-users"):   # only when set, so that every other run keeps its cache key
        sel["max-users"] = cfg["max-users"]
    sel["files"] = source_checksums(cfg)
    if content:
        sel["edge"] = hashlib.sha256(content).hexdigest()
    return f"v{PREP_VERSION}-{stable_seed(json.dumps(sel, sort_keys=True)):016x}"


def cached(key: str, build: Callable[[], Federation], use_cache: bool = True) -> Federation:
    """``build()``'s federation through the node's disk cache ``$COROLLA_CACHE/prepared/<key>.npz``
    (a new ClientApp process loads it in milliseconds instead of parsing and splitting again)."""
    path = default_cache() / "prepared" / f"{key}.npz"
    if use_cache and path.is_file():
        try:
            return Federation.from_arrays(load_npz(path))
        except Exception:  # a corrupt cache entry is rebuilt, never trusted
            path.unlink(missing_ok=True)
    fed = build()
    if use_cache:
        try:
            atomic_save_npz(path, fed.to_arrays())
        except OSError:
            pass
    return fed


def build_federation(cfg: dict[str, Any], data_dir: str | None = None, use_cache: bool = True) -> Federation:
    """Return the federation of ``cfg``, from the cache when present (one-user clients on a
    spectral partition: :func:`one_user_groups` of the silo harness's federation)."""
    fed = cached(data_key(cfg), lambda: _build(cfg, data_dir), use_cache)
    if cfg.get("harness") == "one-user" and cfg["partition"] == "spectral":
        fed = one_user_groups(fed)
    return fed


def one_user_groups(fed: Federation) -> Federation:
    """The spectral federation with every user its own logical client (client id = user id),
    each in its subgraph (``client_group``): the same data as the silo harness's subgraph
    clients (cross-subgraph interactions dropped, each subgraph's item universe its own), so a
    per-user method is trained and ranked on the subgraphs that LPSFed's Table 1 reports."""
    group = np.full(fed.n_users, -1, np.int64)
    for g, users in enumerate(fed.clients):
        group[users] = g
    if (group < 0).any():
        raise ValueError(f"{int((group < 0).sum())} users are in no subgraph of the spectral partition")
    clients = [np.array([u], np.int64) for u in range(fed.n_users)]
    return Federation(fed.n_users, fed.n_items, fed.indptr, fed.indices, clients, fed.neg_valid, fed.neg_test,
                      fed.item_owner, {**fed.stats, "clients": fed.n_users, "subgraphs": len(fed.clients)},
                      fed.user_ids, group)


def _build(cfg: dict[str, Any], data_dir: str | None) -> Federation:
    seed = cfg["seed"]
    ds = cfg["dataset"]
    client_of_user = None
    if cfg["split"] == "fedcia":
        inter, labels, client_of_user = loaders.load_fedcia_split(data_dir)
    elif cfg["split"] == "given":
        inter, labels = loaders.load_lightgcn(ds, data_dir)
    else:
        inter = loaders.load(cfg, data_dir)
        labels = None
    if labels is None:
        inter = filter_and_check(inter, cfg)
        if cfg["split"] == "loo":
            labels = splits.split_loo(inter.user, inter.ts)
        else:
            r = float_list(cfg, "split-ratios")
            labels = splits.split_ratio(inter.user, (r[0], r[1], r[2]), rng(seed, ds, "split"))
    elif cfg["split"] == "given":
        r = float_list(cfg, "split-ratios")
        labels = splits.split_valid_from_train(inter.user, labels, r[1], rng(seed, ds, "valid"))
    n_users, n_items = inter.n_users, inter.n_items

    stats: dict[str, Any] = {"users": n_users, "items": n_items, "interactions": int(len(inter)),
                             "train": int((labels == 0).sum()), "valid": int((labels == 1).sum()),
                             "test": int((labels == 2).sum())}
    item_owner = None
    keep = np.ones(len(inter), bool)
    p = cfg["partition"]
    if p == "fedcia":
        clients = [np.flatnonzero(client_of_user == c).astype(np.int64) for c in range(client_of_user.max() + 1)]
    elif p == "user":
        clients = partition.partition_user(n_users)
    elif p == "blocks":
        clients = partition.partition_blocks(n_users, cfg["num-clients"])
    elif p == "random":
        clients = partition.partition_random(n_users, cfg["num-clients"], rng(seed, ds, "partition"))
    else:  # spectral, on the training graph
        tr = labels == 0
        ul, il, pstats = partition.partition_spectral(inter.user[tr], inter.item[tr], n_users, n_items,
                                                      cfg["num-clients"], stable_seed(seed, "spectral"))
        clients = [np.flatnonzero(ul == c).astype(np.int64) for c in range(cfg["num-clients"])]
        item_owner = il
        keep = ul[inter.user] == il[inter.item]
        pstats["interactions_dropped"] = int((~keep).sum())
        stats["spectral"] = pstats

    indptr, indices = {}, {}
    for code, s in ((0, "train"), (1, "valid"), (2, "test")):
        m = (labels == code) & keep
        indptr[s], indices[s] = _csr(inter.user[m], inter.item[m], n_users)

    neg_valid = neg_test = None
    if cfg["protocol"] == "loo":
        if cfg["eval-neg-sampler"] == "python-random":
            neg_valid, neg_test = splits.sample_eval_negatives_python(
                inter.user, inter.item, n_users, n_items, cfg["eval-negatives"],
                cfg["eval-neg-pool"] == "disjoint", seed)
        else:
            neg_valid, neg_test = splits.sample_eval_negatives(
                inter.user, inter.item, n_users, n_items, cfg["eval-negatives"],
                cfg["eval-neg-pool"] == "disjoint", rng(seed, ds, "eval-negatives"))
    stats["clients"] = len(clients)
    raw = np.asarray(inter.user_ids)
    return Federation(n_users, n_items, indptr, indices, clients, neg_valid, neg_test, item_owner, stats,
                      raw.astype(np.int64) if raw.dtype.kind in "iu" else None)


def filter_and_check(inter, cfg):
    out = splits.filter_interactions(inter, cfg["rating-threshold"], cfg["min-user-interactions"])
    out = splits.first_users(out, int(cfg.get("max-users", 0) or 0))
    if out.n_users == 0:
        raise ValueError(f"no user left after rating-threshold={cfg['rating-threshold']} and "
                         f"min-user-interactions={cfg['min-user-interactions']} on {cfg['dataset']}")
    return out


def edge_federation(path: str | os.PathLike, cfg: dict[str, Any], data_dir: str | None,
                    use_cache: bool = True) -> Federation:
    """A one-user federation from an edge node's own file, on the run dataset's item universe.

    The file is split like the run's data: leave-one-out by timestamp for protocol=loo, else a
    per-user ratio split with ``split-ratios`` (seeded by the file's content). Cached on the node
    under the run's data key and the file's SHA-256.
    """
    with open(path, "rb") as fh:
        content = fh.read()
    return cached(data_key(cfg, content or b"\0"), lambda: _edge(path, cfg, data_dir), use_cache)


def _edge(path: str | os.PathLike, cfg: dict[str, Any], data_dir: str | None) -> Federation:
    if cfg["split"] in ("fedcia", "given"):
        base_items = np.arange(1, 1683) if cfg["split"] == "fedcia" else np.arange(40981)
    else:
        base_items = loaders.LOADERS[cfg["dataset"]](data_dir).item_ids
    inter = loaders.load_edge_file(path, base_items)
    inter = splits.filter_interactions(inter, cfg["rating-threshold"], 0)
    if inter.n_users == 0:
        raise ValueError(f"{path}: no interaction left after rating-threshold={cfg['rating-threshold']}")
    # keep the run's item universe (filter_interactions re-indexes items)
    item = np.searchsorted(base_items, inter.item_ids)[inter.item]
    n_items = len(base_items)
    with open(path, "rb") as fh:
        content_seed = stable_seed(fh.read())
    if cfg["protocol"] == "loo":
        labels = splits.split_loo(inter.user, inter.ts)
    else:
        r = float_list(cfg, "split-ratios")
        labels = splits.split_ratio(inter.user, (r[0], r[1], r[2]), rng(cfg["seed"], content_seed))
    indptr, indices = {}, {}
    for code, s in ((0, "train"), (1, "valid"), (2, "test")):
        m = labels == code
        indptr[s], indices[s] = _csr(inter.user[m], item[m], 1)
    neg_valid = neg_test = None
    if cfg["protocol"] == "loo":
        neg_valid, neg_test = splits.sample_eval_negatives(
            inter.user, item, 1, n_items, cfg["eval-negatives"], cfg["eval-neg-pool"] == "disjoint",
            rng(cfg["seed"], content_seed, "eval-negatives"))
    return Federation(1, n_items, indptr, indices, [np.zeros(1, np.int64)], neg_valid, neg_test)
