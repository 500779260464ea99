"""The client state read cache (``corolla/state_cache.py``) on and off, on the same run.

Runs ``corolla run ARGS`` (after ``--``; each run gets its own ``--out``) ``--repeats`` times with
``COROLLA_STATE_CACHE_MB=0`` and with the cache's budget, alternately, one run at a time, and
reports for each run the per-round wall seconds (``rounds.jsonl``), the process's user and system
CPU seconds and its peak resident memory (``os.wait4``), and whether its per-round metrics equal
the first run's (they must: the cache returns what the disk holds). Writes the JSON to ``--out``.

Usage::

    python benchmarks/state_cache.py --out docs/results/state-cache-P.json [--repeats 2] [--budget-mb 1024] \\
        -- --preset P --set num-rounds=4 --mode inproc --nodes 1 --data-dir $COROLLA_DATA
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one_run(args: list[str], budget_mb: float, out: Path) -> dict:
    env = {**os.environ, "COROLLA_STATE_CACHE_MB": str(budget_mb)}
    cmd = [sys.executable, "-m", "launcher.cli", "run", *args, "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"corolla run failed (cache {budget_mb} MB): {' '.join(cmd)}\n{err[-2000:]}")
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    walls = [r["wall_s"] for r in rounds]
    return {"cache_mb": budget_mb, "round_wall_s": walls,
            "median_round_s": statistics.median(walls[1:-1] if len(walls) > 2 else walls),
            "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
            "metrics": [r.get("metrics") for r in rounds]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-mb", type=float, default=1024)
    ap.add_argument("run", nargs=argparse.REMAINDER, help="-- then corolla run arguments")
    a = ap.parse_args(argv)
    rest = a.run[1:] if a.run[:1] == ["--"] else a.run
    if "--preset" not in rest or "--out" in rest:
        raise SystemExit("after --: expected corolla run arguments with --preset P and without --out")
    if a.repeats < 1 or a.budget_mb <= 0:
        raise SystemExit(f"--repeats >= 1 and --budget-mb > 0 expected, got {a.repeats} and {a.budget_mb}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="state-cache-") as tmp:
        for i in range(a.repeats):
            for mb in (0, a.budget_mb):
                runs.append({"repeat": i, **one_run(rest, mb, Path(tmp) / f"r{i}-{mb:g}")})
                print(json.dumps({k: v for k, v in runs[-1].items() if k != "metrics"}), flush=True)
    first = runs[0]["metrics"]
    for r in runs:
        r["metrics_equal_first"] = r.pop("metrics") == first

    def med(key, mb):
        return statistics.median(r[key] for r in runs if r["cache_mb"] == mb)

    summary = {k: {"off": med(k, 0), "on": med(k, a.budget_mb)} for k in ("median_round_s", "user_s", "peak_rss_mb")}
    doc = {"command": "python benchmarks/state_cache.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "runs": runs, "summary": summary, "all_metrics_equal": all(r["metrics_equal_first"] for r in runs)}
    from corolla.util import atomic_write_text
    atomic_write_text(a.out, json.dumps(doc, indent=1, sort_keys=True))
    print(json.dumps(summary), "metrics equal:", doc["all_metrics_equal"])
    if not doc["all_metrics_equal"]:
        raise SystemExit("the runs' metrics differ: the cache changed a result")


if __name__ == "__main__":
    main()
