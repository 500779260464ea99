"""``corolla report``: everything the report writes, from its inputs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from corolla.keys import ConfigError
from corolla.report import render
from corolla.report.board import build, check_sections
from corolla.report.sources import read_run

ROOT = Path(__file__).resolve().parents[2]


def make(inputs: list[str], out: Path, markdown: Path | None = None, readme: Path | None = None,
         results_dir: Path | None = None, catalogue: Path | None = None, root: Path = ROOT) -> dict:
    """``inputs``: run directories and result files (a page each) and/or a directory of result
    files (the leaderboards' source; default ``docs/results``). Returns what was written and how
    long it took."""
    t0 = time.perf_counter()
    runs = []
    for item in inputs:
        p = Path(item).expanduser()
        if (p / "summary.json").is_file() or (p.is_file() and p.suffix == ".json"):
            runs.append(read_run(p))
        elif p.is_dir():
            results_dir = p
        else:
            raise ConfigError(f"corolla report {item}: expected a run directory (with summary.json), a result "
                              f"file (a summary.json copy) or a directory of result files (like docs/results)")
    results_dir = results_dir or root / "docs" / "results"
    catalogue = catalogue or root / "docs" / "paper_tables.toml"
    results_md = root / "docs" / "results.md"
    boards = build(catalogue, results_dir)
    check_sections(boards, results_md)
    preset_results: dict[str, list[dict]] = {}
    for f in sorted(results_dir.glob("*.json")):
        try:
            d = json.loads(f.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(d, dict) and d.get("preset") and "metrics" in d:
            preset_results.setdefault(d["preset"], []).append({**d, "_file": f.name})
    pages = render.site(boards, runs, out, results_md, results_dir, preset_results, root / "docs" / "methods")
    if markdown is not None:
        markdown.write_text(render.markdown(boards, Path(__import__("os").path.relpath(results_md, markdown.parent)).as_posix()))
    if readme is not None:
        render.update_readme(readme, boards)
    rows = [{"board": b.id, "paper": b.paper, "dataset": b.dataset, "method": r.method, "status": r.status}
            for b in boards for r in b.rows]
    (out / "rows.json").write_text(json.dumps(rows, indent=0))
    return {"boards": len(boards), "rows": len(rows), "pages": [str(p) for p in pages],
            "index": str(out / "index.html"), "seconds": round(time.perf_counter() - t0, 2),
            "run_pages": [str(out / "runs" / f"{r.name}.html") for r in runs]}


def run_page(run_dir: Path) -> Path:
    """The page of one finished run, in ``RUN/report/`` (``corolla run`` prints its path)."""
    site = run_dir / "report"
    (site / "runs").mkdir(parents=True, exist_ok=True)
    (site / "img").mkdir(exist_ok=True)
    (site / "style.css").write_text(render.CSS)
    for sub in ("methods", "runs"):
        (site / sub).mkdir(exist_ok=True)
    if not (site / "index.html").exists():   # the navigation's targets: this run only
        (site / "index.html").write_text(render._page("Corolla run", '<p><a href="runs/index.html">the run</a>; the '
                                                      "leaderboard: <code>corolla report</code></p>"))
        (site / "trust.html").write_text(render._page("Security and reliability", "<p><code>corolla report</code> "
                                                      "writes this page from docs/results/.</p>"))
        (site / "scale.html").write_text(render._page("Scale", "<p><code>corolla report</code> writes this page "
                                                      "from docs/results/.</p>"))
        (site / "methods" / "index.html").write_text(render._page("Methods", "<p><code>corolla report</code> writes "
                                                                 "the method pages.</p>", depth=1))
    render.run_pages(site, [read_run(run_dir)])
    return site / "runs" / f"{run_dir.name}.html"
