"""The spectral basis's one-time cost per LPSFed client (paper §2.2; `docs/methods/lpsfed.md`): Lanczos for the first Φ
eigenvectors of each client's normalised Laplacian, timed without the node cache, with the
subgraph's size, the basis's bytes (it stays on the node) and the process's peak memory.

    python benchmarks/lgcn_eigen_cost.py --data-dir $COROLLA_DATA --preset lpsfed-gowalla \\
        --out docs/results/lgcn-eigen-cost-gowalla.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    import torch

    from client_app.lpsfed import LPSFedClient
    from corolla.config import parse_overrides, resolve
    from corolla.data import build_federation
    from corolla.models import lgcn as L
    from corolla.util import atomic_write_json, stable_seed

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--preset", default="lpsfed-gowalla")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = resolve(args.preset, parse_overrides(args.set))
    t0 = time.perf_counter()
    fed = build_federation(cfg, args.data_dir)
    prep_s = time.perf_counter() - t0
    rows = []
    for cid, users in enumerate(fed.clients):
        c = LPSFedClient(cfg, fed, cid, users, torch.device("cpu"), args.data_dir)
        t = time.perf_counter()
        p, lam = L.spectral_basis(len(c.users), len(c.items), c.train_u, c.train_i, cfg["lgcn-phi"],
                                  stable_seed(cfg["seed"], "lanczos", cid))
        rows.append({"client": cid, "users": int(len(c.users)), "items": int(len(c.items)),
                     "edges": int(len(c.train_i)), "phi": int(lam.shape[0]),
                     "eig_s": round(time.perf_counter() - t, 3), "basis_mb": round(p.nbytes / 2**20, 2),
                     "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
        print(json.dumps(rows[-1]), flush=True)
    out = {"preset": args.preset, "set": args.set, "federation_s": round(prep_s, 1), "threads": 1, "clients": rows}
    if args.out:
        atomic_write_json(Path(args.out), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
