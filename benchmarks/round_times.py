"""Per-round wall time of a finished run (from its ``rounds.jsonl``).

Prints the median, mean, minimum and maximum round time, the same per phase, and the sum —
the numbers ``docs/results.md`` compares with a reference implementation's time per round.

Usage::

    python benchmarks/round_times.py RUN_DIR [--reference SECONDS]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--reference", type=float, help="a reference time per round to compare with")
    args = ap.parse_args()
    rounds = [json.loads(x) for x in (Path(args.run_dir) / "rounds.jsonl").read_text().splitlines()]
    if not rounds:
        raise SystemExit(f"{args.run_dir}: no rounds recorded")
    walls = [r["wall_s"] for r in rounds]
    out = {"rounds": len(rounds), "median_s": statistics.median(walls), "mean_s": statistics.fmean(walls),
           "min_s": min(walls), "max_s": max(walls), "total_s": sum(walls), "phases": {}}
    for name in sorted({p["name"] for r in rounds for p in r["phases"]}):
        ws = [p["wall_s"] for r in rounds for p in r["phases"] if p["name"] == name]
        out["phases"][name] = {"median_s": statistics.median(ws), "mean_s": statistics.fmean(ws)}
    if args.reference:
        out["reference_s"] = args.reference
        out["median_over_reference"] = out["median_s"] / args.reference
    summary = Path(args.run_dir) / "summary.json"
    if summary.exists():
        out["run_wall_s"] = json.loads(summary.read_text())["wall_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
