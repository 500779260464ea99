"""The SuperLink's CPU per idle SuperNode at each ``--idle-poll`` of ``corolla supernode``.

For each poll value: a SuperLink on loopback, N ``corolla supernode`` processes with that idle poll
and nothing to do (no run), a warm-up, then the CPU seconds the SuperLink process (and its
children) used over a measuring window, read from /proc. Prints a Markdown table; ``--json``
writes the numbers.

    python benchmarks/idle_poll.py --nodes 4 --window 30 --polls 3 1 0.5 0.1 0.05
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flower_io import compat  # noqa: E402
from launcher.cli import _path_with_interpreter, flower_bin, wait_port  # noqa: E402
from launcher.ports import free_port  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and of its reaped children (/proc/PID/stat fields 14-17)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(poll: float, nodes: int, window: float, warmup: float, tmp: Path) -> dict:
    env = dict(os.environ, FLWR_HOME=str(tmp / "home"), PYTHONPATH=str(ROOT),
               PATH=_path_with_interpreter(os.environ.get("PATH", "")), FLWR_DISABLE_UPDATE_CHECK="1")
    control, fleet_port = free_port(), free_port()
    fleet = compat.fleet_address("127.0.0.1", control, fleet_port)   # this Flower line's Fleet API
    procs = []
    try:
        link = subprocess.Popen([flower_bin("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                                 "--host", "127.0.0.1", "--port", str(control),
                                 *compat.superlink_fleet_args("127.0.0.1", fleet_port)],
                                env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        procs.append(link)
        wait_port(int(fleet.rsplit(":", 1)[1]), link)
        for _ in range(nodes):
            procs.append(subprocess.Popen([sys.executable, "-m", "launcher.supernode", "--idle-poll", str(poll),
                                           "--insecure", "--superlink", fleet, "--host", "127.0.0.1",
                                           "--port", str(free_port())],
                                          env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        time.sleep(warmup)
        load0, c0, t0 = loadavg(), cpu_seconds(link.pid), time.monotonic()
        time.sleep(window)
        c1, t1 = cpu_seconds(link.pid), time.monotonic()
        cpu_pct = 100 * (c1 - c0) / (t1 - t0)
        return {"idle_poll_s": poll, "nodes": nodes, "window_s": round(t1 - t0, 1),
                "superlink_cpu_pct": round(cpu_pct, 2), "per_node_cpu_pct": round(cpu_pct / nodes, 3),
                "pulls_per_s_per_node": round(1 / poll, 2), "loadavg_1min": load0}
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--polls", type=float, nargs="+", default=[3.0, 1.0, 0.5, 0.1, 0.05])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for poll in args.polls:
            rows.append(measure(poll, args.nodes, args.window, args.warmup, Path(d)))
            print(rows[-1], flush=True)
    print(f"\n| idle poll (s) | pulls/s per node | SuperLink CPU, {args.nodes} idle nodes | per idle node | load (1 min) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['idle_poll_s']:g} | {r['pulls_per_s_per_node']:g} | {r['superlink_cpu_pct']:.2f} % | "
              f"{r['per_node_cpu_pct']:.3f} % | {r['loadavg_1min']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": os.uname().nodename, "cores": os.cpu_count(),
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
