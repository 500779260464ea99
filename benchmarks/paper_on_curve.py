"""Does a run's test curve pass through the paper's numbers? One check for every leaderboard miss.

A row that misses the paper by more than the tolerance was read at one round (the round its
selection rule picked). If at some *other* round of the same run every metric of the table lies
within the tolerance of the paper's, the method and protocol can give the paper's numbers and the
difference is where the run was read (the round budget, the early stop or the selection rule);
if no round does, the round and the selection are ruled out as the explanation.

For each leaderboard row whose status is *level only* with some |Δ| > tolerance or *not
reproduced*, and for each of its result files whose run directory (the ``--out`` of the file's
command) is on this machine with its ``rounds.jsonl``: per evaluated round, the largest relative
difference to the paper over the table's metrics (the table's ``source``: ``compat`` reads the
rounds' paper-compatible ``compat`` block, ``unweighted_mean`` their mean over clients, else
``metrics``); it reports the closest round, every
round within the tolerance, and the round the result was read at.

Usage::

    python benchmarks/paper_on_curve.py [--runs-dir runs] [--json docs/results/paper-on-curve.json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corolla.report.board import build  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_dir_of(result: dict, runs_dir: Path, stem: str = "") -> Path | None:
    """The run directory a result file came from: its command's ``--out`` (or ``--resume``);
    for a file written before results carried their command, ``runs_dir/<the file's stem>``."""
    cmd = result.get("provenance", {}).get("command", "")
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = []
    for flag in ("--out", "--resume"):
        if flag in words and words.index(flag) + 1 < len(words):
            out = Path(words[words.index(flag) + 1])
            return out if out.is_absolute() else runs_dir.parent / out
    return runs_dir / stem if stem else None


def read_rounds(run: Path) -> list[dict]:
    """Every record of ``run/rounds.jsonl`` (read once per run)."""
    return [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines() if line.strip()]


def table_block(r: dict, source: str) -> dict | None:
    """A round's test metrics as the table reads them: ``compat`` its paper-compatible block (the
    plain one where the round has none), ``unweighted_mean`` the mean over clients (LPSFed's
    tables; none where the round lacks it: the weighted block is not that number), else ``metrics``."""
    if source == "unweighted_mean":
        return r.get("unweighted_mean")
    if source == "compat" and r.get("compat"):
        return r["compat"]
    return r.get("metrics")


def curve(rounds: list[dict], source: str, metrics: list[str]) -> list[tuple[int, dict[str, float]]]:
    """(round, {metric: test value}) for every evaluated round."""
    out = []
    for r in rounds:
        block = table_block(r, source)
        if block and all(k in block for k in metrics):
            out.append((int(r["round"]), {k: float(block[k]) for k in metrics}))
    return out


def largest_gap(values: dict[str, float], paper: dict[str, float]) -> float:
    """max over the metrics of |ours / paper − 1| (signed: the one of largest magnitude)."""
    gaps = [values[k] / p - 1.0 for k, p in paper.items() if p]
    return max(gaps, key=abs)


def replay_patience(rounds: list[dict], source: str, key: str, tie: str, patience: int,
                    metrics: list[str]) -> dict | None:
    """The early stop with ``patience`` replayed on ``rounds`` (see the module's docstring):
    {"stop_round", "selected_round", "values"}; None when no round has the validation metric."""
    vblock = "valid_compat" if source == "compat" else "valid"
    best, best_v, stop = None, float("-inf"), None
    for h in rounds:
        v = (h.get(vblock) or h["valid"]).get(key)
        if v is None:
            continue
        if v > best_v or (tie == "last" and v == best_v):
            best, best_v = h, v
        elif patience > 0 and best is not None and h["round"] - best["round"] >= patience:
            stop = h["round"]
            break
    if best is None:
        return None
    block = table_block(best, source) or {}
    return {"stop_round": stop if stop is not None else rounds[-1]["round"], "stopped": stop is not None,
            "selected_round": best["round"], "values": {k: float(block[k]) for k in metrics if k in block}}


def read_round(result: dict, source: str) -> int | None:
    """The round the leaderboard's numbers come from: the paper-compatible selection's for a
    ``compat`` table whose file has one (FedCA's best test round, say), else the run's selection."""
    compat = result.get("metrics_paper_compat", {}).get("selection", {})
    if source == "compat" and compat.get("round") is not None:
        return compat["round"]
    return result.get("selection", {}).get("round")


def check_row(row, source: str, runs_dir: Path, tol: float, patience: int = 0) -> list[dict]:
    paper = {k: v for k, v in zip(row.metrics, row.paper_values) if v}
    out = []
    for res in row.ours:
        run = run_dir_of(res.raw, runs_dir, res.path.stem)
        entry = {"table": row.table, "dataset": row.dataset, "method": row.method,
                 "result": res.path.name, "paper": paper,
                 "read_round": read_round(res.raw, source),
                 "read_gap": largest_gap({k: res.metrics[k] for k in paper}, paper)}
        if run is None or not (run / "rounds.jsonl").exists():
            entry["run"] = None
            out.append(entry)
            continue
        rounds = read_rounds(run)
        pts = curve(rounds, source, list(paper))
        gaps = [(rnd, largest_gap(v, paper), v) for rnd, v in pts]
        best = min(gaps, key=lambda g: abs(g[1]))
        entry.update({"run": str(run.relative_to(runs_dir.parent)) if run.is_relative_to(runs_dir.parent) else str(run),
                      "rounds": len(pts), "last_round": pts[-1][0],
                      "closest_round": best[0], "closest_gap": best[1], "closest_values": best[2],
                      "rounds_within": [g[0] for g in gaps if abs(g[1]) <= tol]})
        if patience > 0:
            cfg = res.raw.get("config", {})
            rep = replay_patience([r for r in rounds if r.get("valid")], source, cfg.get("select-metric", row.metrics[0]),
                                  cfg.get("select-tie", "first"), patience, list(paper))
            if rep is not None:
                rep["gap"] = largest_gap(rep["values"], paper)
                entry["patience"] = {"patience": patience, **rep}
        out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "runs", help="where the run directories are (default runs/)")
    ap.add_argument("--catalogue", type=Path, default=ROOT / "corolla/report/paper_tables.toml")
    ap.add_argument("--results", type=Path, default=ROOT / "docs/results")
    ap.add_argument("--patience", type=int, default=0, help="also replay an early stop with this patience (0: no)")
    ap.add_argument("--json", type=Path, help="write the checks here")
    a = ap.parse_args(argv)
    doc = tomllib.loads(a.catalogue.read_text())
    tol = float(doc.get("report", {}).get("tolerance", 0.05))
    sources = {t["id"]: t.get("source", "metrics") for t in doc.get("table", [])}
    checks = []
    for board in build(a.catalogue, a.results):
        for row in board.rows:
            if not row.ours or row.delta is None or abs(row.delta) <= tol:
                continue
            checks += check_row(row, sources[row.table], a.runs_dir.resolve(), tol, a.patience)
    for c in checks:
        where = f"{c['table']} {c['dataset']} {c['method']} ({c['result']})"
        if c.get("run") is None:
            print(f"{where}: run directory not on this machine")
            continue
        within = c["rounds_within"]
        print(f"{where}: read at round {c['read_round']} ({c['read_gap']:+.1%}); closest round "
              f"{c['closest_round']} of {c['last_round']} ({c['closest_gap']:+.1%}); "
              + (f"within {tol:.0%} at rounds {within[0]}..{within[-1]} ({len(within)} rounds)" if within
                 else f"no round within {tol:.0%}")
              + (f"; patience {a.patience}: stop after round {c['patience']['stop_round']}, selected round "
                 f"{c['patience']['selected_round']} ({c['patience']['gap']:+.1%})" if "patience" in c else ""))
    if a.json:
        tmp = a.json.with_suffix(".tmp")
        tmp.write_text(json.dumps({"tolerance": tol, "command": "python benchmarks/paper_on_curve.py"
                                   + (f" --patience {a.patience}" if a.patience else "") + " --json " + str(a.json),
                                   "checks": checks}, indent=1))
        tmp.replace(a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
