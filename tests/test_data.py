"""Datasets, filters, splits, partitions: hand examples, the real files, determinism."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corolla.config import ConfigError, resolve
from corolla.data import DatasetFileError, build_federation, locate
from corolla.data import partition as P
from corolla.data import splits as S
from corolla.data.loaders import Interactions, first_appearance_rank

ROOT = Path(__file__).resolve().parents[1]


def test_loo_ties_by_file_order():
    user = np.array([0, 0, 0, 0, 1, 1, 1])
    ts = np.array([5, 9, 9, 1, 3, 3, 3])
    lab = S.split_loo(user, ts)
    # user 0: rows 1 and 2 tie at ts 9; the first in the file (row 1) is the latest -> test
    assert lab[:4].tolist() == [0, 2, 1, 0]
    assert lab[4:].tolist() == [2, 1, 0]


def test_ratio_split_counts():
    user = np.repeat(np.arange(3), [10, 2, 1])
    lab = S.split_ratio(user, (0.7, 0.1, 0.2), np.random.default_rng(0))
    assert np.bincount(lab[:10], minlength=3).tolist() == [7, 1, 2]
    assert np.bincount(lab[10:12], minlength=3).tolist() == [1, 0, 1]  # test then 1 left: no valid
    assert lab[12] == 0


def test_filter_threshold_and_min_user():
    it = Interactions(np.array([0, 0, 0, 1, 1, 2]), np.array([0, 1, 2, 0, 3, 3]),
                      np.array([5, 1, 4, 5, 5, 2], np.float32), np.zeros(6, np.int64),
                      np.array([10, 20, 30]), np.array([1, 2, 3, 4]))
    out = S.filter_interactions(it, threshold=3, min_user=2)
    assert out.user_ids.tolist() == [10, 20] and out.item_ids.tolist() == [1, 3, 4]
    assert len(out) == 4


def test_eval_negatives_never_interacted_and_disjoint():
    user = np.array([0, 0, 1])
    item = np.array([0, 1, 2])
    nv, nt = S.sample_eval_negatives(user, item, 2, 10, 3, True, np.random.default_rng(1))
    for u, seen in ((0, {0, 1}), (1, {2})):
        assert not (set(nv[u]) | set(nt[u])) & seen
        assert not set(nv[u]) & set(nt[u])


def _authors_negatives(rows, n_neg, seed):
    """The PFedRec/GPFedRec/UFGraphFR data.py draw, written out plainly: re-index raw users and
    items by first appearance, random.seed(seed), then per user (in that order)
    random.sample(sorted(item_pool - interacted), 2 * n_neg); returns raw ids per raw user."""
    import random

    uidx, iidx = {}, {}
    for u, i in rows:
        uidx.setdefault(u, len(uidx))
        iidx.setdefault(i, len(iidx))
    raw_item = {v: k for k, v in iidx.items()}
    inter = {}
    for u, i in rows:
        inter.setdefault(uidx[u], set()).add(iidx[i])
    random.seed(seed)
    pool = set(iidx.values())
    out = {}
    for u_raw, u in sorted(uidx.items(), key=lambda kv: kv[1]):
        out[u_raw] = [raw_item[i] for i in random.sample(sorted(pool - inter[u]), 2 * n_neg)]
    return out


def test_python_random_negatives_equal_the_authors_procedure():
    g = np.random.default_rng(5)
    # raw ids deliberately out of order: users 7, 3, 9; items appear in a shuffled order
    users = np.array([7] * 6 + [3] * 5 + [9] * 7)
    items = g.permutation(np.r_[np.arange(40, 58)])[:18] % 23 + 100
    rows = list(zip(users.tolist(), items.tolist()))
    uids, u = np.unique(users, return_inverse=True)
    iids, i = np.unique(items, return_inverse=True)
    nv, nt = S.sample_eval_negatives_python(u, i, len(uids), len(iids), 2, True, seed=0)
    ref = _authors_negatives(rows, 2, seed=0)
    for k, raw_u in enumerate(uids.tolist()):
        assert iids[np.r_[nv[k], nt[k]]].tolist() == ref[raw_u]
    # first appearance, by hand: ids [5, 2, 5, 0] over n = 6 -> order 5, 2, 0, then unseen 1, 3, 4
    assert first_appearance_rank(np.array([5, 2, 5, 0]), 6).tolist() == [2, 3, 1, 4, 5, 0]


def test_gpfedrec_csv_option_needs_its_file_and_keys_the_cache(tmp_path, monkeypatch):
    from corolla.data.federation import data_key

    monkeypatch.setenv("COROLLA_OFFLINE", "1")
    monkeypatch.setenv("COROLLA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("COROLLA_DATA", raising=False)
    cfg = resolve(None, {"ml100k-file": "gpfedrec-csv"})
    with pytest.raises(DatasetFileError) as e:
        build_federation(cfg, tmp_path, use_cache=False)
    assert "ml-100k-gpfedrec/ratings.dat" in str(e.value) and "Zhangcx19/GPFedRec" in str(e.value)
    with pytest.raises(ConfigError, match="ml100k-file"):
        resolve(None, {"ml100k-file": "gpfedrec-csv", "dataset": "filmtrust"})
    base = resolve(None, {})
    assert len({data_key(base), data_key(cfg), data_key(resolve(None, {"eval-neg-sampler": "python-random"}))}) == 3


def test_blocks_partition_fedcia_sizes():
    parts = P.partition_blocks(943, 100)
    assert [len(p) for p in parts[:99]] == [9] * 99 and len(parts[99]) == 52
    assert np.concatenate(parts).tolist() == list(range(943))


def test_spectral_recovers_two_components_and_drops_cross_edges():
    # two dense blocks of users/items joined by one cross edge
    edges = [(u, i) for u in range(0, 5) for i in range(0, 4)] + [(u, i) for u in range(5, 10) for i in range(4, 8)]
    edges.append((0, 7))
    u, i = np.array(edges).T
    ul, il, st = P.partition_spectral(u, i, 10, 8, 2, seed=0)
    assert len(set(ul[:5])) == 1 and len(set(ul[5:])) == 1 and ul[0] != ul[5]
    assert (il[:4] == ul[0]).all() and (il[4:] == ul[5]).all()
    assert st["edges_dropped"] == 1 and st["edges_kept"] == len(edges) - 1


def test_spectral_labels_equal_scikit_learns_on_ml100k(data_dir):
    """Our Lanczos embedding + cluster_qr gives the partition of scikit-learn's
    SpectralClustering(affinity='precomputed', assign_labels='cluster_qr') (ARPACK shift-invert,
    too slow for Gowalla) on an ML-100K training graph with isolated items: the same 4 groups of
    users and items."""
    import scipy.sparse as sp
    from sklearn.cluster import SpectralClustering

    from corolla.data.loaders import load_ml100k

    inter = load_ml100k(data_dir)
    nu, ni = int(inter.user.max()) + 1, int(inter.item.max()) + 1
    # a training graph: 81 % of the edges, so that some items are isolated (as in a ratio split)
    keep = np.random.default_rng(0).random(len(inter.user)) < 0.81
    user, item = inter.user[keep], inter.item[keep]
    assert len(np.setdiff1d(np.arange(ni), item)) > 0
    ul, il, _ = P.partition_spectral(user, item, nu, ni, 4, seed=0)
    assert min(np.bincount(np.concatenate([ul, il]))) > 100   # no cluster of isolated nodes
    n = nu + ni
    r = sp.coo_matrix((np.ones(len(user)), (user, nu + item)), shape=(n, n)).tocsr()
    r.data[:] = 1.0
    ref = SpectralClustering(n_clusters=4, affinity="precomputed", assign_labels="cluster_qr",
                             random_state=0).fit_predict((r + r.T).tocsr())
    # isolated nodes have a zero embedding row: ours labels them 0 (on every machine), scikit-learn
    # by round-off
    linked = np.asarray((r + r.T).sum(1)).ravel() > 0
    ours = np.concatenate([ul, il])
    assert (ours[~linked] == 0).all()
    pairs = set(zip(ours[linked].tolist(), ref[linked].tolist()))
    assert len(pairs) == 4 and len({a for a, _ in pairs}) == 4   # a bijection of labels
    assert sorted(np.bincount(ours[linked]).tolist()) == sorted(np.bincount(ref[linked]).tolist())


def test_spectral_partition_does_not_depend_on_the_lanczos_start(data_dir):
    """The labels are a function of the graph, not of Lanczos's start vector or round-off: other
    start vectors give the same partition of an ML-100K training graph with isolated items, label
    for label (the smallest relative margin of cluster_qr's assignment on the lpsfed-ml100k graph
    is 5e-4, the embedding's round-off 1e-15)."""
    from corolla.data.loaders import load_ml100k

    inter = load_ml100k(data_dir)
    nu, ni = int(inter.user.max()) + 1, int(inter.item.max()) + 1
    keep = np.random.default_rng(0).random(len(inter.user)) < 0.81
    user, item = inter.user[keep], inter.item[keep]
    assert len(np.setdiff1d(np.arange(ni), item)) > 0
    a = P.partition_spectral(user, item, nu, ni, 4, seed=0)
    for seed in (1, 2):
        b = P.partition_spectral(user, item, nu, ni, 4, seed=seed)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_fedcia_split_from_file(data_dir):
    fed = build_federation(resolve(None, {"split": "fedcia", "partition": "fedcia", "protocol": "full-rank"}),
                           data_dir, use_cache=False)
    assert fed.stats["train"] == 72000 and fed.stats["valid"] == 8000 and fed.stats["test"] == 20000
    assert [len(c) for c in fed.clients] == [9] * 99 + [52]
    test_users = [u for u in range(943) if len(fed.rows("test", u))]
    assert len(test_users) == 459


def test_loo_on_ml100k(data_dir):
    fed = build_federation(resolve(None, {"split": "loo", "partition": "user"}), data_dir, use_cache=False)
    assert fed.stats["train"] == 98114 and fed.stats["valid"] == 943 and fed.stats["test"] == 943
    assert fed.neg_valid.shape == (943, 99)


def test_missing_file_offline_names_file_url_and_place(tmp_path, monkeypatch):
    monkeypatch.setenv("COROLLA_OFFLINE", "1")
    monkeypatch.delenv("COROLLA_DATA", raising=False)
    with pytest.raises(DatasetFileError) as e:
        locate("ml-100k/u.data", tmp_path)
    msg = str(e.value)
    assert "ml-100k/u.data" in msg and "files.grouplens.org" in msg and str(tmp_path) in msg


def test_checksum_mismatch_is_an_error(tmp_path, data_dir):
    d = tmp_path / "ml-100k"
    d.mkdir()
    data = Path(data_dir, "ml-100k", "u.data").read_bytes()
    (d / "u.data").write_bytes(data[:-10] + b"1\t1\t1\t1\n")
    with pytest.raises(DatasetFileError, match="checksum mismatch"):
        locate("ml-100k/u.data", tmp_path)


_PROBE = """
import hashlib, json, sys
sys.path.insert(0, {root!r})
from corolla.config import resolve
from corolla.data import build_federation
for over in {cases!r}:
    f = build_federation(resolve(None, over), {data!r}, use_cache=False)
    h = hashlib.sha256()
    for k, v in sorted(f.to_arrays().items()):
        h.update(k.encode()); h.update(v.tobytes())
    print(h.hexdigest())
"""


def test_deterministic_across_processes(data_dir):
    cases = [{"split": "ratio", "partition": "random", "num-clients": 7, "protocol": "full-rank", "seed": 3},
             {"split": "loo", "partition": "user", "seed": 5}]
    code = _PROBE.format(root=str(ROOT), cases=cases, data=data_dir)
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(s), "COROLLA_OFFLINE": "1", "PATH": "/usr/bin:/bin"}).stdout
            for s in (1, 2)]
    assert outs[0] == outs[1] and len(outs[0].split()) == 2


def test_attribute_files(data_dir):
    from corolla.data.loaders import load_ml100k_items, load_ml100k_users, load_ml1m_users

    u = load_ml100k_users(data_dir)
    assert len(u.ids) == 943 and u.columns["age"][0] == 24 and u.columns["gender"][0] == "M"
    it = load_ml100k_items(data_dir)
    assert len(it.ids) == 1682 and it.genres.shape == (1682, 19) and it.title[0].startswith("Toy Story")
    m = load_ml1m_users(data_dir)
    assert len(m.ids) == 6040 and (m.columns["gender"] == "M").sum() == 4331


def test_lastfm_tagged_is_ufgraphfrs_lastfm2k(data_dir):
    """user_taggedartists.dat, users with >= 5 rows: UFGraphFR's Table 3 (185,650 / 1,600 / 12,454);
    leave-one-out on the dates; the user file's tag is each user's total number of rows."""
    from corolla.data.loaders import load_lastfm_tagged, load_lastfm_tagged_users

    raw = load_lastfm_tagged(data_dir)
    assert len(raw) == 186479 and raw.n_users == 1892 and raw.n_items == 12523
    kept = S.filter_interactions(raw, 0.0, 5)
    assert len(kept) == 185650 and kept.n_users == 1600 and kept.n_items == 12454
    assert raw.ts[0] == 20090401   # user 2, artist 52: 1 April 2009
    users = load_lastfm_tagged_users(data_dir)
    assert len(users.ids) == 1600 and users.columns["tag"].sum() == 185650
    assert users.columns["tag"].min() >= 5
    fed = build_federation(resolve(None, {"dataset": "lastfm-2k-tagged", "min-user-interactions": 5, "split": "loo",
                                          "partition": "user", "eval-neg-pool": "disjoint"}), data_dir, use_cache=False)
    assert (fed.n_users, fed.n_items) == (1600, 12454)
    assert fed.stats["valid"] == 1600 and fed.stats["test"] == 1600 and fed.stats["train"] == 185650 - 3200
    # the test row is a user's latest date; among rows of that date the first in the file
    u0 = kept.user == 0
    last = kept.ts[u0].max()
    assert fed.rows("test", 0).tolist() == [kept.item[u0][kept.ts[u0] == last][0]]


def test_lastfm_tagged_user_file_is_the_authors_user_dat_byte_for_byte(data_dir):
    """UFGraphFR's published data/lastfm-2k/user.dat (git blob 5b2ef27 at 853ca8a, 10,344 bytes):
    the users with >= 3 distinct tagged artists, uid = row, tag = their distinct artists."""
    import hashlib

    from corolla.data.loaders import load_lastfm_tagged_user_file

    f = load_lastfm_tagged_user_file(data_dir)
    assert len(f.ids) == 1484 and f.ids.tolist() == list(range(1484))
    assert f.columns["tag"][:10].tolist() == [10, 9, 57, 34, 4, 7, 101, 13, 20, 257]
    assert f.columns["raw"][:6].tolist() == [2, 3, 4, 5, 6, 8]   # raw user 7 tagged 2 distinct artists
    body = ("\n".join(f"{u},{t}" for u, t in zip(f.ids.tolist(), f.columns["tag"].tolist())) + "\n").encode()
    assert len(body) == 10344
    assert hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest() == "5b2ef274f35561d149d41c4f2675d40e9a6c750f"


def test_lastfm_tagged_missing_offline_names_the_file_and_url(tmp_path, monkeypatch):
    monkeypatch.setenv("COROLLA_OFFLINE", "1")
    monkeypatch.delenv("COROLLA_DATA", raising=False)
    with pytest.raises(DatasetFileError) as e:
        locate("hetrec2011-lastfm-2k/user_taggedartists.dat", tmp_path)
    msg = str(e.value)
    assert "user_taggedartists.dat" in msg and "hetrec2011-lastfm-2k.zip" in msg


def test_every_dataset_file_present_offline_matches_its_checksum(data_dir):
    """The sha256 / git blob id of every file of ``FILES`` that the offline folder holds (LightGCN's
    Yelp2018 and Amazon-Book test files among them); a missing one is what the download path is for."""
    from corolla.data.sources import FILES, verify

    checked = [name for name, spec in FILES.items() if (Path(data_dir) / name).is_file()]
    for name in checked:
        verify(Path(data_dir) / name, FILES[name])
    assert {"lightgcn/yelp2018/test.txt", "lightgcn/amazon-book/test.txt", "lightgcn/gowalla/train.txt"} <= set(checked)


@pytest.mark.parametrize("name", ["yelp2018", "amazon-book"])
def test_lightgcn_split_missing_offline_names_the_file_and_url(name, tmp_path, monkeypatch):
    monkeypatch.setenv("COROLLA_OFFLINE", "1")
    monkeypatch.delenv("COROLLA_DATA", raising=False)
    with pytest.raises(DatasetFileError) as e:
        build_federation(resolve(f"lpsfed-{name.replace('-', '')}"), str(tmp_path), use_cache=False)
    msg = str(e.value)
    assert f"lightgcn/{name}/train.txt" in msg and f"kuandeng/LightGCN/b067ec05f16a24e0e1efe63cd82385f0c469af20/Data/{name}/train.txt" in msg
    assert str(tmp_path) in msg


def test_lightgcn_loader_reads_user_item_lines_with_the_splits_item_count(tmp_path, monkeypatch):
    """``user item item ...`` per line, train then test (labels 0 / 2); the item universe is the split's
    item_list size, so an item no line names still has a column; a line with a user only is skipped."""
    from corolla.data import loaders

    (tmp_path / "train.txt").write_text("0 5 3\n1 2\n2\n")
    (tmp_path / "test.txt").write_text("0 1\n1 5 7\n")
    monkeypatch.setattr(loaders, "locate", lambda name, data_dir=None: tmp_path / name.rsplit("/", 1)[1])
    inter, lab = loaders.load_lightgcn("yelp2018")
    assert inter.n_items == 38048 and inter.n_users == 2
    assert list(zip(inter.user.tolist(), inter.item.tolist(), lab.tolist())) == [
        (0, 5, 0), (0, 3, 0), (1, 2, 0), (0, 1, 2), (1, 5, 2), (1, 7, 2)]
    with pytest.raises(ValueError, match="not one of LightGCN's splits"):
        loaders.load_lightgcn("ml-100k")


def test_split_given_names_the_datasets_that_have_their_own_files():
    with pytest.raises(ConfigError, match="gowalla, yelp2018, amazon-book"):
        resolve(None, {"split": "given"})
    with pytest.raises(ConfigError, match="'yelp2018' is a LightGCN split"):
        resolve("lpsfed-yelp2018", {"split": "ratio"})
