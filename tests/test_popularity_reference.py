"""benchmarks/popularity_reference.py: item popularity ranked by a preset's own evaluation, by hand."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corolla.data.federation import Federation

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("popularity_reference", ROOT / "benchmarks" / "popularity_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fed(train, valid, test, n_items, neg_valid=None, neg_test=None) -> Federation:
    def csr(rows):
        indptr = np.r_[0, np.cumsum([len(r) for r in rows])].astype(np.int64)
        return indptr, np.asarray([i for r in rows for i in r], np.int64)
    parts = {s: csr(r) for s, r in (("train", train), ("valid", valid), ("test", test))}
    return Federation(len(train), n_items, {s: p[0] for s, p in parts.items()}, {s: p[1] for s, p in parts.items()},
                      [np.arange(len(train))], neg_valid, neg_test)


def test_leave_one_out_by_hand_with_both_tie_rules():
    pr = _module()
    # counts: item 0: 3, item 1: 2, items 2 and 3: 1, item 4: 0
    fed = _fed([[0, 1], [0, 2], [0, 1, 3]], [[1], [1], [1]], [[2], [1], [4]], 5,
               neg_valid=np.array([[3, 4], [3, 4], [2, 3]]), neg_test=np.array([[3, 4], [3, 4], [2, 3]]))
    pop = pr.item_popularity(fed)
    assert pop.tolist() == [3.0, 2.0, 1.0, 1.0, 0.0]
    uni = pr.loo_popularity(fed, pop, "test", [1, 2], False)
    against = pr.loo_popularity(fed, pop, "test", [1, 2], True)
    # user 0: its item (count 1) ties with negative 3: rank 1 or 2 (uniform), rank 2 (against);
    # user 1: rank 1; user 2: item 4 (count 0) below both negatives: rank 3
    assert uni["hr@1"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert uni["hr@2"] == pytest.approx((1 + 1 + 0) / 3)
    assert uni["ndcg@2"] == pytest.approx((0.5 + 0.5 / math.log2(3) + 1) / 3)
    assert against["hr@1"] == pytest.approx(1 / 3)
    assert against["ndcg@2"] == pytest.approx((1 / math.log2(3) + 1) / 3)
    assert uni["users"] == 3


def test_full_ranking_masks_train_and_at_test_validation_items():
    pr = _module()
    # counts: item 0: 3, item 1: 2, item 2: 1, items 3 and 4: 0
    fed = _fed([[0, 1], [0, 1, 2], [0]], [[], [], [1]], [[2], [3, 4], [3]], 5)
    pop = pr.item_popularity(fed)
    test = pr.full_rank_popularity(fed, pop, "test", [1], False)
    # user 0: 0, 1 masked -> item 2 first (hit); user 1: 0-2 masked -> 3 or 4 first (both hits);
    # user 2: 0 (train) and 1 (validation) masked -> item 2 first (no hit)
    assert test["hr@1"] == pytest.approx(2 / 3)
    assert test["recall@1"] == pytest.approx((1 + 0.5 + 0) / 3)
    valid = pr.full_rank_popularity(fed, pop, "valid", [1], False)
    # only user 2 has a validation item; with its train item masked, item 1 (its validation item) is first
    assert valid["users"] == 1 and valid["hr@1"] == 1.0


def test_full_ranking_keeps_validation_items_in_the_test_ranking_when_the_preset_says_so():
    pr = _module()
    # counts: item 0: 3, item 1: 2, item 2: 1, item 3: 0; only user 2 has validation (1) and test (2) items
    fed = _fed([[0, 1, 2], [0, 1], [0]], [[], [], [1]], [[], [], [2]], 4)
    pop = pr.item_popularity(fed)
    masked = pr.full_rank_popularity(fed, pop, "test", [1, 2], False)
    kept = pr.full_rank_popularity(fed, pop, "test", [1, 2], False, mask_valid=False)
    assert masked["users"] == kept["users"] == 1
    assert masked["hr@1"] == 1.0                                  # 0, 1 masked: item 2 first
    assert kept["hr@1"] == 0.0 and kept["hr@2"] == 1.0            # item 1 (validation) first, item 2 second
    assert kept["ndcg@2"] == pytest.approx(1 / math.log2(3))


def test_the_paper_rows_below_the_reference_follow_the_tables_source(tmp_path):
    pr = _module()
    cat = tmp_path / "tables.toml"
    cat.write_text('[[table]]\nid = "t"\nsource = "compat"\nmetrics = ["hr@10", "ndcg@10"]\n'
                   'datasets = ["A", "B"]\nvalues = """\nX | 0.30 0.20 0.9 0.9\nY | 0.50 0.10 0.9 0.9\n'
                   'Z | 0.35 - 0.9 0.9\n"""\n')
    ref = {"ties-against-positive": True,
           "test": {"ties-uniform": {"hr@10": 0.45, "ndcg@10": 0.30},
                    "ties-against-positive": {"hr@10": 0.40, "ndcg@10": 0.25}}}
    rows = {r["method"]: r for r in pr.compare(ref, "t", "A", cat)}
    assert rows["X"]["below"] and not rows["Y"]["below"] and rows["Z"]["below"]   # '-' is not compared
    assert rows["X"]["popularity"] == {"hr@10": 0.40, "ndcg@10": 0.25}          # the tie rule of 'compat'
    ref["ties-against-positive"] = False                                        # a preset without that rule
    assert pr.compare(ref, "t", "A", cat)[0]["popularity"] == {"hr@10": 0.45, "ndcg@10": 0.30}
    with pytest.raises(Exception, match="datasets are"):
        pr.compare(ref, "t", "C", cat)


def test_the_command_on_a_preset_equals_a_brute_force_count(tmp_path, data_dir):
    out = tmp_path / "pop.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "popularity_reference.py"), "--data-dir", str(data_dir),
                    "fedavg-pmf-ml100k:fedca-t1-pmf:ML-100K", "--json", str(out)],
                   check=True, capture_output=True, text=True)
    r = json.loads(out.read_text())["presets"]["fedavg-pmf-ml100k:fedca-t1-pmf:ML-100K"]
    from corolla.config import resolve
    from corolla.data import build_federation
    fed = build_federation(resolve("fedavg-pmf-ml100k"), str(data_dir))
    counts = np.zeros(fed.n_items)
    for u in range(fed.n_users):
        for i in fed.rows("train", u):
            counts[i] += 1
    hits = [1 + int((counts[fed.neg_test[u]] >= counts[fed.rows("test", u)[0]]).sum()) <= 10
            for u in range(fed.n_users)]
    assert r["test"]["ties-against-positive"]["hr@10"] == pytest.approx(np.mean(hits))
    assert {row["method"] for row in r["table"]["rows"]} >= {"Local", "FedAvg", "FedCA"}


def test_top_k_lists_compared_with_popularitys_under_the_same_masks():
    pr = _module()
    # counts: item 0: 3, item 1: 2, item 2: 1, items 3 and 4: 0
    fed = _fed([[0, 1], [0, 1, 2], [0]], [[], [], [1]], [[2], [3, 4], [3]], 5)
    pop = pr.item_popularity(fed)
    assert pr.popularity_topk(fed, pop, 2, 2) == [2, 3]          # 0 (train), 1 (validation) masked; 3 before 4
    r = pr.topk_overlap({0: [2, 3], 1: [4, 3], 2: [4, 2]}, fed, pop)
    # user 0: popularity [2, 3] (same set); user 1: [3, 4] (same set); user 2: [2, 3] against {4, 2}: half
    assert r["users"] == 3 and r["k"] == 2
    assert r["overlap"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert r["same_set"] == pytest.approx(2 / 3)
    with pytest.raises(Exception, match="no top-K"):
        pr.topk_overlap({}, fed, pop)


def test_full_ranking_by_blocks_of_users_equals_one_block(monkeypatch):
    pr = _module()
    fed = _fed([[0, 1], [0, 1, 2], [0]], [[], [], [1]], [[2], [3, 4], [3]], 5)
    pop = pr.item_popularity(fed)
    whole = pr.full_rank_popularity(fed, pop, "test", [1, 2], False)
    monkeypatch.setattr(pr, "BLOCK", 1)
    assert pr.full_rank_popularity(fed, pop, "test", [1, 2], False) == whole


def test_the_recorded_command_names_the_data_folder_as_the_docs_do(tmp_path):
    pr = _module()
    cmd = pr.command_line(["--data-dir", "/somewhere/datasets", "p:t:D", "--json", str(ROOT / "docs" / "x.json")])
    assert cmd == "python benchmarks/popularity_reference.py --data-dir $COROLLA_DATA p:t:D --json docs/x.json"
    assert pr.command_line(["--json", str(tmp_path / "y.json")]).endswith(str(tmp_path / "y.json"))
