"""NDCG@K of a run's exported top-K under the definitions a paper may have used (issue 39).

Dist-FedAvg's paper (Khouas et al. 2025) publishes no evaluation code; its text says "HR@10,
NDCG@10". Corolla assumes binary relevance with the ideal DCG over min(|T_u|, K) positions
(``docs/methods/distfedavg.md``, "Evaluation"). Two other definitions are common in recommender
code and change NDCG, not HR:

* ``idcg-min``  ideal DCG over min(|T_u|, K) positions (Corolla's, ``corolla.metrics``);
* ``idcg-k``    ideal DCG over K positions whatever |T_u| (as if every user had K test items);
* ``idcg-all``  ideal DCG over |T_u| positions, uncapped (a user with more than K test items
                cannot reach 1).

They differ only for users with |T_u| ≠ K, so they separate datasets by their test-set sizes. Each
variant's mean over the test users is printed with the 95 % normal interval the paper prints
(1.96 σ / √N), to set beside the paper's "±".

The run must have been made with ``--export-topk K`` (``topk.jsonl``: each user's top-K items,
train and validation items masked, from the last round's models; end the run at its selected
round with ``--set num-rounds=R`` so that they are the reported model's). The split is rebuilt from
the run's ``config.json`` with the same data, so the script's ``idcg-min`` mean equals the run's
test NDCG (printed as a check).

    python benchmarks/ndcg_variants.py --data-dir $COROLLA_DATA --k 10 \\
        --run runs/distfedavg-filmtrust-topk [--run ...] --json docs/results/distfedavg-ndcg-variants.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

VARIANTS = ("idcg-min", "idcg-k", "idcg-all")


def dcg(top: list[int], truth: set[int], k: int) -> float:
    """Binary DCG of the first k items: Σ 1/log2(rank + 1) over the hits."""
    return sum(1.0 / math.log2(r + 2) for r, i in enumerate(top[:k]) if i in truth)


def ideal(n: int) -> float:
    return sum(1.0 / math.log2(r + 2) for r in range(n))


def ndcg(top: list[int], truth: set[int], k: int, variant: str) -> float:
    """One user's NDCG@k under ``variant`` (see the module docstring)."""
    if not truth:
        raise ValueError("ndcg: a user without test items has no NDCG (expected |T_u| >= 1)")
    if variant == "idcg-min":
        n = min(len(truth), k)
    elif variant == "idcg-k":
        n = k
    elif variant == "idcg-all":
        n = len(truth)
    else:
        raise ValueError(f"ndcg: variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    return dcg(top, truth, k) / ideal(n)


def interval(values: np.ndarray) -> dict[str, float]:
    """Mean, standard deviation and the 95 % normal half-width 1.96 σ / √N."""
    n = len(values)
    sd = float(values.std(ddof=1)) if n > 1 else 0.0
    return {"mean": float(values.mean()), "sd": sd, "ci95": 1.96 * sd / math.sqrt(n) if n else float("nan")}


def evaluate(tops: dict[int, list[int]], truth: dict[int, set[int]], k: int) -> dict:
    """HR@k and each variant's NDCG@k over the users that have test items."""
    users = sorted(u for u in truth if truth[u])
    missing = [u for u in users if u not in tops]
    if missing:
        raise ValueError(f"topk.jsonl: no top-K for {len(missing)} test users (first {missing[:5]}); "
                         f"expected one line per user of the run")
    sizes = np.array([len(truth[u]) for u in users])
    out = {"users": len(users), "k": k,
           "test_items_per_user": {"median": float(np.median(sizes)), "share_below_k": float((sizes < k).mean()),
                                   "share_above_k": float((sizes > k).mean())},
           "hr": interval(np.array([float(any(i in truth[u] for i in tops[u][:k])) for u in users]))}
    for v in VARIANTS:
        out[f"ndcg:{v}"] = interval(np.array([ndcg(tops[u], truth[u], k, v) for u in users]))
    return out


def read_run(run: Path, data_dir: str | None) -> tuple[dict, dict[int, list[int]], dict[int, set[int]]]:
    from corolla.data.federation import build_federation

    for name in ("config.json", "topk.jsonl"):
        if not (run / name).is_file():
            raise FileNotFoundError(f"--run {run}: no {name} (expected a run's --out folder made with --export-topk)")
    cfg = json.loads((run / "config.json").read_text())["config"]
    tops = {}
    for line in (run / "topk.jsonl").read_text().splitlines():
        row = json.loads(line)
        tops[int(row["user"])] = [int(i) for i in row["items"]]
    fed = build_federation(cfg, data_dir)
    truth = {u: set(fed.rows("test", u).tolist()) for u in range(fed.n_users)}
    return cfg, tops, truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, action="append", required=True, help="a run's --out folder (repeatable)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None, help="write the results here (atomically)")
    a = ap.parse_args(argv)
    if a.k < 1:
        print(f"error: --k {a.k}: expected a positive cut-off", file=sys.stderr)
        return 2
    if a.data_dir and not Path(a.data_dir).expanduser().is_dir():
        print(f"error: --data-dir {a.data_dir}: no such directory (expected the datasets folder the runs used)",
              file=sys.stderr)
        return 2
    rows = []
    for run in a.run:
        try:
            cfg, tops, truth = read_run(run, a.data_dir)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        res = evaluate(tops, truth, a.k)
        summ = run / "summary.json"
        reported = json.loads(summ.read_text()).get("metrics", {}) if summ.is_file() else {}
        res.update({"run": run.name, "dataset": cfg["dataset"], "method": cfg["method"],
                    "item_agg": cfg.get("item-agg"), "user_agg": cfg.get("user-agg"), "seed": cfg.get("seed"),
                    "num_rounds": cfg.get("num-rounds"),
                    "reported": {m: reported.get(f"{m}@{a.k}") for m in ("hr", "ndcg")}})
        rows.append(res)
        nd = "  ".join(f"{v} {res[f'ndcg:{v}']['mean']:.4f}±{res[f'ndcg:{v}']['ci95']:.4f}" for v in VARIANTS)
        print(f"{run.name}: N={res['users']} |T|<K {res['test_items_per_user']['share_below_k']:.0%} "
              f"HR {res['hr']['mean']:.4f}±{res['hr']['ci95']:.4f}  {nd}  "
              f"(run reported HR {res['reported']['hr']}, NDCG {res['reported']['ndcg']})")
    if a.json:
        from corolla.util import atomic_write_text

        cmd = "python benchmarks/ndcg_variants.py " + " ".join(sys.argv[1:] if argv is None else argv)
        atomic_write_text(a.json, json.dumps({"command": cmd, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
