"""benchmarks/paper_on_curve.py: the closest round of a run's curve to the paper's numbers and the
rounds within the tolerance, on a run directory written by hand; the run directory found from a
result file's command, or from its name for a file without one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import paper_on_curve as pc


def _run(tmp_path: Path, name: str, rounds: list[tuple[float, float]]) -> Path:
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    lines = []
    for i, (hr, ndcg) in enumerate(rounds, 1):
        lines.append(json.dumps({"round": i, "metrics": {"hr@10": hr / 2, "ndcg@10": ndcg / 2},
                                 "compat": {"hr@10": hr, "ndcg@10": ndcg}}))
    lines.insert(1, json.dumps({"round": 99, "train": {}}))          # a round without evaluation: skipped
    (run / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_largest_gap_is_signed_and_largest():
    assert pc.largest_gap({"a": 0.9, "b": 1.02}, {"a": 1.0, "b": 1.0}) == pytest.approx(-0.1)
    assert pc.largest_gap({"a": 1.3, "b": 0.8}, {"a": 1.0, "b": 1.0}) == pytest.approx(0.3)


def test_check_row_finds_the_rounds_through_the_paper(tmp_path):
    # paper 0.50 / 0.30; rounds: far below, within 5 % on both (round 2, 3), HR within but NDCG not, above
    _run(tmp_path, "x", [(0.30, 0.10), (0.49, 0.29), (0.51, 0.31), (0.50, 0.20), (0.70, 0.45)])
    res = SimpleNamespace(path=tmp_path / "x.json", metrics={"hr@10": 0.70, "ndcg@10": 0.45},
                          raw={"provenance": {"command": "corolla run --preset p --out runs/x"},
                               "selection": {"round": 5}})
    row = SimpleNamespace(table="t", dataset="D", method="M", metrics=["hr@10", "ndcg@10"],
                          paper_values=[0.50, 0.30], ours=[res])
    (c,) = pc.check_row(row, "compat", tmp_path / "runs", 0.05)
    assert c["run"] == "runs/x" and c["rounds"] == 5 and c["last_round"] == 5
    assert c["read_round"] == 5 and c["read_gap"] == pytest.approx(0.5)
    assert c["closest_round"] == 2 and c["closest_gap"] == pytest.approx(-1 / 30)
    assert c["rounds_within"] == [2, 3]
    (m,) = pc.check_row(row, "metrics", tmp_path / "runs", 0.05)     # the other block: halves, never within
    assert m["rounds_within"] == [] and m["closest_round"] == 5


def test_read_round_is_the_compat_selection_for_compat_tables():
    raw = {"selection": {"round": 9}, "metrics_paper_compat": {"selection": {"round": 4, "split": "test"}}}
    assert pc.read_round(raw, "compat") == 4 and pc.read_round(raw, "metrics") == 9
    assert pc.read_round({"selection": {"round": 9}}, "compat") == 9


def test_run_dir_from_command_or_name(tmp_path):
    runs = tmp_path / "runs"
    assert pc.run_dir_of({"provenance": {"command": "corolla run --out runs/a b"}}, runs) == tmp_path / "runs/a"
    assert pc.run_dir_of({"provenance": {"command": "corolla run --resume /abs/r"}}, runs) == Path("/abs/r")
    assert pc.run_dir_of({}, runs, "old-file") == runs / "old-file"
    assert pc.run_dir_of({}, runs) is None
    res = SimpleNamespace(path=tmp_path / "gone.json", metrics={"hr@10": 0.1}, raw={})
    row = SimpleNamespace(table="t", dataset="D", method="M", metrics=["hr@10"], paper_values=[0.2], ours=[res])
    (c,) = pc.check_row(row, "compat", runs, 0.05)
    assert c["run"] is None and c["read_gap"] == pytest.approx(-0.5)


def test_replay_patience_is_the_prefix_a_stopped_run_would_select():
    def rnd(i, v, t):
        return {"round": i, "valid": {"f1": v}, "valid_compat": {"f1": v + 1}, "metrics": {"f1": t},
                "compat": {"f1": 10 * t}}
    # valid: rises to 0.5 at round 3, equal at 4, then flat below for 3 rounds, then higher at 8
    rounds = [rnd(1, .1, 1), rnd(2, .3, 2), rnd(3, .5, 3), rnd(4, .5, 4), rnd(5, .4, 5), rnd(6, .4, 6),
              rnd(7, .4, 7), rnd(8, .9, 8)]
    first = pc.replay_patience(rounds, "metrics", "f1", "first", 3, ["f1"])
    assert first == {"stop_round": 6, "stopped": True, "selected_round": 3, "values": {"f1": 3.0}}
    last = pc.replay_patience(rounds, "metrics", "f1", "last", 3, ["f1"])     # the tie moves the best to 4
    assert (last["stop_round"], last["selected_round"], last["values"]) == (7, 4, {"f1": 4.0})
    never = pc.replay_patience(rounds, "compat", "f1", "first", 0, ["f1"])   # compat blocks, no stop
    assert never == {"stop_round": 8, "stopped": False, "selected_round": 8, "values": {"f1": 80.0}}
    assert pc.replay_patience([{"round": 1, "valid": {"x": 1}}], "metrics", "f1", "first", 3, ["f1"]) is None


def test_an_unweighted_mean_table_reads_the_rounds_mean_over_clients(tmp_path):
    """LPSFed's tables report the unweighted mean over the 4 clients: the curve reads each round's
    ``unweighted_mean`` block, never the weighted ``metrics`` (which is another number), and the
    replayed selection reports that block too."""
    rounds = [{"round": 5, "metrics": {"recall@20": 0.05}, "unweighted_mean": {"recall@20": 0.12},
               "valid": {"recall@20": 0.06}},
              {"round": 10, "metrics": {"recall@20": 0.06}, "unweighted_mean": {"recall@20": 0.15},
               "valid": {"recall@20": 0.07}},
              {"round": 15, "metrics": {"recall@20": 0.06}, "valid": {"recall@20": 0.05}}]   # no mean: skipped
    assert pc.curve(rounds, "unweighted_mean", ["recall@20"]) == [(5, {"recall@20": 0.12}), (10, {"recall@20": 0.15})]
    assert pc.curve(rounds, "metrics", ["recall@20"])[0] == (5, {"recall@20": 0.05})
    rep = pc.replay_patience(rounds, "unweighted_mean", "recall@20", "last", 0, ["recall@20"])
    assert rep["selected_round"] == 10 and rep["values"] == {"recall@20": 0.15}
