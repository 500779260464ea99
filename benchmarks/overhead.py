"""Flower overhead per logical client per phase, in ``sim`` and ``local`` modes.

For K logical clients (10, 100, 943 by default) on N nodes, runs a cheap FedAvg-MF config (d=8,
leave-one-out, 3 rounds) through ``corolla run`` and reads ``rounds.jsonl``:

* ``wall_s``: the phase's wall time on the server (push, client work, replies);
* ``compute_s``: the largest per-node sum of the time the logical clients spent in the phase
  itself (state load, training/evaluation, state save), as the nodes report it;
* overhead = wall - compute, and per logical client = overhead / K.

Usage::

    python benchmarks/overhead.py --data-dir $COROLLA_DATA [--clients 10 100 943] \
        [--modes sim local] [--nodes 4] [--out benchmarks/out/overhead]

It prints a Markdown table (mean over rounds 2..R; round 1 includes process and cache warm-up).

Per preset (``--presets``): runs each preset as it is, for ``--rounds`` rounds (a one-shot
preset runs its own), in ``local`` mode at every ``--nodes`` count (and once ``--mode inproc``
for reference), and reports per round the wall time, the clients' compute (the sum over the
round's phases of the largest per-node compute) and their difference, the overhead; plus the
end-to-end time of the ``corolla run`` command (process start-up to exit)::

    python benchmarks/overhead.py --data-dir $COROLLA_DATA \
        --presets fedavg-mf-ml100k fedcia-gfcf-ml100k fedca-pmf-ml100k --nodes 2 4 --rounds 3 \
        --out benchmarks/out/overhead-after --json docs/results/overhead-after.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CFG = ["split=loo", "partition=blocks", "protocol=loo", "dim=8", "loss=bpr", "train-samples=per-positive",
       "batch-size=4096", "lr=0.05", "compat-fedcia-metrics=false", "select-metric=ndcg@10", "patience=0",
       "num-rounds=3"]


def run(mode: str, k: int, nodes: int, data_dir: str, out: Path) -> list[dict]:
    d = out / f"{mode}-{k}"
    if not (d / "summary.json").is_file():
        args = [sys.executable, "-m", "launcher.cli", "run", "--preset", "fedavg-mf-ml100k", "--mode", mode,
                "--nodes", str(nodes), "--data-dir", data_dir, "--out", str(d)]
        for s in CFG + [f"num-clients={k}"]:
            args += ["--set", s]
        subprocess.run(args, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return [json.loads(x) for x in (d / "rounds.jsonl").read_text().splitlines()]


def run_preset(preset: str, mode: str, nodes: int, rounds: int, data_dir: str, out: Path) -> dict:
    """One ``corolla run`` of ``preset`` (its own config, ``num-rounds`` capped at ``rounds``)."""
    d = out / f"{preset}-{mode}-{nodes}"
    if not (d / "summary.json").is_file():
        from corolla.config import resolve

        n = min(rounds, resolve(preset)["num-rounds"])
        args = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--mode", mode, "--nodes",
                str(nodes), "--data-dir", data_dir, "--out", str(d), "--set", f"num-rounds={n}"]
        t0 = time.perf_counter()
        subprocess.run(args, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       stdout=subprocess.DEVNULL)
        (d / "command_wall_s.txt").write_text(f"{time.perf_counter() - t0:.3f}\n")
    rounds_ = [json.loads(x) for x in (d / "rounds.jsonl").read_text().splitlines()]
    summary = json.loads((d / "summary.json").read_text())
    per_round = []
    for r in rounds_:
        comp = sum(p.get("compute_s", 0.0) for p in r["phases"])
        per_round.append({"round": r["round"], "wall_s": r["wall_s"], "compute_s": round(comp, 3),
                          "overhead_s": round(r["wall_s"] - comp, 3),
                          "messages": sum(p.get("replies", 0) for p in r["phases"])})
    steady = per_round[1:] or per_round
    mean = lambda k: round(sum(x[k] for x in steady) / len(steady), 3)  # noqa: E731
    return {"preset": preset, "mode": mode, "nodes": nodes, "rounds": len(per_round),
            "command_wall_s": float((d / "command_wall_s.txt").read_text()),
            "run_wall_s": summary["wall_s"], "metrics": summary["metrics"],
            "round_wall_s": mean("wall_s"), "round_compute_s": mean("compute_s"),
            "round_overhead_s": mean("overhead_s"), "per_round": per_round}


def presets_main(a) -> None:
    out = Path(a.out)
    data_dir = str(Path(a.data_dir).resolve())
    rows = []
    for preset in a.presets:
        for nodes in a.nodes:
            rows.append(run_preset(preset, "local", nodes, a.rounds, data_dir, out))
        rows.append(run_preset(preset, "inproc", 1, a.rounds, data_dir, out))
    print("| preset | mode | nodes | rounds | round wall s | round compute s | round overhead s | command s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['preset']} | {r['mode']} | {r['nodes']} | {r['rounds']} | {r['round_wall_s']:.2f} | "
              f"{r['round_compute_s']:.2f} | {r['round_overhead_s']:.2f} | {r['command_wall_s']:.1f} |")
    if a.json:
        from corolla.util import atomic_write_json

        atomic_write_json(Path(a.json), {"command": " ".join(sys.argv), "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 943])
    ap.add_argument("--modes", nargs="+", default=["sim", "local"])
    ap.add_argument("--nodes", type=int, nargs="+", default=[4])
    ap.add_argument("--presets", nargs="+", help="per-preset mode: these presets as they are")
    ap.add_argument("--rounds", type=int, default=3, help="per-preset mode: rounds per run (at most)")
    ap.add_argument("--json", help="per-preset mode: also write the rows to this JSON file")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "overhead"))
    a = ap.parse_args()
    if a.presets:
        presets_main(a)
        return
    out = Path(a.out)
    a.nodes = a.nodes[0]
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
