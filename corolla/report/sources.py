"""Result files and run directories, read into one shape.

* a run's ``summary.json`` (or a copy in ``docs/results/``): ``metrics`` (validation-selected),
  ``metrics_paper_compat`` (the paper's reporting switches), ``metrics_unweighted_mean`` (LGCN
  presets: the mean over clients), ``wall_s``, ``bytes_up``/``bytes_down``, ``rounds_completed``;
* the authors' code's logs converted by ``benchmarks/authors_log.py`` (``rounds`` with per-round
  ``test_hr``/``test_ndcg``/``val_hr``: the test metrics of the round with the best validation HR,
  the latest of ties, the rule UFGraphFR's, GPFedRec's and PFedRec's ``train.py`` report by) or by
  the FedCA script (``best_test_hr``/``best_test_ndcg``: FedCA's code reports its best test round),
  or ``metrics`` (``lpsfed_authors_log.py``);
* a run directory: ``summary.json``, ``rounds.jsonl``, ``config.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corolla.keys import ConfigError


@dataclass
class Result:
    path: Path
    metrics: dict[str, float]
    preset: str = ""
    wall_per_round: float | None = None
    bytes_per_round: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"result file {path}: cannot read it as JSON ({e})") from None


def read_result(path: Path, source: str, metrics: list[str]) -> Result:
    """``source``: ``metrics``, ``compat`` (paper-compatible where the file has them, else
    ``metrics``), ``unweighted_mean`` (the mean over clients) or ``authors``."""
    d = _load(path)
    if source == "authors":
        return Result(path, _authors_metrics(d, metrics, path), raw=d)
    if "metrics" not in d:
        raise ConfigError(f"result file {path}: no 'metrics' (expected a run's summary.json)")
    mets = dict(d["metrics"])
    if source == "compat" and d.get("metrics_paper_compat", {}).get("metrics"):
        mets.update(d["metrics_paper_compat"]["metrics"])
    elif source == "unweighted_mean" and d.get("metrics_unweighted_mean"):
        mets = dict(d["metrics_unweighted_mean"])
    rounds = d.get("rounds_completed") or 0
    return Result(path, mets, d.get("preset") or "",
                  d["wall_s"] / rounds if rounds and d.get("wall_s") else None,
                  (d.get("bytes_up", 0) + d.get("bytes_down", 0)) / rounds if rounds else None, d)


def _authors_metrics(d: dict[str, Any], metrics: list[str], path: Path) -> dict[str, float]:
    if "metrics" in d:
        return dict(d["metrics"])
    if "best_test_hr" in d:
        return {"hr@10": d["best_test_hr"], "ndcg@10": d["best_test_ndcg"]}
    rounds = d.get("rounds") or []
    if rounds and "test_hr" in rounds[0]:
        if any("val_hr" not in r for r in rounds):
            raise ConfigError(f"result file {path}: a round without 'val_hr' (the authors' codes report the "
                              f"test metrics of the best validation round)")
        best = max(range(len(rounds)), key=lambda i: (rounds[i]["val_hr"], i))   # latest of ties: `>=`
        return {"hr@10": rounds[best]["test_hr"], "ndcg@10": rounds[best]["test_ndcg"]}
    raise ConfigError(f"result file {path}: not a format of the authors' logs this report knows")


@dataclass
class Run:
    """A run directory."""
    path: Path
    summary: dict[str, Any]
    rounds: list[dict[str, Any]]
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return self.path.name


def read_run(path: Path) -> Run:
    """A run directory, or a run's summary alone (a result file: its page has no curves)."""
    if path.is_file():
        d = _load(path)
        if "metrics" not in d:
            raise ConfigError(f"result file {path}: no 'metrics' (expected a run's summary.json)")
        return Run(path.with_suffix(""), d, [], {"config": d.get("config", {})})
    if not (path / "summary.json").is_file():
        raise ConfigError(f"run {path}: no summary.json (a run directory of 'corolla run' holds one when it ends)")
    rounds = []
    if (path / "rounds.jsonl").is_file():
        rounds = [json.loads(x) for x in (path / "rounds.jsonl").read_text().splitlines() if x.strip()]
    cfg = _load(path / "config.json") if (path / "config.json").is_file() else {}
    return Run(path, _load(path / "summary.json"), rounds, cfg)
