"""A uniformly random ranking on a full-ranking preset's protocol: what a model that has learned
nothing scores, as the mean and standard deviation over independent draws.

Each draw gives every item of every user an independent uniform score (so each user's top K is a
uniformly random K of its unmasked items) and evaluates it exactly as the preset's clients do
(``client_app.base.full_rank_metrics``: train items masked, validation items too for test unless the
preset's ``test-mask-valid`` is false; the preset's reported metrics, with ``compat-fedcia-metrics``
FedCIA's set-ordered MRR / NDCG and F1 of the means). A paper row inside this spread is a ranking
no better than chance: a model at its start, or one whose training does not reach the test items.

    python benchmarks/random_ranking.py --data-dir $COROLLA_DATA local-mlp-ml100k-943 --draws 300 \\
        --json docs/results/random-ranking-fedcia-ml100k-943.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_app.base import full_rank_metrics  # noqa: E402
from corolla.config import int_list, parse_overrides, resolve  # noqa: E402
from corolla.data import build_federation  # noqa: E402
from corolla.data.federation import Federation  # noqa: E402
from corolla.keys import ConfigError  # noqa: E402
from corolla.metrics import aggregate  # noqa: E402
from corolla.util import atomic_write_text  # noqa: E402


def one_draw(fed: Federation, split: str, ks: list[int], fedcia: bool, mask_valid: bool,
             g: np.random.Generator) -> dict[str, float]:
    """The preset's metrics of one uniformly random ranking over the users with a ``split`` item
    (paper-compatible ones under ``compat:``)."""
    users = [u for u in range(fed.n_users) if len(fed.rows(split, u))]
    if not users:
        raise ConfigError(f"no user has a {split} item")
    scores = g.random((len(users), fed.n_items))
    plain, compat = aggregate(full_rank_metrics(scores, fed, users, split, ks, fedcia, None, mask_valid), ks)
    return {**plain, **{f"compat:{k}": v for k, v in compat.items()}}


def random_reference(cfg: dict[str, Any], data_dir: str | None, draws: int, seed: int) -> dict[str, Any]:
    if cfg["protocol"] != "full-rank":
        raise ConfigError(f"config key 'protocol': random_ranking.py needs full-rank, got {cfg['protocol']!r}")
    if draws < 2:
        raise ConfigError(f"--draws: at least 2 draws for a spread, got {draws}")
    fed = build_federation(cfg, data_dir)
    if fed.item_owner is not None:
        raise ConfigError("a spectral partition (items per client) is not supported")
    ks = int_list(cfg, "topk")
    g = np.random.default_rng(seed)
    out: dict[str, Any] = {"dataset": cfg["dataset"], "split": cfg["split"], "draws": draws, "seed": seed}
    for split in ("valid", "test"):
        runs = [one_draw(fed, split, ks, bool(cfg.get("compat-fedcia-metrics")),
                         bool(cfg.get("test-mask-valid", True)), g) for _ in range(draws)]
        out[split] = {k: {"mean": float(np.mean([r[k] for r in runs])), "sd": float(np.std([r[k] for r in runs], ddof=1)),
                          "min": float(min(r[k] for r in runs)), "max": float(max(r[k] for r in runs))}
                      for k in runs[0]}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("preset")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset key")
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write every number here")
    args = ap.parse_args(argv)
    try:
        ref = random_reference(resolve(args.preset, parse_overrides(args.set)), args.data_dir, args.draws, args.seed)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    ref = {"command": "python benchmarks/random_ranking.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "preset": args.preset, **ref}
    for k, v in ref["test"].items():
        if k.endswith("@10") and k.split(":")[-1].split("@")[0] in ("hr", "f1", "mrr", "ndcg"):
            print(f"test {k}: {v['mean']:.4f} ± {v['sd']:.4f} [{v['min']:.4f}, {v['max']:.4f}]")
    if args.json:
        atomic_write_text(args.json, json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
