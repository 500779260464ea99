"""Flower's per-round floor, before and after ``corolla supernode`` (issue 27's three targets).

Runs each target through ``corolla run`` in process and through a local SuperLink with 2
SuperNodes in four variants, one after the other on the same machine:

* ``stock``   — Flower's waits: ``--idle-poll 3 --reply-poll 0.5 --clientapp-start exec
  --pull-backoff 1`` (what ``flower-supernode`` and Flower's ServerApp do);
* ``polls``   — short SuperNode waits only: ``--idle-poll 0.05 --reply-poll 0.05 --clientapp-start
  exec --pull-backoff 1``;
* ``backoff`` — short waits and object pulls retried after 0.02 s, not 1 s (``flower_io.pulls``),
  ClientApps still a fresh interpreter each;
* ``fork``    — all of that and warm (forked) ClientApp processes: ``corolla run``'s default.

Every variant runs ``flwr run`` on the staged app folder (``launcher/fab.py``; the same FAB).

Targets: the README's main job (``fedavg-mf-ml100k`` as it is: 40 rounds, early stop), FedCIA
GF-CF (``fedcia-gfcf-ml100k``, one shot; ``gfcf-nodesum``: the same with ``gfcf-upload=node-sum``),
FedCA PMF (``fedca-pmf-ml100k``, ``--rounds`` rounds).
Per run: the command's wall time, the median round wall time over rounds 2.., the number of
rounds, the 1-minute load average before it, and whether the test metrics equal the in-process
run's. Prints a Markdown table; ``--json`` keeps the rows.

    python benchmarks/floor.py --data-dir $COROLLA_DATA --json docs/results/floor.json

It runs on whichever Flower line the interpreter has (``docs/deployment.md``, "Flower lines"); the
JSON records that Flower's version. One run per line on the same machine compares the lines.
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
VARIANTS = {
    "stock": ["--idle-poll", "3", "--reply-poll", "0.5", "--clientapp-start", "exec", "--pull-backoff", "1"],
    "polls": ["--idle-poll", "0.05", "--reply-poll", "0.05", "--clientapp-start", "exec", "--pull-backoff", "1"],
    "backoff": ["--idle-poll", "0.05", "--reply-poll", "0.05", "--clientapp-start", "exec"],
    "fork": [],
}
TARGETS = {"main": ("fedavg-mf-ml100k", []), "gfcf": ("fedcia-gfcf-ml100k", []),
           "gfcf-nodesum": ("fedcia-gfcf-ml100k", ["gfcf-upload=node-sum"]), "fedca": ("fedca-pmf-ml100k", None)}


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run(preset: str, sets: list[str], mode: str, extra: list[str], out: Path, data_dir: str) -> dict:
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--data-dir", data_dir, "--out", str(out),
           "--quiet", "--mode", mode] + (["--nodes", "2"] if mode == "local" else []) + extra
    for s in sets:
        cmd += ["--set", s]
    shutil.rmtree(out, ignore_errors=True)   # a re-run replaces the earlier one
    load = loadavg()
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, COROLLA_OFFLINE="1"))
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    later = [r["wall_s"] for r in rounds[1:]] or [r["wall_s"] for r in rounds]
    return {"command_s": round(wall, 1), "rounds": len(rounds), "median_round_s": round(statistics.median(later), 2),
            "metrics": summary["metrics"], "loadavg_1min": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=4, help="FedCA's rounds (the others run as they are)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "floor"))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    for t in args.targets:
        preset, sets = TARGETS[t]
        sets = sets if sets is not None else [f"num-rounds={args.rounds}", "patience=0"]
        ref = run(preset, sets, "inproc", [], Path(args.out, t, "inproc"), args.data_dir)
        rows.append({"target": t, "preset": preset, "variant": "inproc", **ref, "same_metrics": True})
        print(rows[-1], flush=True)
        for v in args.variants:
            r = run(preset, sets, "local", VARIANTS[v], Path(args.out, t, v), args.data_dir)
            rows.append({"target": t, "preset": preset, "variant": v, **r, "same_metrics": r["metrics"] == ref["metrics"],
                         "ratio_command": round(r["command_s"] / ref["command_s"], 2),
                         "ratio_round": round(r["median_round_s"] / ref["median_round_s"], 2)})
            print(rows[-1], flush=True)
    print("\n| target | variant | command s | median round s | rounds | × in process (command / round) | metrics = in process | load |")
    print("|---|---|---:|---:|---:|---|---|---:|")
    for r in rows:
        ratio = "–" if r["variant"] == "inproc" else f"{r['ratio_command']} / {r['ratio_round']}"
        print(f"| {r['target']} `{r['preset']}` | {r['variant']} | {r['command_s']} | {r['median_round_s']} | {r['rounds']} | {ratio} | "
              f"{'yes' if r['same_metrics'] else 'NO'} | {r['loadavg_1min']:.2f} |")
    if args.json:
        from importlib.metadata import version
        Path(args.json).write_text(json.dumps({"machine": os.uname().nodename, "cores": os.cpu_count(),
                                               "flwr": version("flwr"), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
