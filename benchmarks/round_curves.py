"""Per-round series of finished runs, written as one result file a write-up can cite.

A run's ``summary.json`` keeps the selected round's metrics; what a round measured on the way
(a strategy's phase metrics such as pFedGraph's ``train.self-weight``, the paper-compatible
``compat`` block, the validation metrics) is in its ``rounds.jsonl``, which stays in the run
folder and is lost with the machine. This reads the chosen series of one or more run folders and
writes them, with each run's command from its summary's provenance, atomically to one JSON:

    {"what": ..., "series": [...], "runs": {LABEL: {"command", "rounds_completed", "curve":
     [{"round": r, SERIES: value, ...}, ...]}}}

A series is a dotted path into a round's record (``compat.hr@10``, ``train.self-weight``,
``valid.f1@10``, ``wall_s``); a round without it has no entry for it (a round that was not
evaluated), and a path that no round of a run has is an error naming the run and the path.
``--every K`` keeps every K-th round (and the last).

Usage::

    python benchmarks/round_curves.py --series train.self-weight,compat.hr@10,compat.ndcg@10 \\
        --what "pFedGraph's self-weight per round" --out docs/results/X.json \\
        LABEL=RUN_DIR [LABEL=RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, Path(__file__).resolve().parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from corolla.util import atomic_write_json  # noqa: E402
from result_record import portable  # noqa: E402  (one normaliser, shared with sweep --record)


def lookup(record: dict, path: str):
    """The number at ``path`` in ``record``: a top-level key (``wall_s``) or, split at the first
    dot, a key inside one block (``compat.hr@10``); None where it is absent or not a number."""
    head, _, rest = path.partition(".")
    if not rest:
        v = record.get(head)
    else:
        sub = record.get(head)
        v = sub.get(rest) if isinstance(sub, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def curve(run_dir: Path, series: list[str], every: int = 1) -> list[dict]:
    path = run_dir / "rounds.jsonl"
    if not path.exists():
        raise SystemExit(f"round_curves: {run_dir}: expected a run folder with rounds.jsonl; none there")
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        row = {"round": int(rec["round"])}
        for s in series:
            v = lookup(rec, s)
            if v is not None:
                row[s] = round(v, 6)
        rows.append(row)
    rows.sort(key=lambda r: r["round"])
    for s in series:
        if not any(s in r for r in rows):
            raise SystemExit(f"round_curves: {run_dir}: no round has the series {s!r}")
    if every > 1 and rows:
        rows = [r for i, r in enumerate(rows) if i % every == every - 1 or i == len(rows) - 1]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR")
    ap.add_argument("--series", required=True, help="comma-separated dotted paths into a round's record")
    ap.add_argument("--what", required=True, help="one sentence: what the file holds and where it is discussed")
    ap.add_argument("--out", required=True)
    ap.add_argument("--every", type=int, default=1)
    args = ap.parse_args(argv)
    if args.every < 1:
        ap.error(f"--every: expected a positive number of rounds, got {args.every}")
    series = [s.strip() for s in args.series.split(",") if s.strip()]
    if not series:
        ap.error("--series: expected at least one dotted path, such as compat.hr@10")
    runs = {}
    for item in args.runs:
        label, sep, d = item.partition("=")
        if not sep or not label or not d:
            ap.error(f"run {item!r}: expected LABEL=RUN_DIR")
        run_dir = Path(d)
        summary = run_dir / "summary.json"
        done = json.loads(summary.read_text()) if summary.exists() else {}
        runs[label] = {"command": portable(done.get("provenance", {}).get("command")),
                       "rounds_completed": done.get("rounds_completed"),
                       "curve": curve(run_dir, series, args.every)}
    atomic_write_json(args.out, {"what": args.what, "series": series, "runs": runs})
    print(json.dumps({label: {"rounds": len(r["curve"])} for label, r in runs.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
