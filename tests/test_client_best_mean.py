"""``compat-client-aggregation = "client-best-mean"``: the LPSFed code's client aggregation
(per client the best test value over the evaluated rounds, then the unweighted mean over clients)
as ``metrics_paper_compat`` in summary.json (issue 29; benchmarks/lpsfed_authors.md)."""
import json

import pytest

from corolla.config import ConfigError, parse_overrides, resolve
from server_app.results import client_best_mean


def test_by_hand():
    hist = [{"round": 5, "per_client": {"0": {"recall@20": 0.1, "ndcg@20": 0.30, "users": 7},
                                        "1": {"recall@20": 0.4, "ndcg@20": 0.10, "users": 9}}},
            {"round": 6},                                     # not evaluated: no per-client metrics
            {"round": 10, "per_client": {"0": {"recall@20": 0.3, "ndcg@20": 0.20, "users": 7},
                                         "1": {"recall@20": 0.2, "ndcg@20": 0.50, "users": 9}}}]
    got = client_best_mean(hist)
    # client 0: recall max 0.3 (round 10), ndcg max 0.3 (round 5); client 1: 0.4 (5), 0.5 (10)
    assert got["metrics"] == pytest.approx({"recall@20": (0.3 + 0.4) / 2, "ndcg@20": (0.3 + 0.5) / 2})
    assert got["clients"] == 2 and got["rounds"] == [5, 10] and "users" not in got["metrics"]


def test_needs_per_client_metrics():
    with pytest.raises(ConfigError, match="compat-client-aggregation.*report-per-client=true"):
        resolve("fedavg-mf-ml100k", parse_overrides(["compat-client-aggregation=client-best-mean"]))


def test_every_lgcn_preset_reports_it():
    from corolla.config import list_presets
    lgcn = [p.name for p in list_presets() if resolve(p.name)["model"] == "lgcn"]
    assert lgcn and all(resolve(n)["compat-client-aggregation"] == "client-best-mean" for n in lgcn)


def test_summary_of_an_lpsfed_run(tmp_path, data_dir):
    from server_app.app import run_federation
    from tests.inproc import InProcessTransport, partitions
    from tests.test_fused import shrink
    out = tmp_path / "run"
    s = run_federation(InProcessTransport(partitions(2, {"data-dir": data_dir})),
                       {"preset": "lpsfed-ml100k", "set": shrink("lpsfed-ml100k") + " num-rounds=3",
                        "out-dir": str(out), "data-dir": data_dir})
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    want = client_best_mean(rounds)
    assert s["metrics_paper_compat"] == json.loads(json.dumps(want)) and len(want["rounds"]) == 3
    assert s["metrics_paper_compat"]["clients"] == 4
    best = {c: max(r["per_client"][c]["recall@20"] for r in rounds) for c in rounds[0]["per_client"]}
    assert s["metrics_paper_compat"]["metrics"]["recall@20"] == pytest.approx(sum(best.values()) / len(best))
