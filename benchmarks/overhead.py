"""Flower overhead per logical client per phase, in ``sim`` and ``local`` modes.

For K logical clients (10, 100, 943 by default) on N nodes, runs a cheap FedAvg-MF config (d=8,
leave-one-out, 3 rounds) through ``corolla run`` and reads ``rounds.jsonl``:

* ``wall_s``: the phase's wall time on the server (push, client work, replies);
* ``compute_s``: the largest per-node sum of the time the logical clients spent in the phase
  itself (state load, training/evaluation, state save), as the nodes report it;
* overhead = wall - compute, and per logical client = overhead / K.

Usage::

    python benchmarks/overhead.py --data-dir ../shared/datasets [--clients 10 100 943] \
        [--modes sim local] [--nodes 4] [--out benchmarks/out/overhead]

It prints a Markdown table (mean over rounds 2..R; round 1 includes process and cache warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CFG = ["split=loo", "partition=blocks", "protocol=loo", "dim=8", "loss=bpr", "train-samples=per-positive",
       "batch-size=4096", "lr=0.05", "compat-fedcia-metrics=false", "select-metric=ndcg@10", "patience=0",
       "num-rounds=3"]


def run(mode: str, k: int, nodes: int, data_dir: str, out: Path) -> list[dict]:
    d = out / f"{mode}-{k}"
    if not (d / "summary.json").is_file():
        args = [sys.executable, "-m", "corolla.cli", "run", "--preset", "fedavg-mf-ml100k", "--mode", mode,
                "--nodes", str(nodes), "--data-dir", data_dir, "--out", str(d)]
        for s in CFG + [f"num-clients={k}"]:
            args += ["--set", s]
        subprocess.run(args, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return [json.loads(x) for x in (d / "rounds.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 943])
    ap.add_argument("--modes", nargs="+", default=["sim", "local"])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "overhead"))
    a = ap.parse_args()
    out = Path(a.out)
    rows = []
    for mode in a.modes:
        for k in a.clients:
            rounds = run(mode, k, a.nodes, str(Path(a.data_dir).resolve()), out)
            for phase in ("train", "evaluate"):
                ph = [p for r in rounds[1:] for p in r["phases"] if p["name"] == phase]
                wall = sum(p["wall_s"] for p in ph) / len(ph)
                comp = sum(p.get("compute_s", 0.0) for p in ph) / len(ph)
                rows.append((mode, k, phase, wall, comp, (wall - comp) / k * 1000))
    print("| mode | logical clients | phase | wall s | client compute s (max per node) | overhead ms per logical client |")
    print("|---|---:|---|---:|---:|---:|")
    for mode, k, phase, wall, comp, per in rows:
        print(f"| {mode} | {k} | {phase} | {wall:.2f} | {comp:.2f} | {per:.1f} |")


if __name__ == "__main__":
    main()
