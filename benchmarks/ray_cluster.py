"""Flower's simulation runtime on a multi-machine Ray cluster, on one host (issue 27, item 4).

Two network namespaces stand for two machines: ``rayhead`` (10.77.0.1) runs the Ray head,
``raywork`` (10.77.0.2) a Ray worker node, joined by a veth pair; each Ray node offers
``--cpus`` CPUs. ``corolla run --mode sim --ray-address 10.77.0.1:6379`` runs in ``rayhead`` (its
simulation SuperLink's ``ray.init()`` joins the cluster instead of starting Ray). While it runs,
every ``ray::ClientAppActor`` process is looked up in /proc and its network namespace recorded
(``ip netns identify``): the ClientApps must run on both "machines". Then the same run as a
one-machine simulation (Ray started by Flower on this host, the same CPUs per actor), and the
metrics of every round compared.

Needs root (namespaces) and ``ray`` on PATH (the venv's). Prints a JSON summary; ``--json``
writes it. The commands it runs are those of ``docs/deployment.md`` ("Simulation on a Ray
cluster").

    sudo .venv/bin/python benchmarks/ray_cluster.py --data-dir $COROLLA_DATA \\
        --json docs/results/ray-cluster.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NS = {"rayhead": "10.77.0.1", "raywork": "10.77.0.2"}


def sh(*cmd: str, check: bool = True, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, env=env)


def netns_up() -> None:
    existing = sh("ip", "netns", "list").stdout
    for ns in NS:
        if ns not in existing:
            sh("ip", "netns", "add", ns)
    if "vhead" not in sh("ip", "-n", "rayhead", "link").stdout:
        sh("ip", "link", "add", "vhead", "type", "veth", "peer", "name", "vwork")
        sh("ip", "link", "set", "vhead", "netns", "rayhead")
        sh("ip", "link", "set", "vwork", "netns", "raywork")
        sh("ip", "-n", "rayhead", "addr", "add", "10.77.0.1/24", "dev", "vhead")
        sh("ip", "-n", "raywork", "addr", "add", "10.77.0.2/24", "dev", "vwork")
    for ns, dev in (("rayhead", "vhead"), ("raywork", "vwork")):
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def netns_down() -> None:
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)


def ray_env() -> dict:
    return dict(os.environ, RAY_USAGE_STATS_ENABLED="0")


def ray_up(cpus: int) -> None:
    sh("ip", "netns", "exec", "rayhead", str(BIN / "ray"), "start", "--head", f"--node-ip-address={NS['rayhead']}",
       "--port=6379", f"--num-cpus={cpus}", "--include-dashboard=false", "--disable-usage-stats", env=ray_env())
    sh("ip", "netns", "exec", "raywork", str(BIN / "ray"), "start", f"--address={NS['rayhead']}:6379",
       f"--node-ip-address={NS['raywork']}", f"--num-cpus={cpus}", "--disable-usage-stats", env=ray_env())


def ray_down() -> None:
    for ns in NS:
        sh("ip", "netns", "exec", ns, str(BIN / "ray"), "stop", "--force", check=False, env=ray_env())


def ray_nodes() -> str:
    return sh("ip", "netns", "exec", "rayhead", str(BIN / "ray"), "status", f"--address={NS['rayhead']}:6379",
              check=False, env=ray_env()).stdout


class ActorWatch(threading.Thread):
    """The network namespace of every ``ray::ClientAppActor`` process seen while the run lasts."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.seen: dict[int, str] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            for d in Path("/proc").glob("[0-9]*"):
                pid = int(d.name)
                if pid in self.seen:
                    continue
                try:
                    cmd = (d / "cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(b"ray::ClientAppActor"):
                    ns = sh("ip", "netns", "identify", str(pid), check=False).stdout.strip()
                    self.seen[pid] = ns or "(host)"
            self.stop.wait(0.5)


def corolla_run(out: Path, preset: str, nodes: int, rounds: int, data_dir: str, cpus: int,
                ray_address: str | None, netns: str | None) -> dict:
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--mode", "sim", "--nodes", str(nodes),
           "--sim-client-cpus", str(cpus), "--data-dir", data_dir, "--set", f"num-rounds={rounds}",
           "--out", str(out), "--quiet"]
    if ray_address:
        cmd += ["--ray-address", ray_address]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    watch = ActorWatch()
    watch.start()
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=ray_env())
    wall = time.monotonic() - t0
    watch.stop.set()
    watch.join()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    s = json.loads((out / "summary.json").read_text())
    rounds_ = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    per_ns: dict[str, int] = {}
    for ns in watch.seen.values():
        per_ns[ns] = per_ns.get(ns, 0) + 1
    return {"command": " ".join(cmd), "command_s": round(wall, 1), "metrics": s["metrics"],
            "round_metrics": [r.get("metrics", {}) for r in rounds_],
            "round_s": [round(r["wall_s"], 2) for r in rounds_], "actors_per_netns": per_ns}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--preset", default="fedavg-mf-ml100k")
    ap.add_argument("--nodes", type=int, default=4, help="virtual SuperNodes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=1, help="CPUs per Ray node (= ClientApp actors per node)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "ray_cluster"))
    ap.add_argument("--keep", action="store_true", help="leave the namespaces and the Ray cluster running")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = Path(a.out)
    data_dir = str(Path(a.data_dir).resolve())
    load0 = float(Path("/proc/loadavg").read_text().split()[0])
    netns_up()
    ray_down()
    try:
        ray_up(a.cpus)
        time.sleep(3)
        status = ray_nodes()
        cluster = corolla_run(out / "cluster", a.preset, a.nodes, a.rounds, data_dir, 1, f"{NS['rayhead']}:6379",
                              "rayhead")
    finally:
        if not a.keep:
            ray_down()
            netns_down()
    single = corolla_run(out / "single", a.preset, a.nodes, a.rounds, data_dir, 1, None, None)
    res = {"preset": a.preset, "virtual_nodes": a.nodes, "rounds": a.rounds, "cpus_per_ray_node": a.cpus,
           "ray_status": status.splitlines()[:12], "cluster": cluster, "single_machine": single,
           "metrics_equal": cluster["metrics"] == single["metrics"],
           "round_metrics_equal": cluster["round_metrics"] == single["round_metrics"],
           "actors_on_both_namespaces": {"rayhead", "raywork"} <= set(cluster["actors_per_netns"]),
           "loadavg_before": load0, "cores": os.cpu_count()}
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))
    if not (res["metrics_equal"] and res["round_metrics_equal"] and res["actors_on_both_namespaces"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
