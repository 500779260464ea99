"""A run with one hostile node: what the server records (issue 24, "the exclusions a run records
for a hostile node").

FedAvg-MF on ML-100K, 3 nodes in process (``launcher.inproc``); node 3's replies are tampered
with on the way back, a different trick each round: round 1 a NaN in one client's table, round 2
one of its clients' uploads relabelled as a client of node 1, round 3 a client id twice,
round 4 ``num-examples = 1e30``, round 5 a reply 100x the expected size. The other two nodes are
honest. It prints every exclusion (round, node, client, reason), the node's flags from
``summary.json``, and the final metrics next to the same run without the hostile node's tricks.

    python benchmarks/hostile_node.py --data-dir $COROLLA_DATA --json docs/results/hostile-node.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flwr.app import Array, ArrayRecord, ConfigRecord  # noqa: E402

from launcher.inproc import InProcessTransport, partitions  # noqa: E402
from server_app.app import run_federation  # noqa: E402

TRICKS = {1: "nan", 2: "stranger", 3: "duplicate-id", 4: "absurd-num-examples", 5: "oversized"}


def tamper_factory(hostile: int, first_of_node1: int):
    def tamper(node, mtype, rd):
        if node != hostile or mtype != "train" or "payload" not in rd:
            return rd
        rnd = tamper.round = getattr(tamper, "round", 0) + 1
        trick = TRICKS.get(rnd)
        pay = {k: v.numpy() for k, v in rd["payload"].items()}
        mets = json.loads(rd["results"]["metrics"])
        g = sorted({k.split("/")[0] for k in pay})[0]
        if trick == "nan":
            a = pay[f"{g}/item.weight"] if f"{g}/item.weight" in pay else next(v for k, v in pay.items()
                                                                                 if not k.endswith("cids"))
            a.flat[0] = np.nan
        elif trick == "stranger":   # its first client's upload relabelled as node 1's client
            cids = pay[f"{g}/cids"]
            mine = str(int(cids[0]))
            cids[0] = first_of_node1
            mets[str(first_of_node1)] = mets.pop(mine)
        elif trick == "duplicate-id":   # its second client's upload relabelled as its first
            cids = pay[f"{g}/cids"]
            mets.pop(str(int(cids[1])))
            cids[1] = cids[0]
        elif trick == "absurd-num-examples":
            c = next(iter(mets))
            mets[c]["num-examples"] = 1e30
        elif trick == "oversized":
            pay["g97/item.weight"] = np.zeros((100 * 1682, 64), np.float32)
            pay["g97/cids"] = np.array([first_of_node1], np.int64)
        rd["payload"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in pay.items()})
        rd["results"] = ConfigRecord({**dict(rd["results"]), "metrics": json.dumps(mets)})
        return rd
    return tamper


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "hostile"))
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    out = Path(a.out)
    data = str(Path(a.data_dir).resolve())
    rc = {"preset": "fedavg-mf-ml100k", "set": "num-rounds=5", "data-dir": data}
    nodes = partitions(3, {"data-dir": data})
    honest = InProcessTransport(nodes)
    s0 = run_federation(honest, {**rc, "out-dir": str(out / "honest")})
    t = InProcessTransport(nodes)
    ids = sorted(t.nodes)
    # node 1 (the first) hosts clients 0..33 of the 100-client split: claim its first
    t.tamper = tamper_factory(ids[2], 0)
    s1 = run_federation(t, {**rc, "out-dir": str(out / "hostile")})
    rounds = [json.loads(x) for x in (out / "hostile" / "rounds.jsonl").read_text().splitlines()]
    excl = [{"round": r["round"], "trick": TRICKS.get(r["round"], ""), **e}
            for r in rounds for p in r["phases"] for e in p["excluded"]]
    res = {"command": "python " + " ".join(sys.argv), "hostile_node": ids[2], "tricks": TRICKS,
           "exclusions": excl, "nodes": s1["nodes"], "status": s1["status"],
           "metrics_with_hostile_node": s1["metrics"], "metrics_all_honest": s0["metrics"]}
    for e in excl:
        print(f"round {e['round']} ({e['trick']}): node {e['node']} client {e['client']}: {e['reason'][:150]}")
    print("flags:", {n: v.get("flags") for n, v in s1["nodes"].items() if v.get("flags")})
    print("metrics hostile run", s1["metrics"])
    print("metrics all honest ", s0["metrics"])
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0 if s1["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
