"""Per-round wall time of a finished run (from its ``rounds.jsonl``).

Prints the median, mean, minimum and maximum round time, the same per phase, and the sum —
the numbers ``docs/results.md`` compares with a reference implementation's time per round.

``--reference SECONDS`` compares with a fixed time per round; ``--reference-json FILE`` with a
reference run's per-round log: a JSON object whose ``rounds`` list holds ``{"round": r,
"round_s": seconds, ...}`` (what ``benchmarks/fedca_authors.md`` has the authors' FedCA code
write). Both medians are then taken over the rounds the two runs have in common.

Usage::

    python benchmarks/round_times.py RUN_DIR [--reference SECONDS | --reference-json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from compare_curves import reference  # same directory: on sys.path when run as a script


def reference_rounds(path: Path) -> dict[int, float]:
    """``{round: seconds}`` from a reference run's JSON log (``compare_curves.reference``)."""
    return {r: row["round_s"] for r, row in reference(path, keys=("round_s",)).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ref = ap.add_mutually_exclusive_group()
    ref.add_argument("--reference", type=float, help="a reference time per round to compare with")
    ref.add_argument("--reference-json", help="a reference run's per-round log (see above)")
    args = ap.parse_args()
    rounds = [json.loads(x) for x in (Path(args.run_dir) / "rounds.jsonl").read_text().splitlines()]
    if not rounds:
        raise SystemExit(f"{args.run_dir}: no rounds recorded")
    if args.reference_json:
        ref_rounds = reference_rounds(Path(args.reference_json))
        common = sorted(set(ref_rounds) & {r["round"] for r in rounds})
        if not common:
            raise SystemExit(f"{args.reference_json}: no round in common with {args.run_dir}")
        rounds = [r for r in rounds if r["round"] in common]
        args.reference = statistics.median(ref_rounds[r] for r in common)
    walls = [r["wall_s"] for r in rounds]
    out = {"rounds": len(rounds), "median_s": statistics.median(walls), "mean_s": statistics.fmean(walls),
           "min_s": min(walls), "max_s": max(walls), "total_s": sum(walls), "phases": {}}
    for name in sorted({p["name"] for r in rounds for p in r["phases"]}):
        ws = [p["wall_s"] for r in rounds for p in r["phases"] if p["name"] == name]
        out["phases"][name] = {"median_s": statistics.median(ws), "mean_s": statistics.fmean(ws)}
    if args.reference is not None:
        out["reference_s"] = args.reference
        out["median_over_reference"] = out["median_s"] / args.reference
        if args.reference_json:
            out["reference_json"] = args.reference_json
    summary = Path(args.run_dir) / "summary.json"
    if summary.exists():
        out["run_wall_s"] = json.loads(summary.read_text())["wall_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
