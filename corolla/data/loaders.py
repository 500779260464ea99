"""Parsers: one function per dataset, each returning :class:`Interactions` in file order."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from corolla.data.sources import locate


@dataclass
class Interactions:
    """Interactions in file order with dense 0-based ids.

    ``user_ids``/``item_ids`` map a dense index back to the raw id of the file
    (``user_ids[u]`` is the raw id of user ``u``). Raw ids are ordered ascending.
    """

    user: np.ndarray       # int64 dense user index per interaction
    item: np.ndarray       # int64 dense item index per interaction
    rating: np.ndarray     # float32
    ts: np.ndarray         # int64 (0 when the file has no time)
    user_ids: np.ndarray   # raw ids, as strings or ints
    item_ids: np.ndarray

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def __len__(self) -> int:
        return len(self.user)


def _densify(raw_user, raw_item, rating, ts, item_universe=None) -> Interactions:
    user_ids, user = np.unique(raw_user, return_inverse=True)
    if item_universe is None:
        item_ids, item = np.unique(raw_item, return_inverse=True)
    else:
        item_ids = np.asarray(item_universe)
        item = np.searchsorted(item_ids, raw_item)
    return Interactions(user.astype(np.int64), item.astype(np.int64),
                        np.asarray(rating, np.float32), np.asarray(ts, np.int64), user_ids, item_ids)


def first_appearance_rank(ids: np.ndarray, n: int) -> np.ndarray:
    """rank[x] = position of id x among the distinct ids in order of first appearance (ids never
    seen get ranks after all seen ones, in id order): pandas' ``drop_duplicates`` re-indexing."""
    _, first = np.unique(ids, return_index=True)
    seen = np.unique(ids)
    order = np.r_[seen[np.argsort(first, kind="stable")], np.setdiff1d(np.arange(n), seen)]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    return rank


def _read_table(path, sep: str, skip: int = 0, encoding: str = "ascii") -> list[list[str]]:
    with open(path, encoding=encoding) as fh:
        lines = fh.read().splitlines()[skip:]
    rows = [ln.split(sep) for ln in lines if ln.strip()]
    return rows


def _num_rows(path, sep, skip=0, cols=4):
    rows = _read_table(path, sep, skip)
    bad = [i for i, r in enumerate(rows) if len(r) < cols]
    if bad:
        raise ValueError(f"{path}: line {bad[0] + 1 + skip}: expected {cols} fields separated by {sep!r}")
    return rows


def load_ml100k(data_dir=None) -> Interactions:
    a = np.loadtxt(locate("ml-100k/u.data", data_dir), dtype=np.int64)
    # u.data lists every one of the 1682 items of u.item; ids are 1..1682
    return _densify(a[:, 0], a[:, 1], a[:, 2], a[:, 3], item_universe=np.arange(1, 1683))


def load_ml100k_gpfedrec_csv(data_dir=None) -> Interactions:
    """ML-100K as the GPFedRec / PFedRec / UFGraphFR repositories ship it (``data/100k/ratings.dat``,
    ``uid,iid,rating,timestamp``, rows grouped by user in an order of their own): the same ratings
    as u.data, kept in this file's order, which decides leave-one-out's timestamp ties."""
    rows = _num_rows(locate("ml-100k-gpfedrec/ratings.dat", data_dir), ",", cols=4)
    a = np.array([[int(x) for x in r[:4]] for r in rows], dtype=np.int64)
    return _densify(a[:, 0], a[:, 1], a[:, 2], a[:, 3], item_universe=np.arange(1, 1683))


def load_ml1m(data_dir=None) -> Interactions:
    rows = _num_rows(locate("ml-1m/ratings.dat", data_dir), "::")
    a = np.array([[int(x) for x in r[:4]] for r in rows], dtype=np.int64)
    return _densify(a[:, 0], a[:, 1], a[:, 2], a[:, 3])


def load_lastfm(data_dir=None) -> Interactions:
    rows = _num_rows(locate("hetrec2011-lastfm-2k/user_artists.dat", data_dir), "\t", skip=1, cols=3)
    a = np.array([[int(x) for x in r[:3]] for r in rows], dtype=np.int64)
    # no timestamps: the play count is the rating (threshold with rating-threshold)
    return _densify(a[:, 0], a[:, 1], a[:, 2], np.zeros(len(a), np.int64))


def load_lastfm_tagged(data_dir=None) -> Interactions:
    """HetRec 2011 Last.fm ``user_taggedartists.dat`` as UFGraphFR (and PFedRec / GPFedRec) use
    Lastfm-2K: one interaction per tag assignment (``userID artistID tagID day month year``), a user
    who tagged an artist k times holding it k times, in file order. With users of at least 5 rows
    (``min-user-interactions = 5``, UFGraphFR §5.1.1) this is exactly UFGraphFR's Table 3: 185,650
    interactions, 1,600 users, 12,454 items. Time is the row's date (``yyyymmdd``): the authors ordered
    by the millisecond timestamps of ``user_taggedartists-timestamps.dat``, which is not in the offline
    data, so leave-one-out takes among a user's rows of the same (latest) date the first in the file."""
    rows = _num_rows(locate("hetrec2011-lastfm-2k/user_taggedartists.dat", data_dir), "\t", skip=1, cols=6)
    a = np.array([[int(x) for x in r[:6]] for r in rows], dtype=np.int64)
    date = a[:, 5] * 10000 + a[:, 4] * 100 + a[:, 3]
    return _densify(a[:, 0], a[:, 1], np.ones(len(a), np.float32), date)


def load_lastfm_tagged_users(data_dir=None, min_user: int = 5) -> UserAttributes:
    """UFGraphFR's Lastfm-2K user file (its ``data/lastfm-2k/user.dat``, ``uid,tag``), built from the
    interactions: for every user with at least ``min_user`` rows, ``tag`` = the user's total number of
    interactions ("the user id and the total number of user interaction items as user attributes",
    UFGraphFR §5.1.1), in raw-id order."""
    inter = load_lastfm_tagged(data_dir)
    counts = np.bincount(inter.user, minlength=inter.n_users)
    keep = counts >= min_user
    return UserAttributes(np.asarray(inter.user_ids)[keep].astype(np.int64), {"tag": counts[keep].astype(np.int64)})


def load_lastfm_tagged_user_file(data_dir=None) -> UserAttributes:
    """UFGraphFR's published Lastfm-2K user file (the authors' ``data/lastfm-2k/user.dat`` at
    853ca8a, 1,484 rows ``uid,tag``), rebuilt from ``user_taggedartists.dat``: the users with at
    least 3 distinct tagged artists, in raw-id order; ``uid`` is the 0-based row (``ids``), ``tag``
    the user's number of distinct tagged artists, ``raw`` the HetRec user id (not in the file).
    Equal row by row to the authors' file (docs/methods/ufgraphfr.md). The authors' code looks its
    rows up by the 0-based user id of the 1,600-user ratings (``uid == user_id``), so user k gets
    row k, whoever that is, and users from 1,484 on get none (:mod:`corolla.text`)."""
    inter = load_lastfm_tagged(data_dir)
    pairs = np.unique(inter.user * inter.n_items + inter.item)
    distinct = np.bincount(pairs // inter.n_items, minlength=inter.n_users)
    keep = distinct >= 3
    return UserAttributes(np.arange(int(keep.sum()), dtype=np.int64),
                          {"tag": distinct[keep].astype(np.int64), "raw": np.asarray(inter.user_ids)[keep].astype(np.int64)})


def load_filmtrust(data_dir=None) -> Interactions:
    """FilmTrust has no timestamps; as the FedCA code (utils.py ``loadData``), the order of an
    item's first appearance in the file stands in for time (leave-one-out then holds out each
    user's most recently appearing items)."""
    rows = _num_rows(locate("filmtrust/ratings.txt", data_dir), " ", cols=3)
    a = np.array([[float(x) for x in r[:3]] for r in rows])
    items = a[:, 1].astype(np.int64)
    return _densify(a[:, 0].astype(np.int64), items, a[:, 2], first_appearance_rank(items, items.max() + 1)[items])


def load_amazon_video(data_dir=None) -> Interactions:
    rows = _num_rows(locate("amazon-video-pfedrec/ratings.dat", data_dir), ",", cols=4)
    u = np.array([r[0] for r in rows])
    i = np.array([r[1] for r in rows])
    return _densify(u, i, [float(r[2]) for r in rows], [int(r[3]) for r in rows])


# LightGCN's splits (kuandeng/LightGCN b067ec05, Data/<name>/{train,test}.txt): one line per user,
# ``user item item ...`` in 0-based remapped ids; the item count is that of the split's item_list.txt
LIGHTGCN_ITEMS = {"gowalla": 40981, "yelp2018": 38048, "amazon-book": 91599}


def load_lightgcn(name: str, data_dir=None) -> tuple[Interactions, np.ndarray]:
    """One of LightGCN's splits (:data:`LIGHTGCN_ITEMS`); the interactions and a 0/2 train/test label each."""
    if name not in LIGHTGCN_ITEMS:
        raise ValueError(f"dataset {name!r} is not one of LightGCN's splits; expected one of {sorted(LIGHTGCN_ITEMS)}")
    us, its, lab = [], [], []
    for split, code in (("train", 0), ("test", 2)):
        with open(locate(f"lightgcn/{name}/{split}.txt", data_dir)) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 2:
                    continue
                u = int(parts[0])
                items = [int(x) for x in parts[1:]]
                us.extend([u] * len(items))
                its.extend(items)
                lab.extend([code] * len(items))
    n = len(us)
    inter = _densify(np.array(us), np.array(its), np.ones(n), np.zeros(n, np.int64),
                     item_universe=np.arange(LIGHTGCN_ITEMS[name]))
    return inter, np.array(lab, np.int8)


def load_gowalla(data_dir=None) -> tuple[Interactions, np.ndarray]:
    """LightGCN's Gowalla split; returns the interactions and a 0/2 train/test label each."""
    return load_lightgcn("gowalla", data_dir)


def load_fedcia_split(data_dir=None) -> tuple[Interactions, np.ndarray, np.ndarray]:
    """FedCIA's published ML-100K split: interactions, split label (0/1/2), client of each user."""
    rows = _num_rows(locate("fedcia-ml100k-split/ml100k_100clients.tsv", data_dir), "\t", skip=1, cols=4)
    code = {"train": 0, "valid": 1, "test": 2}
    client = np.array([int(r[0]) for r in rows], np.int64)
    u = np.array([int(r[1]) for r in rows], np.int64)
    i = np.array([int(r[2]) for r in rows], np.int64)
    lab = np.array([code[r[3]] for r in rows], np.int8)
    n = len(u)
    inter = Interactions(u, i, np.ones(n, np.float32), np.zeros(n, np.int64),
                         np.arange(1, 944), np.arange(1, 1683))
    client_of_user = np.full(943, -1, np.int64)
    client_of_user[u] = client
    return inter, lab, client_of_user


LOADERS = {
    "ml-100k": load_ml100k,
    "ml-100k-gpfedrec": load_ml100k_gpfedrec_csv,
    "ml-1m": load_ml1m,
    "lastfm-2k": load_lastfm,
    "lastfm-2k-tagged": load_lastfm_tagged,
    "filmtrust": load_filmtrust,
    "amazon-video": load_amazon_video,
    # LightGCN's train and test pooled, all timestamps 0: leave-one-out then takes a user's first
    # listed items as "latest" (file order); for scale runs, not a published protocol
    "gowalla": lambda data_dir=None: load_gowalla(data_dir)[0],
    "yelp2018": lambda data_dir=None: load_lightgcn("yelp2018", data_dir)[0],
    "amazon-book": lambda data_dir=None: load_lightgcn("amazon-book", data_dir)[0],
}


def source_name(cfg) -> str:
    """The key of :data:`LOADERS` / :data:`INTERACTION_FILES` for the run's dataset and file options."""
    if cfg["dataset"] == "ml-100k" and cfg.get("ml100k-file", "u.data") == "gpfedrec-csv":
        return "ml-100k-gpfedrec"
    return cfg["dataset"]


def load(cfg, data_dir=None) -> Interactions:
    """The run's interactions in file order (``dataset`` and ``ml100k-file``)."""
    return LOADERS[source_name(cfg)](data_dir)


# the files each dataset's interactions come from (keys of ``corolla.data.sources.FILES``)
INTERACTION_FILES = {
    "ml-100k": ("ml-100k/u.data",),
    "ml-100k-gpfedrec": ("ml-100k-gpfedrec/ratings.dat",),
    "ml-1m": ("ml-1m/ratings.dat",),
    "lastfm-2k": ("hetrec2011-lastfm-2k/user_artists.dat",),
    "lastfm-2k-tagged": ("hetrec2011-lastfm-2k/user_taggedartists.dat",),
    "filmtrust": ("filmtrust/ratings.txt",),
    "amazon-video": ("amazon-video-pfedrec/ratings.dat",),
    "gowalla": ("lightgcn/gowalla/train.txt", "lightgcn/gowalla/test.txt"),
    "yelp2018": ("lightgcn/yelp2018/train.txt", "lightgcn/yelp2018/test.txt"),
    "amazon-book": ("lightgcn/amazon-book/train.txt", "lightgcn/amazon-book/test.txt"),
    "fedcia-split": ("fedcia-ml100k-split/ml100k_100clients.tsv",),
}


def load_edge_file(path: str | os.PathLike, item_ids: np.ndarray) -> Interactions:
    """An edge node's own interactions: ``item,rating[,timestamp]`` per line (CSV, '#' comments).

    Item ids are the dataset's raw item ids (e.g. MovieLens movie ids); an unknown id is an
    error naming the file and line.
    """
    items, ratings, ts = [], [], []
    lookup = {str(x): k for k, x in enumerate(item_ids.tolist())}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            f = [x.strip() for x in line.split(",")]
            if len(f) < 2:
                raise ValueError(f"{path}:{n}: expected 'item,rating[,timestamp]', got {line!r}")
            if f[0] not in lookup:
                raise ValueError(f"{path}:{n}: item id {f[0]!r} is not an item of the run's dataset")
            try:
                r = float(f[1])
                t = int(f[2]) if len(f) > 2 and f[2] else 0
            except ValueError:
                raise ValueError(f"{path}:{n}: rating must be a number and timestamp an integer, got {line!r}") from None
            items.append(lookup[f[0]])
            ratings.append(r)
            ts.append(t)
    if not items:
        raise ValueError(f"{path}: no interactions")
    n = len(items)
    return Interactions(np.zeros(n, np.int64), np.array(items, np.int64), np.array(ratings, np.float32),
                        np.array(ts, np.int64), np.array(["edge"]), item_ids)


@dataclass
class UserAttributes:
    """Side information of users: raw id and named columns (strings), in file order."""

    ids: np.ndarray
    columns: dict[str, np.ndarray]


@dataclass
class ItemAttributes:
    ids: np.ndarray
    title: np.ndarray
    genres: np.ndarray  # (n_items, n_genres) 0/1 for ML-100K; list strings for ML-1M


def load_ml100k_users(data_dir=None) -> UserAttributes:
    """``u.user``: ``id|age|gender|occupation|zip``."""
    rows = _num_rows(locate("ml-100k/u.user", data_dir), "|", cols=5)
    cols = list(zip(*rows))
    return UserAttributes(np.array([int(x) for x in cols[0]]),
                          {"age": np.array([int(x) for x in cols[1]]), "gender": np.array(cols[2]),
                           "occupation": np.array(cols[3]), "zip": np.array(cols[4])})


def load_ml100k_items(data_dir=None) -> ItemAttributes:
    """``u.item`` (latin-1): id|title|release|video release|IMDb URL|19 genre flags."""
    rows = _read_table(locate("ml-100k/u.item", data_dir), "|", encoding="latin-1")
    bad = [i for i, r in enumerate(rows) if len(r) != 24]
    if bad:
        raise ValueError(f"ml-100k/u.item: line {bad[0] + 1}: expected 24 '|'-separated fields")
    return ItemAttributes(np.array([int(r[0]) for r in rows]), np.array([r[1] for r in rows]),
                          np.array([[int(x) for x in r[5:]] for r in rows], np.int8))


def load_ml1m_users(data_dir=None) -> UserAttributes:
    """``users.dat``: ``UserID::Gender::Age::Occupation::Zip-code`` (age and occupation are codes)."""
    rows = _num_rows(locate("ml-1m/users.dat", data_dir), "::", cols=5)
    cols = list(zip(*rows))
    return UserAttributes(np.array([int(x) for x in cols[0]]),
                          {"gender": np.array(cols[1]), "age": np.array([int(x) for x in cols[2]]),
                           "occupation": np.array([int(x) for x in cols[3]]), "zip": np.array(cols[4])})
