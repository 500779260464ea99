"""``corolla report``: everything the report writes, from its inputs.

The inputs are explicit; their defaults work in a checkout and in an installed package alike:

* the paper-table catalogue: ``corolla/report/paper_tables.toml``, package data (``catalogue``);
* the result files the leaderboards read (``results_dir``, ``corolla report --results DIR``):
  a directory given among the inputs, else ``./docs/results`` when the working directory has one
  (a checkout's root), else an error naming ``--results``;
* the write-up whose sections the tables link to (``results_md``, ``--results-md FILE``) and the
  method write-ups the method pages link to (``method_docs``, ``--method-docs DIR``): by default
  ``results.md`` and ``methods/`` beside the results folder (``docs/`` of a checkout) when they are
  there; without them the section check is skipped and the pages carry no links to them;
* the site folder (``out``, ``--out DIR``): by default ``site`` beside the results folder
  (``docs/site`` of a checkout).
"""

from __future__ import annotations

import json
import os
import time
from importlib import resources
from pathlib import Path

from corolla.keys import ConfigError
from corolla.report import render
from corolla.report.board import build, check_sections
from corolla.report.sources import read_run

# the catalogue of the papers' headline tables ships inside the package (package data)
CATALOGUE = Path(str(resources.files("corolla.report") / "paper_tables.toml"))


def default_results_dir(cwd: Path | None = None) -> Path:
    """``./docs/results`` of the working directory (a checkout's root), or a clear error."""
    here = Path.cwd() if cwd is None else cwd
    d = here / "docs" / "results"
    if d.is_dir():
        return d
    raise ConfigError(f"corolla report: no results folder: give --results DIR (a folder of result files like a "
                      f"checkout's docs/results; {d} does not exist)")


def make(inputs: list[str], out: Path | None = None, markdown: Path | None = None, readme: Path | None = None,
         results_dir: Path | None = None, catalogue: Path | None = None, results_md: Path | None = None,
         method_docs: Path | None = None) -> dict:
    """``inputs``: run directories and result files (a page each) and/or a directory of result
    files (the leaderboards' source, like ``results_dir``). Defaults: the module docstring.
    Returns what was written and how long it took."""
    t0 = time.perf_counter()
    runs = []
    given = Path(results_dir).expanduser() if results_dir is not None else None
    if given is not None and not given.is_dir():
        raise ConfigError(f"corolla report --results {results_dir}: expected a folder of result files "
                          f"(like a checkout's docs/results)")
    for item in inputs:
        p = Path(item).expanduser()
        if (p / "summary.json").is_file() or (p.is_file() and p.suffix == ".json"):
            runs.append(read_run(p))
        elif p.is_dir():
            if given is not None and given.resolve() != p.resolve():
                raise ConfigError(f"corolla report {item}: a second results folder (--results {given}); "
                                  f"expected one folder of result files")
            given = p
        else:
            raise ConfigError(f"corolla report {item}: expected a run directory (with summary.json), a result "
                              f"file (a summary.json copy) or a directory of result files (like docs/results)")
    results_dir = given if given is not None else default_results_dir()
    catalogue = Path(catalogue).expanduser() if catalogue is not None else CATALOGUE
    if results_md is not None:
        results_md = Path(results_md).expanduser()
        if not results_md.is_file():
            raise ConfigError(f"corolla report --results-md {results_md}: expected the Markdown write-up whose "
                              f"headings the tables name (like a checkout's docs/results.md); no such file")
    elif (results_dir.parent / "results.md").is_file():
        results_md = results_dir.parent / "results.md"
    if method_docs is not None:
        method_docs = Path(method_docs).expanduser()
        if not method_docs.is_dir():
            raise ConfigError(f"corolla report --method-docs {method_docs}: expected a folder of method write-ups "
                              f"(like a checkout's docs/methods); no such folder")
    elif (results_dir.parent / "methods").is_dir():
        method_docs = results_dir.parent / "methods"
    out = Path(out).expanduser() if out is not None else results_dir.parent / "site"
    boards = build(catalogue, results_dir)
    if results_md is not None:
        check_sections(boards, results_md)
    preset_results: dict[str, list[dict]] = {}
    for f in sorted(results_dir.glob("*.json")):
        try:
            d = json.loads(f.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(d, dict) and d.get("preset") and "metrics" in d:
            preset_results.setdefault(d["preset"], []).append({**d, "_file": f.name})
    pages = render.site(boards, runs, out, results_md, results_dir, preset_results, method_docs)
    if markdown is not None:
        link = None if results_md is None else Path(os.path.relpath(results_md, markdown.parent)).as_posix()
        markdown.write_text(render.markdown(boards, link))
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
