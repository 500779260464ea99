"""The leaderboards: every row of the papers' headline tables (``corolla/report/paper_tables.toml``) beside
Corolla's result for it, the authors' code's where it was run here, Δ to the paper and a status.

Status, from the largest relative difference over the table's metrics: |Δ| ≤ ``tolerance`` (5 %) *reproduced*,
≤ ``level`` (20 %) *level only*, else *not reproduced*; *not run* (with the catalogue's reason)
where no result exists. A row run in a reduced configuration, or whose numbers (the paper's and ours) both
sit at a random ranking's level, is capped (``cap``).
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corolla.keys import ConfigError
from corolla.report.sources import Result, read_result

STATUSES = ("reproduced", "level only", "not reproduced", "not run")


@dataclass
class Row:
    table: str
    paper: str
    dataset: str
    method: str
    metrics: list[str]
    paper_values: list[float | None]
    ours: list[Result] = field(default_factory=list)
    authors: list[Result] = field(default_factory=list)
    status: str = "not run"
    reason: str = ""
    note: str = ""
    evidence: str = ""  # the long note or not-run reason a one-line verdict stands for (shown under the table)

    def mean(self, results: list[Result], k: str) -> float | None:
        vals = [r.metrics[k] for r in results if k in r.metrics and r.metrics[k] is not None]
        return float(np.mean(vals)) if vals else None

    def sd(self, k: str) -> float | None:
        vals = [r.metrics[k] for r in self.ours if k in r.metrics]
        return float(np.std(vals, ddof=1)) if len(vals) > 1 else None

    def deltas(self) -> list[float | None]:
        """Relative difference to the paper's number, metric by metric."""
        out = []
        for k, paper in zip(self.metrics, self.paper_values):
            ours = self.mean(self.ours, k)
            out.append(None if ours is None or not paper else ours / paper - 1.0)
        return out

    @property
    def delta(self) -> float | None:
        """The largest relative difference over the metrics (what the status judges)."""
        ds = [d for d in self.deltas() if d is not None]
        return max(ds, key=abs) if ds else None

    def per_round(self, what: str) -> float | None:
        vals = [getattr(r, what) for r in self.ours if getattr(r, what) is not None]
        return float(np.mean(vals)) if vals else None


@dataclass
class Board:
    """One leaderboard: a table of a paper on one dataset."""
    id: str
    paper: str
    title: str
    dataset: str
    protocol: str
    metrics: list[str]
    section: str
    rows: list[Row]

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}


def _parse_values(text: str, n_datasets: int, n_metrics: int, scale: float, where: str) -> list[tuple[str, list]]:
    out = []
    for line in text.strip().splitlines():
        name, sep, nums = line.partition("|")
        vals = nums.split()
        if not sep or len(vals) != n_datasets * n_metrics:
            raise ConfigError(f"{where}: row {line.strip()!r}: expected 'method | {n_datasets * n_metrics} numbers'")
        out.append((name.strip(), [None if v == "-" else float(v) * scale for v in vals]))
    return out


def _files(patterns: list[str], results_dir: Path, where: str) -> list[Path]:
    names = sorted(p.name for p in results_dir.glob("*.json"))
    out = []
    for pat in patterns:
        hit = fnmatch.filter(names, pat)
        if not hit:
            raise ConfigError(f"{where}: no result file matches {pat!r} in {results_dir}")
        out += [results_dir / h for h in hit]
    return out


def status_of(delta: float | None, tolerance: float, level: float) -> str:
    if delta is None or not math.isfinite(delta):
        return "not run"
    if abs(delta) <= tolerance:
        return "reproduced"
    return "level only" if abs(delta) <= level else "not reproduced"


def build(catalogue: Path, results_dir: Path) -> list[Board]:
    """Every leaderboard of the catalogue, with the result files it names read from ``results_dir``."""
    try:
        doc = tomllib.loads(catalogue.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"catalogue {catalogue}: {e}") from None
    opts = doc.get("report", {})
    tol, level = float(opts.get("tolerance", 0.05)), float(opts.get("level", 0.20))
    boards = []
    for t in doc.get("table", []):
        where = f"{catalogue.name} table {t.get('id')!r}"
        for key in ("id", "paper", "title", "metrics", "datasets", "values", "section", "protocol"):
            if key not in t:
                raise ConfigError(f"{where}: missing '{key}'")
        ds, mets = list(t["datasets"]), list(t["metrics"])
        rows = _parse_values(t["values"], len(ds), len(mets), float(t.get("scale", 1.0)), where)
        known = {f"{m}|{d}" for m, _ in rows for d in ds}
        for d in t.get("sections", {}):
            if d not in ds:
                raise ConfigError(f"{where}: [sections] names {d!r}, which is no dataset of the table")
        for field_ in ("ours", "authors", "notes", "cap"):
            for k in t.get(field_, {}):
                if k not in known:
                    raise ConfigError(f"{where}: [{field_}] names {k!r}, which is no 'method|dataset' of the table")
        verdicts = _verdicts(t, where)
        source = t.get("source", "metrics")
        for j, d in enumerate(ds):
            b_rows = []
            for name, vals in rows:
                key = f"{name}|{d}"
                row = Row(t["id"], t["paper"], d, name, mets, vals[j * len(mets):(j + 1) * len(mets)])
                row.ours = [read_result(p, source, mets) for p in _files(t.get("ours", {}).get(key, []), results_dir, where)]
                row.authors = [read_result(p, "authors", mets) for p in
                               _files(t.get("authors", {}).get(key, []), results_dir, where)]
                row.note = t.get("notes", {}).get(key, "")
                if row.ours:
                    if key in verdicts and row.note:
                        row.note, row.evidence = verdicts[key], row.note
                    row.status = status_of(row.delta, tol, level)
                    cap = t.get("cap", {}).get(key)
                    if cap and STATUSES.index(cap) > STATUSES.index(row.status):
                        row.status = cap
                    row.reason = _reason(row, tol)
                    if row.status == "reproduced":  # its reason is the deltas alone
                        row.evidence = ""
                else:
                    r = t.get("reasons", {})
                    rk = next((k for k in (key, name, f"|{d}") if r.get(k)), None)
                    row.reason = r[rk] if rk else "not run"
                    if rk in verdicts:
                        row.reason, row.evidence = verdicts[rk], r[rk]
                b_rows.append(row)
            boards.append(Board(f"{t['id']}-{_slug(d)}", t["paper"], t["title"], d, t["protocol"], mets,
                                t.get("sections", {}).get(d, t["section"]), b_rows))
    return boards


VERDICT_MAX = 160  # characters: a verdict is one line of the leaderboard's reason column
LONG_TEXT = 200  # a note or not-run reason longer than this needs a verdict


def _verdicts(t: dict[str, Any], where: str) -> dict[str, str]:
    """``[table.verdicts]``: the one-line form of a long note or not-run reason, under the same key. The
    leaderboard prints the verdict in its reason column and the long text under the table as its evidence.
    Every note or reason longer than ``LONG_TEXT`` characters must have one."""
    v = t.get("verdicts", {})
    texts = [(k, x) for f in ("notes", "reasons") for k, x in t.get(f, {}).items()]  # a key may be in both
    for k, text in v.items():
        if k not in {key for key, _ in texts}:
            raise ConfigError(f"{where}: [verdicts] names {k!r}, which has no note or reason to stand for")
        if not isinstance(text, str) or not text.strip() or "\n" in text or len(text) > VERDICT_MAX:
            raise ConfigError(f"{where}: [verdicts] {k!r}: expected one line of at most {VERDICT_MAX} characters, "
                              f"got {len(text) if isinstance(text, str) else type(text).__name__}")
    missing = sorted({k for k, x in texts if len(x) > LONG_TEXT and k not in v})
    if missing:
        raise ConfigError(f"{where}: the notes or reasons {missing} are longer than {LONG_TEXT} characters: "
                          "give each a one-line [verdicts] entry")
    return v


def _reason(row: Row, tol: float) -> str:
    n = len(row.ours)
    seeds = f"{n} runs; " if n > 1 else ""
    base = seeds + ", ".join(f"{k} {d:+.1%}" for k, d in zip(row.metrics, row.deltas()) if d is not None)
    if row.status == "reproduced":
        return f"{base} (all within {tol:.0%})"
    return base + (f"; {row.note}" if row.note else "")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    out = []
    for c in heading.strip().lower():
        if c.isalnum() or c in "-_":
            out.append(c)
        elif c == " ":
            out.append("-")
    return "".join(out)


def check_sections(boards: list[Board], results_md: Path) -> None:
    """Every section a table links to is a heading of ``docs/results.md``."""
    heads = {line.lstrip("#").strip() for line in results_md.read_text().splitlines() if line.startswith("#")}
    for b in boards:
        if b.section not in heads:
            raise ConfigError(f"table {b.id}: section {b.section!r} is no heading of {results_md}")


def summary_counts(boards: list[Board]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for b in boards:
        c = out.setdefault(b.paper, {s: 0 for s in STATUSES})
        for s, n in b.counts().items():
            c[s] += n
    return out


def as_json(boards: list[Board]) -> list[dict[str, Any]]:
    """The rows as plain data (what the browser test checks the pages against)."""
    return [{"board": b.id, "paper": b.paper, "dataset": b.dataset, "method": r.method, "status": r.status}
            for b in boards for r in b.rows]
