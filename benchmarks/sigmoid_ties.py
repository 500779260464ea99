"""How many scores of an MF run's clients saturate when ranked as FedCIA's code ranks them
(``sigmoid(u·i)`` in float32, ``compat-sigmoid-ranking``), and what that ranking does to the
test metrics of the same models.

Reads a run folder made by ``corolla run`` / ``benchmarks/sweep.py`` on the silo harness with
``model = mf`` (its ``config.json`` and each logical client's latest state under ``node-state/``:
``user.weight``, ``item.weight``), scores every test user on every item, masks its train and
validation items, and ranks twice: the scores themselves (the presets) and their float32 sigmoid
(ties to the smaller item id). Prints the unmasked items per test user whose sigmoid is exactly 1.0
and both rankings' metrics (with ``compat-fedcia-metrics``: FedCIA's).

    python benchmarks/sigmoid_ties.py runs/fedavg-mf-ml100k+num-rounds=500+method=local+local-init=per-client+dim=512 \\
        --data-dir $COROLLA_DATA
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_app.base import full_rank_metrics  # noqa: E402
from corolla.config import int_list, resolve  # noqa: E402
from corolla.data import build_federation  # noqa: E402
from corolla.metrics import aggregate, sigmoid_f32  # noqa: E402

_STATE = re.compile(r"c(\d+)\.r(\d+)\.npz$")


def latest_states(run: Path) -> dict[int, tuple[int, Path]]:
    """Each logical client's newest saved state: cid -> (round, file)."""
    out: dict[int, tuple[int, Path]] = {}
    for f in run.glob("node-state/*/c*.r*.npz"):
        m = _STATE.search(f.name)
        if m:
            c, r = int(m.group(1)), int(m.group(2))
            if r > out.get(c, (-1, f))[0]:
                out[c] = (r, f)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args()
    if not (a.run / "config.json").is_file():
        raise SystemExit(f"{a.run}: no config.json (expected a run folder)")
    cfg = resolve(None, json.loads((a.run / "config.json").read_text())["config"])
    if cfg["model"] != "mf" or cfg["protocol"] != "full-rank":
        raise SystemExit(f"{a.run}: model mf and protocol full-rank expected, got {cfg['model']}, {cfg['protocol']}")
    fed = build_federation(cfg, a.data_dir)
    states = latest_states(a.run)
    if len(states) != len(fed.clients):
        raise SystemExit(f"{a.run}: states of {len(states)} clients, the federation has {len(fed.clients)} "
                         "(run without --drop-node-state)")
    ks, fedcia = int_list(cfg, "topk"), bool(cfg["compat-fedcia-metrics"])
    per: dict[str, dict[str, list]] = {"scores": {}, "sigmoid": {}}
    saturated, rounds = [], set()
    for cid, users in enumerate(fed.clients):
        r, f = states[cid]
        rounds.add(r)
        z = np.load(f)
        rows = [k for k, u in enumerate(users.tolist()) if len(fed.rows("test", u))]
        if not rows:
            continue
        s = z["user.weight"][rows].astype(np.float32) @ z["item.weight"].astype(np.float32).T
        us = [int(users[k]) for k in rows]
        for k, u in enumerate(us):
            free = np.ones(fed.n_items, bool)
            free[fed.rows("train", u)] = False
            free[fed.rows("valid", u)] = False
            saturated.append(int((sigmoid_f32(s[k])[free] == 1.0).sum()))
        for name, sig in (("scores", False), ("sigmoid", True)):
            res = full_rank_metrics(s.astype(np.float64), fed, us, "test", ks, fedcia, None, True, sig)
            for k, v in res.items():
                per[name].setdefault(k, []).append(v)
    sat = np.array(saturated)
    out = {"run": str(a.run), "rounds": sorted(rounds), "test_users": int(len(sat)),
           "saturated_per_user": {"mean": float(sat.mean()), "median": float(np.median(sat)),
                                  "users_with_k_or_more": int((sat >= max(ks)).sum())}}
    for name, d in per.items():
        plain, compat = aggregate({k: np.concatenate(v) for k, v in d.items()}, ks)
        out[name] = compat if fedcia else plain
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
