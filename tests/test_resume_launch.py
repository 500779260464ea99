"""``corolla run --resume RUN`` without ``--mode`` / ``--nodes`` continues with the interrupted run's
mode and node count (``OUT/launch.json``), not the defaults: a run started in process on 3 nodes
resumed as a local run on one node per core before (its messages and processes differed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.cli import LAUNCH_FILE, read_launch

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["num-rounds=2", "split=loo", "partition=blocks", "num-clients=6", "protocol=loo", "dim=8",
         "loss=bpr", "train-samples=per-positive", "batch-size=1024", "lr=0.05",
         "compat-fedcia-metrics=false", "select-metric=ndcg@10", "patience=0"]


def test_read_launch_takes_only_a_well_formed_file(tmp_path):
    assert read_launch(tmp_path) == {}                      # a run folder from before the file existed
    f = tmp_path / LAUNCH_FILE
    for bad in ("{", "[]", '{"mode": "cluster", "nodes": 2}', '{"mode": "sim", "nodes": 0}',
                '{"mode": "sim", "nodes": true}', '{"mode": "sim", "nodes": "2"}', '{"mode": "sim"}'):
        f.write_text(bad)
        assert read_launch(tmp_path) == {}, bad
    f.write_text('{"mode": "inproc", "nodes": 3, "other": 1}')
    assert read_launch(tmp_path) == {"mode": "inproc", "nodes": 3}


def _cli(args, data_dir):
    env = dict(os.environ, COROLLA_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "launcher.cli", "run", "--data-dir", data_dir] + args,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_resume_keeps_the_runs_mode_and_node_count(tmp_path, data_dir):
    out = tmp_path / "run"
    first = _cli(["--preset", "fedavg-mf-ml100k", "--mode", "inproc", "--nodes", "3", "--out", str(out), "--quiet"]
                 + [a for s in SMALL for a in ("--set", s)], data_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads((out / LAUNCH_FILE).read_text()) == {"mode": "inproc", "nodes": 3}
    done = json.loads((out / "summary.json").read_text())
    again = _cli(["--resume", str(out), "--quiet"], data_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "inproc mode, 3 nodes" in again.stdout and "(resumed; the run had inproc mode, 3 nodes)" in again.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["rounds_completed"] == 2 and s["metrics"] == done["metrics"]
    # an explicit flag still wins, and the file then records what the resume ran with
    told = _cli(["--resume", str(out), "--quiet", "--mode", "inproc", "--nodes", "2"], data_dir)
    assert told.returncode == 0, told.stdout + told.stderr
    assert "inproc mode, 2 nodes" in told.stdout
    assert json.loads((out / LAUNCH_FILE).read_text()) == {"mode": "inproc", "nodes": 2}


def test_drop_node_state_removes_it_after_a_completed_run_only_when_asked(tmp_path, data_dir):
    args = ["--preset", "fedavg-mf-ml100k", "--mode", "inproc", "--nodes", "2", "--quiet"] + [
        a for s in SMALL for a in ("--set", s)]
    kept = _cli(args + ["--out", str(tmp_path / "kept")], data_dir)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert any(p.is_file() for p in (tmp_path / "kept" / "node-state").rglob("*"))     # kept for --resume
    dropped = _cli(args + ["--out", str(tmp_path / "dropped"), "--drop-node-state"], data_dir)
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    assert "node state dropped" in dropped.stdout
    assert not (tmp_path / "dropped" / "node-state").exists()
    s = json.loads((tmp_path / "dropped" / "summary.json").read_text())
    assert s["metrics"] == json.loads((tmp_path / "kept" / "summary.json").read_text())["metrics"]
    # a state-dir the user gave a node is not the launcher's to remove
    own = tmp_path / "own-state"
    mine = _cli(args + ["--out", str(tmp_path / "mine"), "--drop-node-state", "--node-config", f"0:state-dir=\"{own}\""],
                data_dir)
    assert mine.returncode == 0, mine.stdout + mine.stderr
    assert "nothing removed" in mine.stderr and any(p.is_file() for p in own.rglob("*"))
    refused = subprocess.run([sys.executable, "-m", "launcher.cli", "run", "--superlink", "127.0.0.1:1",
                              "--preset", "fedavg-mf-ml100k", "--drop-node-state"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert refused.returncode == 2 and "--drop-node-state" in refused.stderr
