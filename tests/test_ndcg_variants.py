"""benchmarks/ndcg_variants.py: NDCG@K under three ideal-DCG conventions, by hand; and Dist-FedAvg's
``--export-topk`` ranks as its evaluation does (the script's ``idcg-min`` reproduces the run's own
last-round HR and NDCG from ``topk.jsonl``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ndcg_variants as nv

from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions


def test_variants_by_hand():
    top, truth = [5, 1, 9, 2, 7], {1, 2, 3}
    d = 1 / math.log2(3) + 1 / math.log2(5)                   # hits at ranks 2 and 4
    assert nv.dcg(top, truth, 5) == pytest.approx(d)
    assert nv.ndcg(top, truth, 5, "idcg-min") == pytest.approx(d / (1 + 1 / math.log2(3) + 0.5))
    assert nv.ndcg(top, truth, 5, "idcg-k") == pytest.approx(d / sum(1 / math.log2(r + 2) for r in range(5)))
    assert nv.ndcg(top, truth, 5, "idcg-all") == nv.ndcg(top, truth, 5, "idcg-min")   # |T| = 3 <= 5
    many = set(range(100, 108)) | {5}                        # |T| = 9 > K = 3: only idcg-all differs
    assert nv.ndcg(top, many, 3, "idcg-min") == nv.ndcg(top, many, 3, "idcg-k") == pytest.approx(1 / nv.ideal(3))
    assert nv.ndcg(top, many, 3, "idcg-all") == pytest.approx(1 / nv.ideal(9))
    assert nv.ndcg([1, 2], {3}, 2, "idcg-min") == 0.0
    with pytest.raises(ValueError, match="variant 'dcg'"):
        nv.ndcg(top, truth, 5, "dcg")
    with pytest.raises(ValueError, match="without test items"):
        nv.ndcg(top, set(), 5, "idcg-min")


def test_evaluate_means_and_interval():
    tops = {0: [1, 2, 3], 1: [4, 5, 6]}
    truth = {0: {1}, 1: {9, 8}, 2: set()}                      # user 2 has no test item: not counted
    r = nv.evaluate(tops, truth, 3)
    assert r["users"] == 2 and r["hr"]["mean"] == 0.5
    assert r["ndcg:idcg-min"]["mean"] == pytest.approx(0.5)
    assert r["hr"]["ci95"] == pytest.approx(1.96 * np.std([1.0, 0.0], ddof=1) / math.sqrt(2))
    assert r["ndcg:idcg-k"]["mean"] == pytest.approx(0.5 / nv.ideal(3))
    with pytest.raises(ValueError, match="no top-K for 1 test users"):
        nv.evaluate({0: [1]}, truth, 3)


def test_distfedavg_export_topk_ranks_as_its_evaluation(tmp_path, data_dir):
    from corolla.data.federation import build_federation

    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": "distfedavg-ml100k", "data-dir": data_dir, "out-dir": str(tmp_path / "r"),
                           "set": "num-rounds=2 min-user-interactions=200 clients-per-round=6 local-epochs=3 "
                                  "export-topk=10"})
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())["config"]
    fed = build_federation(cfg, data_dir)
    rows = [json.loads(x) for x in (tmp_path / "r" / "topk.jsonl").read_text().splitlines()]
    assert sorted(r["user"] for r in rows) == list(range(fed.n_users))
    tops = {r["user"]: r["items"] for r in rows}
    for u, items in tops.items():
        assert len(items) == 10 and not set(items) & (set(fed.rows("train", u)) | set(fed.rows("valid", u)))
    got = nv.evaluate(tops, {u: set(fed.rows("test", u).tolist()) for u in range(fed.n_users)}, 10)
    assert got["hr"]["mean"] == pytest.approx(s["last_round_metrics"]["hr@10"], abs=1e-12)
    assert got["ndcg:idcg-min"]["mean"] == pytest.approx(s["last_round_metrics"]["ndcg@10"], abs=1e-12)
    assert got["ndcg:idcg-min"]["mean"] > 0


def test_bad_arguments_are_named(tmp_path, capsys):
    assert nv.main(["--run", str(tmp_path), "--k", "0"]) == 2
    assert "--k 0: expected a positive cut-off" in capsys.readouterr().err
    assert nv.main(["--run", str(tmp_path), "--data-dir", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert nv.main(["--run", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
