"""Item popularity on a preset's protocol: what a ranker that learns nothing about the user gives.

Every item is scored by how many users have it in the train split (all users counted: the
knowledge of a central server, not of a federated client), and the preset's own evaluation ranks
those scores: its data, split, evaluation negatives and metrics (``build_federation`` of the
resolved preset; no model, no training).

* leave-one-out presets (``protocol = loo``): the held-out item against the user's evaluation
  negatives (``corolla.metrics.loo_user_metrics``), reported twice: ties (items with the same count)
  broken uniformly at random in expectation, and ties against the positive (a negative with the
  held-out item's count ranks above it), the rule of the pandas ranking in the NCF-lineage codes
  (negatives listed first, ``rank(method='first')``) and of the presets' ``compat-ties-against-positive``;
* full-ranking presets: every item scored, the user's train items masked (and its validation items
  for test unless the preset's ``test-mask-valid`` is false), the items its client does not own
  masked on a spectral partition, as the clients' ``client_app.base.full_rank_metrics`` does; equal counts ordered by item index
  (``corolla.metrics.top_k``); the preset's own reported metrics (``aggregate``: with
  ``compat-fedcia-metrics`` FedCIA's set-ordered MRR / NDCG and F1 of the means).

With ``PRESET:TABLE_ID:DATASET`` (a table of ``corolla/report/paper_tables.toml`` and one of its
datasets) the paper's rows of that table are set beside the reference: a row whose every number
is below item popularity reports a model that ranks the held-out items worse than counting them.

With ``--topk-run RUN`` (a run's ``--out`` folder made with ``--export-topk K``: each user's top-K
with train and validation items masked, from the run's last round) the run's lists are compared
item by item with popularity's top-K under the same masks: the mean share of each user's K items
that popularity also puts in its top K, and the share of users whose two lists hold the same items.

    python benchmarks/popularity_reference.py --data-dir $COROLLA_DATA \\
        fedavg-pmf-ml100k:fedca-t1:ML-100K fedavg-ncf-ml100k:fedca-t1-ncf:ML-100K ... \\
        --json docs/results/popularity-reference.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_app.base import full_rank_metrics  # noqa: E402
from corolla.config import int_list, parse_overrides, resolve  # noqa: E402
from corolla.data import build_federation  # noqa: E402
from corolla.data.federation import Federation  # noqa: E402
from corolla.keys import ConfigError  # noqa: E402
from corolla.metrics import aggregate, loo_user_metrics  # noqa: E402
from corolla.report.board import _parse_values  # noqa: E402
from corolla.util import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "corolla" / "report" / "paper_tables.toml"
BLOCK = 1024   # users scored at a time in full ranking


def command_line(argv: list[str]) -> str:
    """This command as the docs write it: ``--data-dir $COROLLA_DATA``, ``--json`` relative to the
    checkout when it lies inside it."""
    out, i = ["python", "benchmarks/popularity_reference.py"], 0
    while i < len(argv):
        w = argv[i]
        if w in ("--data-dir", "--json") and i + 1 < len(argv):
            v = argv[i + 1]
            if w == "--data-dir":
                v = "$COROLLA_DATA"
            elif Path(v).resolve().is_relative_to(ROOT):
                v = str(Path(v).resolve().relative_to(ROOT))
            out += [w, v]
            i += 2
            continue
        out.append(w)
        i += 1
    return " ".join(out)


def item_popularity(fed: Federation) -> np.ndarray:
    """Train interactions per item, over every user (float64, length ``n_items``)."""
    return np.bincount(fed.indices["train"], minlength=fed.n_items).astype(np.float64)


def loo_popularity(fed: Federation, pop: np.ndarray, split: str, ks: list[int],
                   ties_against_positive: bool) -> dict[str, float]:
    """Mean leave-one-out metrics of the popularity scores over the users with a ``split`` item."""
    neg = fed.neg_valid if split == "valid" else fed.neg_test
    if neg is None:
        raise ConfigError(f"split {split!r}: the federation has no evaluation negatives (protocol is not 'loo')")
    users = [u for u in range(fed.n_users) if len(fed.rows(split, u))]
    pos = np.array([pop[fed.rows(split, u)[0]] for u in users])
    per = loo_user_metrics(pos, pop[neg[users]], ks, ties_against_positive)
    return {k: float(v.mean()) for k, v in per.items()} | {"users": len(users)}


def full_rank_popularity(fed: Federation, pop: np.ndarray, split: str, ks: list[int],
                         fedcia: bool, mask_valid: bool = True) -> dict[str, float]:
    """The preset's full-ranking metrics of the popularity scores (both dicts of ``aggregate``:
    plain and paper-compatible) over the users with a ``split`` item."""
    users = [u for u in range(fed.n_users) if len(fed.rows(split, u))]
    masks = None
    if fed.item_owner is not None:
        owner = {int(u): c for c, us in enumerate(fed.clients) for u in us}
        masks = [fed.item_owner == owner[u] for u in users]
    per: dict[str, list[np.ndarray]] = {}
    for a in range(0, len(users), BLOCK):   # a block of users at a time: n_users x n_items never held
        part = users[a:a + BLOCK]
        s = np.tile(pop, (len(part), 1))
        res = full_rank_metrics(s, fed, part, split, ks, fedcia, masks[a:a + BLOCK] if masks else None, mask_valid)
        for k, v in res.items():
            per.setdefault(k, []).append(v)
    plain, compat = aggregate({k: np.concatenate(v) for k, v in per.items()}, ks)
    return {**plain, **{f"compat:{k}": v for k, v in compat.items()}, "users": len(users)}


def popularity_topk(fed: Federation, pop: np.ndarray, u: int, k: int) -> list[int]:
    """Popularity's top-k for user ``u`` with its train and validation items masked (as the clients'
    ``phase_topk``), equal counts by item index."""
    s = pop.copy()
    s[fed.rows("train", u)] = -np.inf
    s[fed.rows("valid", u)] = -np.inf
    return np.argsort(-s, kind="stable")[:k].tolist()


def topk_overlap(tops: dict[int, list[int]], fed: Federation, pop: np.ndarray) -> dict[str, float]:
    """Mean share of each user's exported top-K that is also in popularity's top-K, and the share
    of users whose two top-K sets are equal."""
    if not tops:
        raise ConfigError("--topk-run: the run exported no top-K lists")
    shares, same = [], []
    for u, items in tops.items():
        ref = set(popularity_topk(fed, pop, u, len(items)))
        shares.append(len(ref & set(items)) / len(items))
        same.append(ref == set(items))
    return {"users": len(tops), "k": len(next(iter(tops.values()))), "overlap": float(np.mean(shares)),
            "same_set": float(np.mean(same))}


def read_topk_run(run: Path, data_dir: str | None) -> dict[str, Any]:
    for name in ("config.json", "topk.jsonl"):
        if not (run / name).is_file():
            raise ConfigError(f"--topk-run {run}: no {name} (expected a run's --out folder made with --export-topk)")
    cfg = json.loads((run / "config.json").read_text())["config"]
    tops = {int(r["user"]): [int(i) for i in r["items"]]
            for r in map(json.loads, (run / "topk.jsonl").read_text().splitlines())}
    fed = build_federation(cfg, data_dir)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    return {"run": run.name, "preset": summary.get("preset"), "method": cfg.get("method"), "seed": cfg.get("seed"),
            "rounds": cfg.get("num-rounds"), **topk_overlap(tops, fed, item_popularity(fed))}


def reference(cfg: dict[str, Any], data_dir: str | None) -> dict[str, Any]:
    fed = build_federation(cfg, data_dir)
    pop = item_popularity(fed)
    ks = int_list(cfg, "topk")
    out: dict[str, Any] = {"protocol": cfg["protocol"], "dataset": cfg["dataset"], "users": fed.n_users,
                           "items": fed.n_items,
                           "ties-against-positive": bool(cfg.get("compat-ties-against-positive"))}
    for split in ("valid", "test"):
        if cfg["protocol"] == "loo":
            out[split] = {"ties-uniform": loo_popularity(fed, pop, split, ks, False),
                          "ties-against-positive": loo_popularity(fed, pop, split, ks, True)}
        else:
            out[split] = full_rank_popularity(fed, pop, split, ks, bool(cfg.get("compat-fedcia-metrics")),
                                              bool(cfg.get("test-mask-valid", True)))
    return out


def paper_rows(table_id: str, dataset: str, catalogue: Path = CATALOGUE) -> tuple[list[str], list[tuple[str, list]]]:
    """The metrics and the paper's (method, values) rows of one table's dataset in the catalogue."""
    doc = tomllib.loads(catalogue.read_text())
    for t in doc.get("table", []):
        if t.get("id") == table_id:
            ds, mets = list(t["datasets"]), list(t["metrics"])
            if dataset not in ds:
                raise ConfigError(f"--table {table_id}:{dataset}: the table's datasets are {ds}")
            j = ds.index(dataset)
            rows = _parse_values(t["values"], len(ds), len(mets), float(t.get("scale", 1.0)), table_id)
            return mets, [(name, vals[j * len(mets):(j + 1) * len(mets)]) for name, vals in rows]
    raise ConfigError(f"--table {table_id}:{dataset}: no table {table_id!r} in {catalogue}")


def reference_value(ref: dict[str, Any], metric: str, source: str) -> float:
    """The test value of ``metric`` that a table of ``source`` ('compat' or 'metrics') compares with:
    for leave-one-out, ties against the positive where the preset's paper-compatible numbers use
    that rule (``compat-ties-against-positive``), else ties broken uniformly."""
    test = ref["test"]
    if "ties-against-positive" in test:
        rule = "ties-against-positive" if source == "compat" and ref["ties-against-positive"] else "ties-uniform"
        return test[rule][metric]
    return test.get(f"compat:{metric}", test[metric]) if source == "compat" else test[metric]


def compare(ref: dict[str, Any], table_id: str, dataset: str, catalogue: Path = CATALOGUE) -> list[dict[str, Any]]:
    """Each paper row of the table's dataset beside the popularity reference: its values, the
    reference's, and whether every given value lies below it."""
    doc = tomllib.loads(catalogue.read_text())
    source = next(t.get("source", "metrics") for t in doc["table"] if t["id"] == table_id)
    mets, rows = paper_rows(table_id, dataset, catalogue)
    refv = [reference_value(ref, m, source) for m in mets]
    out = []
    for name, vals in rows:
        given = [(v, r) for v, r in zip(vals, refv) if v is not None]
        out.append({"method": name, "paper": dict(zip(mets, vals)), "popularity": dict(zip(mets, refv)),
                    "below": bool(given) and all(v < r for v, r in given)})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets", nargs="*", help="PRESET or PRESET:TABLE_ID:DATASET (a paper table to set beside it)")
    ap.add_argument("--topk-run", action="append", default=[], metavar="RUN",
                    help="a run folder made with --export-topk: compare its top-K lists with popularity's")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset key")
    ap.add_argument("--json", default=None, help="write every number here")
    args = ap.parse_args(argv)
    over = parse_overrides(args.set)
    report: dict[str, Any] = {"command": command_line(list(argv if argv is not None else sys.argv[1:])),
                              "presets": {}}
    for spec in args.presets:
        preset, _, table = spec.partition(":")
        cfg = resolve(preset, over)
        ref = reference(cfg, args.data_dir)
        if table:
            table_id, _, dataset = table.partition(":")
            if not dataset:
                raise SystemExit(f"{spec}: expected PRESET:TABLE_ID:DATASET")
            ref["table"] = {"id": table_id, "dataset": dataset, "rows": compare(ref, table_id, dataset)}
        report["presets"][spec] = ref   # one preset may stand beside several tables
        test = ref["test"]
        flat = test.get("ties-against-positive", test)
        shown = {k: v for k, v in flat.items() if k.split("@")[0].split(":")[-1] in ("hr", "ndcg", "mrr", "f1")
                 and k.endswith("@10")}
        print(f"{preset} ({ref['protocol']}, {ref['users']} users): test " +
              ", ".join(f"{k} {v:.4f}" for k, v in shown.items()))
        for r in ref.get("table", {}).get("rows", []):
            if r["below"]:
                print(f"  below popularity: {table} {r['method']} {r['paper']}")
    if not args.presets and not args.topk_run:
        raise SystemExit("expected PRESET[:TABLE_ID:DATASET] arguments or --topk-run RUN")
    for run in args.topk_run:
        r = read_topk_run(Path(run), args.data_dir)
        report.setdefault("topk_runs", []).append(r)
        print(f"{run} ({r['method']}, {r['users']} users, top-{r['k']}): {r['overlap']:.3f} of each list is "
              f"in popularity's top-{r['k']}; {r['same_set']:.3f} of the users have the same {r['k']} items")
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
