"""Server peak memory of FedCIA versus the number of logical clients (issue: O(M²), not K·M²).

Runs ``fedcia-gfcf-ml100k`` (one M×M filter per logical client, M = 1682) on FedCIA's split with
K logical clients (contiguous user blocks; K = 943 is one user per client) through ``corolla run``
and reads ``server_peak_rss_mb`` (the ServerApp process's peak RSS) from ``summary.json``.
With ``--mode local`` the ServerApp is its own process (``flwr-serverapp``); replies are folded
into a running float64 sum as they arrive and at most ``clients-per-message`` filters travel in
one message.

Usage::

    python benchmarks/server_memory.py --data-dir $COROLLA_DATA [--clients 10 100 943] \
        [--mode local] [--nodes 4] [--clients-per-message 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 943])
    ap.add_argument("--mode", default="local", choices=("local", "sim"))
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--clients-per-message", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "server_memory"))
    a = ap.parse_args()
    print("| logical clients | bytes up (MB) | server peak RSS (MB) | wall s |")
    print("|---:|---:|---:|---:|")
    for k in a.clients:
        d = Path(a.out) / f"{a.mode}-{k}"
        if not (d / "summary.json").is_file():
            part = ["partition=user"] if k == 943 else ["partition=blocks", f"num-clients={k}"]
            args = [sys.executable, "-m", "launcher.cli", "run", "--preset", "fedcia-gfcf-ml100k", "--mode", a.mode,
                    "--nodes", str(a.nodes), "--data-dir", a.data_dir, "--out", str(d)]
            for s in part + [f"clients-per-message={a.clients_per_message}"]:
                args += ["--set", s]
            subprocess.run(args, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           stdout=subprocess.DEVNULL)
        s = json.loads((d / "summary.json").read_text())
        print(f"| {k} | {s['bytes_up'] / 1e6:.1f} | {s['server_peak_rss_mb']:.0f} | {s['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
