"""LPSFed vs FedAvg-LGCN: the authors' code, no-learning rankers under its evaluation, and Corolla
(issue 29's verdict table).

Inputs, all produced on the same machine:

* ``--authors-logs DIR``: logs of ``lpsfed_authors_run.sh`` (``lpsfed-pP-sS.log``,
  ``fedavg-pP-sS.log``), parsed with ``lpsfed_authors_log.parse``: per run the unweighted mean over
  the 4 clients of each client's best sampled test value (the code's "Final Results"); or
  ``--authors-json FILE ...``: result files that keep each run's parsed log under ``per_run``;
* ``--probe pP=FILE``: ``lpsfed_authors_probe.py`` on the same partition P (its ids and the random
  and popularity rankers under the code's evaluation);
* ``--corolla RUN_DIR ...``: Corolla runs (``summary.json``): ``metrics`` (validation-selected,
  pooled over test users) and ``metrics_paper_compat`` (``client-best-mean``: the code's aggregation),
  and the round curve from ``rounds.jsonl``; or ``--corolla-json FILE ...``: copies of their
  ``summary.json`` (the run's name is its ``--out`` folder, from the provenance), with the round
  curves from ``--corolla-curves FILE`` (``{"curves": {run: [...]}}``).

Without any input flag it reads the repository's inputs for ``--dataset`` (``REPOSITORY``): the
committed verdicts ``docs/results/lpsfed-verdict-{ml100k,gowalla}.json`` are regenerated from
``docs/results/`` alone (``tests/test_benchmarks.py`` checks it). The authors' ML-100K logs and
Corolla's run folders are not in the repository (gone); what the verdict read from them is:
``lpsfed-verdict-ml100k-authors-runs.json`` and ``lpsfed-verdict-corolla-curves.json`` (their
``source`` says where each number comes from).

Writes one JSON and prints the table as Markdown.

    python benchmarks/lpsfed_verdict.py --dataset ML-100K --json docs/results/lpsfed-verdict-ml100k.json
    python benchmarks/lpsfed_verdict.py --authors-logs LOGS --probe p0=P0.json p1=P1.json \\
        --corolla runs/lpsfed-code-ml100k-seed* runs/fedavg-lgcn-code-ml100k-seed* --json OUT.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lpsfed_authors_log import parse

METRICS = ("recall@20", "ndcg@20")
LOG = re.compile(r"(lpsfed|fedavg)-p(\d+)-s(\d+)\.log$")
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
# the inputs of each committed verdict, all in docs/results/ (in the order the verdict lists them)
REPOSITORY = {
    "ML-100K": {"authors_json": ["lpsfed-verdict-ml100k-authors-runs.json"],
                "probe": ["p0=lpsfed-authors-probe-ml100k-p0.json", "p1=lpsfed-authors-probe-ml100k-p1.json"],
                "corolla_json": ["lpsfed-code-ml100k.json", "lpsfed-code-ml100k+seed=1.json",
                                 "lpsfed-code-ml100k+seed=2.json", "fedavg-lgcn-code-ml100k.json",
                                 "fedavg-lgcn-code-ml100k+seed=1.json", "fedavg-lgcn-code-ml100k+seed=2.json"],
                "corolla_curves": "lpsfed-verdict-corolla-curves.json"},
    "Gowalla": {"authors_json": ["lpsfed-authors-gowalla.json", "lpsfed-authors-fedavg-lgcn-gowalla.json"],
                "probe": ["fresh=lpsfed-authors-probe-gowalla.json"],
                "corolla_json": ["lpsfed-code-gowalla.json", "fedavg-lgcn-code-gowalla.json"],
                "corolla_curves": "lpsfed-verdict-corolla-curves.json"},
}


def stats(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "sd": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "n": len(values)}


def corolla_curve(run: Path, metric: str = "recall@20") -> list[float]:
    """Per round, the code's aggregation so far: each client's best test value over the rounds
    up to this one, unweighted mean over clients."""
    best: dict[str, float] = {}
    out = []
    for line in (run / "rounds.jsonl").read_text().splitlines():
        r = json.loads(line)
        for c, m in (r.get("per_client") or {}).items():
            best[c] = max(best.get(c, 0.0), m[metric])
        if best:
            out.append(float(np.mean(list(best.values()))))
    return out


def run_name(summary: dict, path: Path) -> str:
    """The run folder's name: the ``--out`` of the command recorded in the summary's provenance."""
    cmd = ((summary.get("provenance") or {}).get("command")) or ""
    parts = cmd.split() if isinstance(cmd, str) else list(cmd)
    if "--out" in parts and parts.index("--out") + 1 < len(parts):
        return Path(parts[parts.index("--out") + 1]).name
    return path.stem


def plot(au_curves: dict[str, list[list[float]]], co_curves: dict[str, list[list[float]]], probes: dict, path: Path,
         dataset: str = "ML-100K") -> None:
    """Both codes' curves in the code's aggregation (running per-client best, mean over clients),
    mean over runs, with the no-learning popularity ranker under the authors' evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    for label, curves in au_curves.items():
        n = min(len(c) for c in curves)
        ax.plot(range(1, n + 1), np.mean([c[:n] for c in curves], 0), label=f"{label} (authors' code, {len(curves)} runs)")
    for label, curves in co_curves.items():
        n = min(len(c) for c in curves)
        ax.plot(range(1, n + 1), np.mean([c[:n] for c in curves], 0), "--", label=f"{label} (Corolla, {len(curves)} seeds)")
    for part, pr in sorted(probes.items()):
        pop = pr["summary"]["popularity"]["recall@20"]["mean"]
        ax.axhline(pop, color="grey", linestyle=":", linewidth=1)
        ax.text(1, pop, f" popularity, no learning, authors' evaluation ({part})", fontsize=7, va="bottom", color="grey")
        rnd = pr["summary"]["random"]["recall@20"]["mean"]
        ax.axhline(rnd, color="grey", linestyle="-.", linewidth=0.8)
        ax.text(1, rnd, f" random scores, authors' evaluation ({part})", fontsize=7, va="bottom", color="grey")
    ax.set_xlabel("round (5 local epochs)")
    ax.set_ylabel("Recall@20: per-client best so far, mean over clients")
    ax.set_title(f"LPSFed vs FedAvg-LGCN on {dataset}: the authors' code and Corolla", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def authors(logs: Path | None, files: list[Path] = ()) -> dict:
    """The authors' runs from their logs, or from ``lpsfed_authors_log.py`` result files (which keep
    each run's parsed log under ``per_run``)."""
    parsed = [(f.name, parse(f)) for f in sorted(logs.glob("*.log"))] if logs else []
    for f in files:
        parsed += [(r["log"], r) for r in json.loads(f.read_text())["per_run"]]
    runs: dict[str, dict[str, list]] = {}
    for name, r in parsed:
        m = LOG.search(name)
        if not m:
            continue
        if not r.get("complete"):
            raise SystemExit(f"{name}: the run did not finish (no '=== Final Results ===')")
        runs.setdefault(m.group(1), {}).setdefault(f"p{m.group(2)}", []).append(
            {"seed": int(m.group(3)), **r["client_mean"],
             # per aggregation (= round): the mean over clients of the code's running maxima
             "curve_recall@20": [c["max_test_recall"] for c in r["curve"]]})
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors-logs", type=Path, help="a directory of lpsfed_authors_run.sh logs")
    ap.add_argument("--authors-json", type=Path, nargs="*", default=[],
                    help="or lpsfed_authors_log.py result files (docs/results/lpsfed-authors-*.json)")
    ap.add_argument("--dataset", default="ML-100K", choices=sorted(REPOSITORY),
                    help="the plot's title, and whose repository inputs to read when no input is given")
    ap.add_argument("--probe", nargs="+", default=[], help="pP=FILE from lpsfed_authors_probe.py")
    ap.add_argument("--corolla", nargs="*", type=Path, default=[])
    ap.add_argument("--corolla-json", nargs="*", type=Path, default=[],
                    help="or copies of Corolla runs' summary.json (docs/results/...), with --corolla-curves")
    ap.add_argument("--corolla-curves", type=Path,
                    help="the round curves of the --corolla-json runs: {\"curves\": {run: [...]}}")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--plot", type=Path, help="PNG of both codes' round curves")
    a = ap.parse_args(argv)
    if not (a.authors_logs or a.authors_json or a.probe or a.corolla or a.corolla_json):
        repo = REPOSITORY[a.dataset]   # the committed verdict's inputs, all in docs/results/
        a.authors_json = [RESULTS / f for f in repo["authors_json"]]
        a.probe = [f"{item.partition('=')[0]}={RESULTS / item.partition('=')[2]}" for item in repo["probe"]]
        a.corolla_json = [RESULTS / f for f in repo["corolla_json"]]
        a.corolla_curves = RESULTS / repo["corolla_curves"]
    if not a.authors_logs and not a.authors_json:
        ap.error("give --authors-logs or --authors-json (or no input at all: the repository's)")
    if a.corolla_json and not a.corolla_curves:
        ap.error("--corolla-json: expected --corolla-curves FILE with the runs' round curves")
    au = authors(a.authors_logs, a.authors_json)
    probes = {}
    for item in a.probe:
        part, _, path = item.partition("=")
        if not part or not path:
            ap.error(f"--probe {item}: expected pP=FILE")
        probes[part] = json.loads(Path(path).read_text())
    rows = []
    for name, label in (("lpsfed", "LPSFed (authors' code)"), ("fedavg", "FedAvg-LGCN (authors' code: BPR, ρ̄ = 1)")):
        for part, rs in sorted(au.get(name, {}).items()):
            rows.append({"what": label, "partition": part, **{k: stats([r[k] for r in rs]) for k in METRICS}})
    for part, pr in sorted(probes.items()):
        for scorer, label in (("popularity", "popularity, no learning (authors' evaluation)"),
                              ("random", "random scores (authors' evaluation)")):
            rs = [r for r in pr["runs"] if r["scorer"] == scorer]
            rows.append({"what": label, "partition": part, **{k: stats([r[k] for r in rs]) for k in METRICS}})
    corolla: dict[str, list] = {}
    curves = json.loads(a.corolla_curves.read_text())["curves"] if a.corolla_curves else {}
    runs = [(json.loads((d / "summary.json").read_text()), d.name, d) for d in a.corolla]
    for f in a.corolla_json:
        s = json.loads(Path(f).read_text())
        runs.append((s, run_name(s, Path(f)), None))
    for s, name, d in runs:
        if d is None and name not in curves:
            ap.error(f"--corolla-curves {a.corolla_curves}: no curve for run {name!r}")
        corolla.setdefault(s["preset"], []).append({"run": name, "seed": s["config"]["seed"] if "config" in s else None,
                                                    "metrics": {k: s["metrics"][k] for k in METRICS},
                                                    "compat": {k: s["metrics_paper_compat"]["metrics"][k] for k in METRICS},
                                                    "wall_s": s.get("wall_s"),
                                                    "curve_recall@20": corolla_curve(d) if d is not None else curves[name]})
    for preset, rs in sorted(corolla.items()):
        rows.append({"what": f"Corolla {preset}, client-best-mean (the code's aggregation)", "partition": "Corolla's",
                     **{k: stats([r["compat"][k] for r in rs]) for k in METRICS}})
        rows.append({"what": f"Corolla {preset}, validation-selected, pooled", "partition": "Corolla's",
                     **{k: stats([r["metrics"][k] for r in rs]) for k in METRICS}})
    out = {"command": " ".join(["python", "benchmarks/lpsfed_verdict.py", *(argv or sys.argv[1:])]),
           "authors_runs": au, "probes": probes, "corolla_runs": corolla, "table": rows}
    a.json.write_text(json.dumps(out, indent=1))
    if a.plot:
        names = {"lpsfed": "LPSFed", "fedavg": "FedAvg-LGCN"}
        plot({names[k]: [r["curve_recall@20"] for rs in v.values() for r in rs] for k, v in au.items()},
             {p: [r["curve_recall@20"] for r in rs] for p, rs in corolla.items()}, probes, a.plot, a.dataset)
    print("| what | partition | runs | Recall@20 | NDCG@20 |\n|---|---|---:|---|---|")
    for r in rows:
        print(f"| {r['what']} | {r['partition']} | {r['recall@20']['n']} | "
              + " | ".join(f"{r[k]['mean']:.4f} ± {r[k]['sd']:.4f}" for k in METRICS) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
