"""Run presets with overrides through ``corolla run`` and tabulate their summaries.

Each run is ``corolla run --preset P [--set k=v ...] --mode MODE --out RUNS/<P>+<k=v>...``; a run
whose ``summary.json`` already says ``completed`` and whose recorded configuration equals what the
preset and overrides resolve to now is not run again (a preset edited since is re-run). The summaries are copied to
``docs/results/<P>+<k=v>....json`` with ``--record`` (the command in each file's provenance made
portable: ``corolla run ... --data-dir $COROLLA_DATA --out runs/<name>``; ``--note`` sets its
``provenance.note``, the sentence that says why the run was made) and a markdown table is printed: the
validation-selected test metrics, the paper-compatible ones (for FedCA: the best-test round,
ties against the positive) and the paper's numbers.

Usage (the FedCA tables of ``docs/results.md``)::

    python benchmarks/sweep.py --data-dir $COROLLA_DATA --mode inproc --record \\
        fedca-pmf-ml100k fedavg-pmf-ml100k fcf-pmf-ml100k fedatt-pmf-ml100k local-pmf-ml100k \\
        pfedrec-ml100k
    python benchmarks/sweep.py --data-dir $COROLLA_DATA --mode inproc --record \\
        --set num-rounds=50 --vary fedca-rho=0.5,0.6,0.7,0.8,0.9,1.0 fedca-pmf-ml100k

``--vary key=v1,v2`` runs every preset once per value; ``--set`` applies to every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from result_record import record_summary  # noqa: E402


def run_name(preset: str, overrides: list[str]) -> str:
    return "+".join([preset] + overrides)


def reusable(summary: Path, preset: str, overrides: list[str]) -> bool:
    """True when ``summary`` is a completed run of exactly ``preset`` with ``overrides`` as they resolve now."""
    if not summary.exists():
        return False
    done = json.loads(summary.read_text())
    if done.get("status") != "completed":
        return False
    from corolla.config import parse_overrides, resolve
    return done.get("config") == resolve(preset, parse_overrides(overrides))


def run_one(preset: str, overrides: list[str], args) -> dict:
    out = Path(args.runs) / run_name(preset, overrides)
    summary = out / "summary.json"
    if reusable(summary, preset, overrides):
        return json.loads(summary.read_text())
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--mode", args.mode,
           "--nodes", str(args.nodes), "--data-dir", args.data_dir, "--out", str(out)]
    for o in overrides:
        cmd += ["--set", o]
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, COROLLA_OFFLINE=os.environ.get("COROLLA_OFFLINE", "1"))
    subprocess.run(cmd, check=True, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL)
    return json.loads(summary.read_text())


def fmt(m: dict, keys: list[str]) -> str:
    return " / ".join(f"{m[k]:.4f}" if k in m else "–" for k in keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets", nargs="+")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--mode", default="inproc", choices=("inproc", "sim", "local"))
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--vary", metavar="KEY=V1,V2,...")
    ap.add_argument("--metrics", default="hr@10,ndcg@10")
    ap.add_argument("--runs", default=str(ROOT / "runs"))
    ap.add_argument("--record", action="store_true", help="copy each summary to docs/results/")
    ap.add_argument("--note", help="with --record: the provenance note every recorded file carries")
    args = ap.parse_args()
    if args.note is not None and not args.record:
        ap.error("--note is written into recorded result files; give --record with it")
    if args.note is not None and not args.note.strip():
        ap.error("--note is empty; give the sentence the result files should carry, or leave it out")
    keys = args.metrics.split(",")
    variants: list[list[str]] = [[]]
    if args.vary:
        k, _, vals = args.vary.partition("=")
        variants = [[f"{k}={v}"] for v in vals.split(",")]
    print(f"| run | rounds (selected) | valid-selected {' / '.join(keys)} | paper-compatible | paper | wall s |")
    print("|---|---|---|---|---|---|")
    rows = []
    for preset in args.presets:
        for var in variants:
            overrides = list(args.set) + var
            s = run_one(preset, overrides, args)
            if args.record:
                dst = ROOT / "docs" / "results" / f"{run_name(preset, overrides)}.json"
                record_summary(s, dst, args.note)
            compat = s.get("metrics_paper_compat", {})
            paper = {k: v for k, v in s.get("paper", {}).items() if k in keys}
            csel = compat.get("selection", {})
            compat_round = f", {csel['split']}-compat {csel['round']}" if csel else ""
            row = (f"| `{run_name(preset, overrides)}` | {s['rounds_completed']} ({s['selection']['round']}"
                   f"{compat_round}) | "
                   f"{fmt(s['metrics'], keys)} | {fmt(compat.get('metrics', {}), keys)} | "
                   f"{fmt(paper, keys) if paper else '–'} | {s['wall_s']:.0f} |")
            rows.append(row)
            print(row, flush=True)


if __name__ == "__main__":
    main()
