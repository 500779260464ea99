"""Mean ± standard deviation over seeds of recorded summaries, one markdown row per group.

Each group is a label and a glob of ``docs/results/*.json`` summaries (one per seed; several globs
joined by ``|``, their files' union, for seed 0's file named without ``+seed=0``); the row
gives the number of runs, the validation-selected test metrics as mean ± sample standard
deviation (ddof = 1), the rounds run, the wall time and the bytes per round. Used for the
Dist-FedAvg tables of ``docs/results.md``::

    python benchmarks/seeds_table.py --metrics hr@10,ndcg@10 \\
        "Dist-FedAvg=docs/results/distfedavg-ml100k+seed=*.json" \\
        "FedAvg=docs/results/distfedavg-ml100k+method=fedavg+seed=*.json"
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import sys


def mean_std(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    if not xs:
        raise ValueError("mean_std: no values")
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def row(label: str, files: list[str], metrics: list[str]) -> str:
    runs = [json.load(open(f)) for f in files]
    bad = [f for f, s in zip(files, runs) if s.get("status") != "completed"]
    if bad:
        raise SystemExit(f"seeds_table: not completed runs: {bad}")
    cells = [label, str(len(runs))]
    for k in metrics:
        missing = [f for f, s in zip(files, runs) if k not in s["metrics"]]
        if missing:
            raise SystemExit(f"seeds_table: metric {k!r} not in {missing}")
        m, sd = mean_std([s["metrics"][k] for s in runs])
        cells.append(f"{m:.4f} ± {sd:.4f}")
    rounds = [s["rounds_completed"] for s in runs]
    walls = [s.get("wall_s", float("nan")) for s in runs]
    per_round = [(s["bytes_up"] / s["rounds_completed"], s["bytes_down"] / s["rounds_completed"]) for s in runs]
    cells.append(f"{min(rounds)}–{max(rounds)}")
    cells.append(f"{sum(walls) / len(walls):.0f}")
    cells.append(f"{sum(u for u, _ in per_round) / len(runs) / 1e6:.1f} / {sum(d for _, d in per_round) / len(runs) / 1e6:.1f}")
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("groups", nargs="+", help="LABEL=GLOB[|GLOB...] of summary JSON files, one per seed")
    ap.add_argument("--metrics", default="hr@10,ndcg@10")
    a = ap.parse_args(argv)
    metrics = [m.strip() for m in a.metrics.split(",") if m.strip()]
    print("| method | runs | " + " | ".join(metrics) + " | rounds | wall s (mean) | MB up / down per round |")
    print("|---|---|" + "---|" * len(metrics) + "---|---|---|")
    for g in a.groups:
        label, sep, pattern = g.partition("=")
        if not sep or not pattern:
            raise SystemExit(f"seeds_table: group {g!r}: expected LABEL=GLOB")
        files = sorted({f for p in pattern.split("|") for f in glob.glob(p)})
        if not files:
            print(f"| {label} | 0 | " + " | ".join("—" for _ in metrics) + " | — | — | — |")
            continue
        print(row(label, files, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
