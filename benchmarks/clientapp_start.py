"""Start-up cost of one ClientApp process: what every message pays in deployment.

In Flower 1.39 every message a SuperNode receives starts a new ``flwr-clientapp`` process. This
script starts fresh Python processes that do what such a process does before the method's own
work: import Flower, import Corolla's ClientApp, build the node's host (its logical clients'
data: the parsed dataset, split, negatives and partition) and answer the handshake, and import
the method's client module. It reports,
per preset, the median over ``--repeats`` processes with the node cache warm (a node that has
served one message already), the first (cold-cache) process, and the heavy modules the process
imported::

    python benchmarks/clientapp_start.py --data-dir $COROLLA_DATA \
        --presets fedavg-mf-ml100k fedcia-gfcf-ml100k fedca-pmf-ml100k [--tree DIR] [--json FILE]

``--tree`` measures another checkout (e.g. the code before a change) with this machine's venv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("matplotlib", "cvxpy", "sklearn", "scipy.sparse.linalg", "ray", "sentence_transformers", "pandas")

PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import flwr.app, flwr.clientapp
t1 = time.perf_counter()
from client_app.app import handle
t2 = time.perf_counter()
from corolla.config import resolve
from corolla.messages import PhaseRequest, RunInfo, config_hash
from flower_io.records import to_records
cfg = resolve(sys.argv[1], {"num-rounds": 1})
req = PhaseRequest("handshake", 0, [], RunInfo("bench", config_hash(cfg), sys.argv[3], sys.argv[2]), cfg=cfg)
rep = handle(to_records(req.encode()), {"partition-id": 0, "num-partitions": 2}, {})
t3 = time.perf_counter()
from client_app import registry
registry.client_class(cfg)   # the method's client module
t4 = time.perf_counter()
heavy = [m for m in %r if m in sys.modules]
print(json.dumps({"import_flwr_s": t1 - t0, "import_app_s": t2 - t1, "load_s": t3 - t2,
                  "import_method_s": t4 - t3, "total_s": t4 - t0, "heavy_modules": heavy}))
""" % (HEAVY,)


def probe(tree: Path, preset: str, data_dir: str, cache: str, state: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), COROLLA_CACHE=cache, COROLLA_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", PROBE, preset, data_dir, state], cwd=tree, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--presets", nargs="+", default=["fedavg-mf-ml100k", "fedcia-gfcf-ml100k", "fedca-pmf-ml100k"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", default=str(ROOT), help="checkout to measure (default: this one)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    a = ap.parse_args()
    tree = Path(a.tree).resolve()
    data_dir = str(Path(a.data_dir).resolve())
    rows = []
    for preset in a.presets:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as state:
            cold = probe(tree, preset, data_dir, cache, state)
            warm = [probe(tree, preset, data_dir, cache, state) for _ in range(a.repeats)]
        med = {k: round(statistics.median(w[k] for w in warm), 3)
               for k in ("import_flwr_s", "import_app_s", "load_s", "import_method_s", "total_s")}
        rows.append({"preset": preset, "cold_total_s": round(cold["total_s"], 3), "cold_load_s": round(cold["load_s"], 3),
                     **{f"warm_{k}": v for k, v in med.items()}, "heavy_modules": warm[0]["heavy_modules"]})
    print("| preset | cold: total s (load s) | warm: import flwr s | import app s | load s | import method s "
          "| total s | heavy modules |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['preset']} | {r['cold_total_s']:.2f} ({r['cold_load_s']:.2f}) | {r['warm_import_flwr_s']:.2f} | "
              f"{r['warm_import_app_s']:.2f} | {r['warm_load_s']:.3f} | {r['warm_import_method_s']:.3f} | "
              f"{r['warm_total_s']:.2f} | {', '.join(r['heavy_modules']) or '-'} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": " ".join(sys.argv), "tree": str(tree), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
