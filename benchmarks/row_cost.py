"""The measured cost of a leaderboard row that is too long to run here: a few rounds of its preset.

For each preset: ``corolla run --preset P --mode inproc --nodes 1 --set num-rounds=K --set
patience=0`` (every round evaluated, as the preset evaluates), then the median wall time of rounds
2..K (round 1 carries the data loading and the first imports; with ``--rounds 1``, for presets
whose one round takes minutes, round 1 itself), the preset's own round budget and
early-stopping patience, and the estimate ``median x budget`` (an upper bound where the preset
stops early). The 1-minute load average before each run is kept: on a shared machine the times
are longer. Each run's folder (its node state: gigabytes at 943 clients) is removed once read.
Prints a Markdown table; ``--json`` keeps the rows.

    python benchmarks/row_cost.py --data-dir $COROLLA_DATA --rounds 3 \\
        --presets fedcia-lightgcn-ml100k fedcia-mf-ml100k-943 --json docs/results/row-cost.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def budget(preset: str) -> tuple[int, int]:
    """The preset's ``num-rounds`` and ``patience`` (as resolved, defaults included)."""
    from corolla.config import resolve
    cfg = resolve(preset, {})
    return int(cfg["num-rounds"]), int(cfg.get("patience", 0) or 0)


def measure(preset: str, rounds: int, data_dir: str, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--mode", "inproc", "--nodes", "1",
           "--data-dir", data_dir, "--out", str(out), "--quiet", "--set", f"num-rounds={rounds}", "--set", "patience=0"]
    load = float(Path("/proc/loadavg").read_text().split()[0])
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, COROLLA_OFFLINE="1"))
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"row_cost: {preset} failed:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    per = [json.loads(x)["wall_s"] for x in (out / "rounds.jsonl").read_text().splitlines()]
    shutil.rmtree(out, ignore_errors=True)   # its node state: gigabytes at 943 clients (28 GB for six presets)
    later = per[1:] or per
    n, patience = budget(preset)
    med = statistics.median(later)
    return {"preset": preset, "rounds_run": len(per), "command_s": round(wall, 1), "round_s": [round(x, 2) for x in per],
            "median_round_s": round(med, 2), "num_rounds": n, "patience": patience,
            "estimate_h": round(med * n / 3600, 2), "loadavg_1min": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--presets", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "row_cost"))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: at least 1")
    rows = []
    for preset in args.presets:
        rows.append(measure(preset, args.rounds, args.data_dir, Path(args.out) / preset))
        print(rows[-1], flush=True)
    print("\n| preset | median round s (rounds 2..) | budget (patience) | estimate, full budget | load |")
    print("|---|---:|---|---:|---:|")
    for r in rows:
        pat = f" (patience {r['patience']})" if r["patience"] else ""
        print(f"| {r['preset']} | {r['median_round_s']} | {r['num_rounds']}{pat} | {r['estimate_h']} h | {r['loadavg_1min']:.2f} |")
    if args.json:
        from importlib.metadata import version
        Path(args.json).write_text(json.dumps({"machine": os.uname().nodename, "cores": os.cpu_count(),
                                               "flwr": version("flwr"), "rounds": args.rounds, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
