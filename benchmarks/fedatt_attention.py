"""How concentrated FedAtt's attention is: run a FedAtt preset in process and record, for every
aggregated parameter tensor of every round, the attention weights' largest value, their effective
number of clients (1 / Σ att²), the client that got the largest weight and the gap between the
two largest distances.

FedAtt (Ji et al. 2019; ``corolla.composite.fedatt``) weights client c by softmax_c(‖w_server − w_c‖)
(``fedatt-weights = softmax``, the default; ``distance`` weights are proportional to the distances);
the softmax is taken over raw distances, so when the distances of the clients differ by more than a
few units the weights put nearly all mass on the farthest one or few clients and, with ε = 1, the new
global tensor is in effect their upload. This instrument measures how far that goes on a preset.

Usage (``docs/results.md``, "FedAtt on FedCA's harness")::

    python benchmarks/fedatt_attention.py --out docs/results/fedatt-attention-pmf-filmtrust.json -- \\
        --preset fedatt-pmf-filmtrust --set num-rounds=10 --mode inproc --nodes 1 --data-dir $COROLLA_DATA --out runs/X

Everything after ``--`` is ``corolla run``'s arguments; ``--mode inproc`` is required (the server's
aggregation must run in this process). The JSON holds one record per (round, tensor) and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def attention_stats(server: np.ndarray, clients: np.ndarray, ord_: float = 2, weights: str = "softmax",
                    norm: str = "matrix") -> dict:
    """The attention FedAtt gives ``clients`` (one upload per row of the first axis) around
    ``server``: the same distances (``fedatt-norm``) and weights (``fedatt-weights``) as
    ``corolla.composite.fedatt``."""
    from corolla.composite import fedatt_distances, fedatt_weights

    _, s = fedatt_distances(server, clients, ord_, norm)
    att = fedatt_weights(s, weights)
    top2 = np.sort(s)[-2:] if len(s) > 1 else np.array([s[0], s[0]])
    return {"clients": int(len(s)), "max_att": float(att.max()), "effective_clients": float(1.0 / np.sum(att ** 2)),
            "argmax": int(att.argmax()), "dist_min": float(s.min()), "dist_median": float(np.median(s)),
            "dist_max": float(s.max()), "dist_gap_top2": float(top2[1] - top2[0])}


def instrument(records: list[dict]) -> None:
    """Wrap the FedAtt strategy so that each aggregated tensor appends its attention statistics."""
    import strategies.fedatt as fedatt_strategy
    from corolla import composite

    original = composite.fedatt
    current = {"round": 0}

    def recording(server, clients, epsilon, ord_=2, dp=0.0, g=None, weights="softmax", norm="matrix"):
        records.append({"round": current["round"], "epsilon": float(epsilon), "weights": weights, "norm": norm,
                        **attention_stats(server, clients, ord_, weights, norm)})
        return original(server, clients, epsilon, ord_, dp, g, weights, norm)

    aggregate = fedatt_strategy.FedAtt.aggregate_phase

    def aggregate_phase(self, phase, rnd, results):
        current["round"] = int(rnd)
        return aggregate(self, phase, rnd, results)

    composite.fedatt = recording
    fedatt_strategy.FedAtt.aggregate_phase = aggregate_phase


def summary(records: list[dict]) -> dict:
    if not records:
        return {}
    mx = np.array([r["max_att"] for r in records])
    eff = np.array([r["effective_clients"] for r in records])
    return {"tensors": len(records), "rounds": len({r["round"] for r in records}),
            "max_att_min": float(mx.min()), "max_att_median": float(np.median(mx)),
            "effective_clients_median": float(np.median(eff)), "effective_clients_max": float(eff.max()),
            "distinct_argmax": len({r["argmax"] for r in records}), "clients": max(r["clients"] for r in records)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file for the per-round records and their summary")
    ap.add_argument("corolla_args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    from corolla.config import resolve
    from inproc_args import corolla_run_args

    rest, preset = corolla_run_args(args.corolla_args, "the server's aggregation must run in this process")
    if resolve(preset).get("method") != "fedatt":
        raise SystemExit(f"--preset {preset}: expected a FedAtt preset (method = fedatt)")
    from launcher.cli import main as corolla_main

    records: list[dict] = []
    instrument(records)
    rc = corolla_main(["run", *rest])
    out = {"command": "python benchmarks/fedatt_attention.py --out " + args.out + " -- " + " ".join(rest),
           "summary": summary(records), "records": records}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(out, f, indent=1)
    os.replace(f.name, path)
    print(json.dumps(out["summary"], indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
