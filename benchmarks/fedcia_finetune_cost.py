"""The cost of FedCIA's fine-tuning phase on this machine, per round, without running a round.

FedCIA's clients fine-tune their item table towards the global similarity C_s for
``finetune-steps`` SGD steps each round (paper Eq. 6; ``corolla.models.similarity.finetune_many``,
the whole node's clients batched). Each step costs one (M x M) @ (M x B·d) product: at the
943-client presets (B = 943, d = 256) about 1.4 TFLOP per step. This times a few steps of exactly
that function on random tables of the preset's shape and scales to the preset's steps per round.

    python benchmarks/fedcia_finetune_cost.py --clients 943 --items 1682 --dim 256 --steps 2 \\
        --per-round 100 --json docs/results/fedcia-finetune-cost-943.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--items", type=int, default=1682)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--steps", type=int, default=2, help="steps timed")
    ap.add_argument("--per-round", type=int, default=100, help="the preset's finetune-steps")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import torch

    from corolla.models.similarity import finetune_many
    g = torch.Generator().manual_seed(0)
    es = [torch.randn(args.items, args.dim, generator=g) * 0.1 for _ in range(args.clients)]
    c = torch.randn(args.items, args.items, generator=g) * 0.01
    load = float(Path("/proc/loadavg").read_text().split()[0])
    t0 = time.perf_counter()
    finetune_many(es, c, args.steps, 0.1, 1e-3, "fro")
    dt = time.perf_counter() - t0
    per_step = dt / args.steps
    flop = 2.0 * args.items * args.items * args.clients * args.dim
    res = {"clients": args.clients, "items": args.items, "dim": args.dim, "steps_timed": args.steps,
           "s_per_step": round(per_step, 2), "tflop_per_step": round(flop / 1e12, 3),
           "gflops": round(flop / per_step / 1e9, 1), "finetune_s_per_round": round(per_step * args.per_round, 1),
           "torch_threads": torch.get_num_threads(), "cores": os.cpu_count(), "loadavg_1min": load}
    print(json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
