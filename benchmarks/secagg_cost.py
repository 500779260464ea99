"""What secure aggregation costs per round: bytes and time of each SecAgg+ phase against the plain
run, as a function of the number of nodes and of the vector length (issues 28 and 35).

In process (``launcher.inproc``: every node's work in this process, one after another, so the
times are the sum of the nodes' work plus the server's), one round of

* FedAvg-MF on ML-100K (the README's preset; the vector: the item table, 1682 × 64 + 1), and
* FedCIA GF-CF on ML-100K (the vector: the 1682 × 1682 filter + 1),

with 2, 4, 8 and 16 nodes, plain and with ``secagg = "secaggplus"`` (plain SecAgg: every node is
every other's neighbour, threshold a majority), unsigned (a semi-honest server) and signed (each
node with an ECDSA P-384 key and the others' public keys: signed round keys and the consistency
round, the malicious-server model). For each: the metrics, the largest difference of the
aggregate from the plain run's, the quantisation bound ``e·(1 + |T/W|)/(W − e)`` with ``e =
n·2c/2^bits`` (the sum and the weight are each off by less than ``e``), and per phase the bytes
up/down and the wall time.

    python benchmarks/secagg_cost.py --data-dir $COROLLA_DATA --json docs/results/secagg-cost.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from corolla.config import resolve  # noqa: E402
from launcher.inproc import InProcessTransport, partitions  # noqa: E402
from server_app.app import run_federation  # noqa: E402

CASES = {"fedavg-mf-ml100k": ("num-rounds=1", "global/item.weight"), "fedcia-gfcf-ml100k": ("", "f_agg")}


def node_configs(out: Path, data: str, nodes: int, signed: bool) -> list[dict]:
    """The nodes' configs; signed: each with its own key (``auth-key-file``) and the trust list."""
    confs = partitions(nodes, {"data-dir": data})
    if signed:
        from tests.secagg_helpers import node_keys
        keys, trust = node_keys(out.parent / f"keys-{nodes}", nodes)
        for c, k in zip(confs, keys):
            c.update({"auth-key-file": str(k), "trusted-keys": str(trust)})
    return confs


def one(out: Path, data: str, preset: str, sets: str, nodes: int, signed: bool = False) -> dict:
    if out.exists():
        shutil.rmtree(out)
    confs = node_configs(out, data, nodes, signed)
    t0 = time.perf_counter()
    s = run_federation(InProcessTransport(confs),
                       {"preset": preset, "set": sets, "out-dir": str(out), "data-dir": data})
    wall = time.perf_counter() - t0
    r = json.loads((out / "rounds.jsonl").read_text().splitlines()[0])
    return {"wall_s": round(wall, 2), "metrics": s["metrics"], "bytes_up": s["bytes_up"], "bytes_down": s["bytes_down"],
            "phases": [{k: p[k] for k in ("name", "bytes_up", "bytes_down", "wall_s", "replies")} for p in r["phases"]],
            "train": r["train"], "state": dict(np.load(out / "checkpoint.npz"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--nodes", default="2,4,8,16")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "secagg"))
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    data = str(Path(a.data_dir).resolve())
    rows = []
    for preset, (sets, key) in CASES.items():
        for n in [int(x) for x in a.nodes.split(",")]:
            plain = one(Path(a.out) / f"{preset}-{n}-plain", data, preset, sets, n)
            for signed in (False, True):
                sec = one(Path(a.out) / f"{preset}-{n}-secure{'-signed' if signed else ''}", data, preset,
                          f"{sets} secagg=secaggplus".strip(), n, signed)
                cfg = resolve(preset, {"secagg": "secaggplus"})
                weight = sec["train"]["secagg-weight"]
                e = n * 2 * cfg["secagg-clip"] / (1 << cfg["secagg-bits"])
                big = float(np.abs(plain["state"][key]).max())
                bound = e * (1 + big) / (weight - e)
                diff = float(np.abs(plain["state"][key].astype(np.float64) - sec["state"][key]).max())
                row = {"preset": preset, "nodes": n, "signed": signed, "vector": int(np.prod(plain["state"][key].shape)) + 1,
                       "plain_wall_s": plain["wall_s"], "secure_wall_s": sec["wall_s"],
                       "plain_bytes_up": plain["bytes_up"], "secure_bytes_up": sec["bytes_up"],
                       "plain_bytes_down": plain["bytes_down"], "secure_bytes_down": sec["bytes_down"],
                       "max_abs_diff": diff, "bound": bound, "weight": weight,
                       "metrics_plain": plain["metrics"], "metrics_secure": sec["metrics"],
                       "phases_plain": plain["phases"], "phases_secure": sec["phases"]}
                rows.append(row)
                ph = {p["name"]: p for p in sec["phases"]}
                print(f"{preset} {n:>2} nodes {'signed  ' if signed else 'unsigned'}: wall {plain['wall_s']:.1f} -> "
                      f"{sec['wall_s']:.1f} s, up {plain['bytes_up'] / 1e6:.1f} -> {sec['bytes_up'] / 1e6:.1f} MB, "
                      f"diff {diff:.2e} (bound {bound:.2e}), ndcg@10 {plain['metrics']['ndcg@10']:.4f} / "
                      f"{sec['metrics']['ndcg@10']:.4f}; "
                      + ", ".join(f"{k} {v['bytes_up'] / 1e3:.0f}/{v['bytes_down'] / 1e3:.0f} kB {v['wall_s']:.2f} s"
                                  for k, v in ph.items()), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"command": "python " + " ".join(sys.argv), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
