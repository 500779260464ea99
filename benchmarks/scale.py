"""Scale: logical clients and SuperNodes (issue 27, item 4).

Two sweeps, each run through ``corolla run --mode local`` (a real SuperLink and ``corolla
supernode`` processes on loopback), one run after the other:

* ``clients`` — per-user methods on the one-user harness with a growing number of users: the
  ML-100K preset as it is (943 users) and Gowalla (LightGCN's files pooled, leave-one-out by
  file order, ``max-users`` N of its 29,857 users with >= 10 interactions), a few rounds, through
  2 and 4 SuperNodes. Per run: the median round's wall time, bytes up and down per round, the
  ServerApp's peak RSS (``summary.json``), each SuperNode's peak memory (its process group: the
  SuperNode and the ClientApp processes it forks, sampled from /proc every 0.5 s; the largest
  single process and the group's sum, which counts pages shared by forks more than once), and the
  clients' state on disk.
* ``nodes`` — the README's main job (``fedavg-mf-ml100k``, a few rounds) through 1, 2, 4, ...
  SuperNodes: the median round, the SuperLink process's CPU time and peak RSS over the run.

Every row records the machine's load (1-minute load average before the run and its mean during
the run, from /proc/loadavg; the machine has ``os.cpu_count()`` cores). Prints Markdown tables;
``--json`` keeps the rows (docs/results/scale-*.json); ``--plot`` draws them.

    python benchmarks/scale.py clients --data-dir $COROLLA_DATA --json docs/results/scale-clients.json
    python benchmarks/scale.py nodes --data-dir $COROLLA_DATA --nodes 1 2 4 8 16 32 \\
        --json docs/results/scale-nodes.json
    python benchmarks/scale.py compose --data-dir $COROLLA_DATA --nodes 16 --json docs/results/scale-compose.json
    python benchmarks/scale.py fedca --data-dir $COROLLA_DATA --json docs/results/scale-fedca.json
    python benchmarks/scale.py plot --json docs/results/scale-clients.json docs/results/scale-nodes.json \\
        --out docs/results/scale.png

``fedca`` — FedCA PMF (only the drawn clients upload) on 943 ML-100K users and 1,000 / 5,000
Gowalla users, exact and with ``fedca-block`` = 64: the server's aggregation seconds per round
and the metrics against the exact run (its personalised tables make every client's state a full
M × d table: 29,857 Gowalla users would need 29,857 × 40,981 × 16 × 4 B = 78 GB of client state).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from corolla.report.scale import markdown_table

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")

# method label -> its ML-100K preset; a Gowalla run adds dataset=gowalla and max-users=N
CLIENT_RUNS = {
    "fedavg-pmf": "fedavg-pmf-ml100k",
    "pfedrec": "pfedrec-ml100k",
    "fedrecon": "fedrecon-ufgraphfr-ml100k",   # stateless clients: item-upload = rows is lossless
}


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def proc_table() -> dict[int, tuple[int, int, float]]:
    """pid -> (process group, resident bytes, CPU seconds) of every live process."""
    out = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if f[0] == "Z":
            continue
        out[int(d.name)] = (int(f[2]), int(f[21]) * PAGE, (int(f[11]) + int(f[12])) / TICK)
    return out


class Sampler(threading.Thread):
    """Peak memory per SuperNode process group and the SuperLink's CPU and memory, from /proc,
    once ``logs/pids.json`` (written by ``corolla run``) names the processes."""

    def __init__(self, out: Path, every: float = 0.5):
        super().__init__(daemon=True)
        self.out, self.every = out, every
        self.stop = threading.Event()
        self.node_sum: dict[int, int] = {}
        self.node_max: dict[int, int] = {}
        self.link_rss = 0
        self.link_cpu = 0.0
        self.loads: list[float] = []

    def run(self) -> None:
        pids = None
        while not self.stop.is_set():
            self.loads.append(loadavg())
            if pids is None and (self.out / "logs" / "pids.json").is_file():
                try:
                    pids = json.loads((self.out / "logs" / "pids.json").read_text())
                except ValueError:
                    pids = None
            if pids is not None:
                table = proc_table()
                for i, g in enumerate(pids["supernodes"]):
                    mem = [rss for grp, rss, _ in table.values() if grp == g]
                    self.node_sum[i] = max(self.node_sum.get(i, 0), sum(mem))
                    self.node_max[i] = max(self.node_max.get(i, 0), max(mem, default=0))
                link = table.get(pids["superlink"])
                if link is not None:
                    self.link_rss = max(self.link_rss, link[1])
                    self.link_cpu = link[2]
            self.stop.wait(self.every)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def run(preset: str, sets: list[str], nodes: int, out: Path, data_dir: str, rounds: int,
        extra: list[str] | None = None) -> dict:
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--data-dir", data_dir,
           "--out", str(out), "--quiet", "--mode", "local", "--nodes", str(nodes),
           "--set", f"num-rounds={rounds}", "--set", "phase-timeout=7200"] + (extra or [])
    for s in sets:
        cmd += ["--set", s]
    load0 = loadavg()
    sampler = Sampler(out)
    sampler.start()
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, COROLLA_OFFLINE="1"))
    wall = time.monotonic() - t0
    sampler.stop.set()
    sampler.join()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    walls = [r["wall_s"] for r in rows]
    state_mb = round(du(out / "node-state") / 2**20, 1)
    shutil.rmtree(out / "node-state", ignore_errors=True)   # FedCA's per-client tables: gigabytes
    up = [sum(ph["bytes_up"] for ph in r["phases"]) for r in rows]
    down = [sum(ph["bytes_down"] for ph in r["phases"]) for r in rows]
    return {
        "preset": preset, "sets": sets, "nodes": nodes, "rounds": len(rows),
        "users": summary.get("data", {}).get("users") or summary.get("data_stats", {}).get("users"),
        "command_s": round(wall, 1), "round_s": [round(w, 2) for w in walls],
        "median_round_s": round(statistics.median(walls[1:] or walls), 2),
        "bytes_up_per_round": int(statistics.median(up)), "bytes_down_per_round": int(statistics.median(down)),
        "server_peak_rss_mb": summary.get("server_peak_rss_mb"),
        "node_peak_mb_max_process": [round(v / 2**20) for _, v in sorted(sampler.node_max.items())],
        "node_peak_mb_group_sum": [round(v / 2**20) for _, v in sorted(sampler.node_sum.items())],
        "superlink_cpu_s": round(sampler.link_cpu, 2), "superlink_peak_rss_mb": round(sampler.link_rss / 2**20),
        "state_on_disk_mb": state_mb,
        "metrics": summary["metrics"], "loadavg_before": load0,
        "loadavg_during": round(statistics.mean(sampler.loads), 2) if sampler.loads else None,
        "cores": os.cpu_count(),
    }


def users_of(out: Path) -> int | None:
    for line in (out / "rounds.jsonl").read_text().splitlines()[:1]:
        r = json.loads(line)
        return r.get("train", {}).get("clients")
    return None


def cmd_clients(a) -> list[dict]:
    rows = []
    for label in a.methods:
        preset = CLIENT_RUNS[label]
        for users in a.users:
            for nodes in a.nodes:
                for upload in a.upload:
                    if upload == "full" and users > a.full_max:
                        continue
                    sets = [f"item-upload={upload}"]
                    if users != 943:
                        sets += ["dataset=gowalla", f"max-users={users}"]
                    out = Path(a.out) / f"{label}-{users}-{nodes}n-{upload}"
                    row = run(preset, sets, nodes, out, a.data_dir, a.rounds)
                    row.update(method=label, users=users, upload=upload,
                               dataset="ml-100k" if users == 943 else "gowalla",
                               clients_per_round=users_of(out))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def cmd_nodes(a) -> list[dict]:
    rows = []
    for nodes in a.nodes:
        out = Path(a.out) / (f"main-{nodes}n" + ("" if a.idle_poll is None else f"-poll{a.idle_poll:g}"))
        row = run("fedavg-mf-ml100k", [], nodes, out, a.data_dir, a.rounds,
                  [] if a.idle_poll is None else ["--idle-poll", str(a.idle_poll)])
        row["idle_poll_s"] = a.idle_poll if a.idle_poll is not None else 0.05
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def cmd_compose(a) -> list[dict]:
    """``docker compose up --scale supernode=N`` of the main job (compose.yaml as it is; the image
    built beforehand, e.g. docker/build-offline.sh): round times from the run's ``rounds.jsonl``,
    containers' memory and the SuperLink container's CPU from ``docker stats`` every 2 s."""
    compose = ["docker", "compose"] if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0 \
        else ["docker-compose"]
    rows = []
    for nodes in a.nodes:
        name = f"scale-compose-{nodes}"
        runs = Path(a.runs).resolve()
        runs.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, COROLLA_DATA=str(Path(a.data_dir).resolve()), COROLLA_PRESET="fedavg-mf-ml100k",
                   COROLLA_ROUNDS=str(a.rounds), COROLLA_NODES=str(nodes), COROLLA_RUN_NAME=name,
                   COROLLA_RUNS=str(runs), COROLLA_OFFLINE="1")
        base = compose + ["-p", "corscale", "-f", str(ROOT / "compose.yaml")]
        subprocess.run(base + ["down", "-v"], cwd=ROOT, env=env, capture_output=True)
        stop = threading.Event()
        peaks: dict[str, float] = {}
        link_cpu: list[float] = []
        loads: list[float] = []

        def stats() -> None:
            while not stop.is_set():
                loads.append(loadavg())
                p = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}} {{.CPUPerc}}"],
                                   capture_output=True, text=True)
                for line in p.stdout.splitlines():
                    parts = line.split()
                    if len(parts) < 4 or not parts[0].startswith("corscale"):
                        continue
                    mem = parts[1]
                    mb = float(mem[:-3]) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}.get(mem[-3:], 0)
                    peaks[parts[0]] = max(peaks.get(parts[0], 0.0), mb)
                    if "superlink" in parts[0]:
                        link_cpu.append(float(parts[-1].rstrip("%")))
                stop.wait(2)

        th = threading.Thread(target=stats, daemon=True)
        load0 = loadavg()
        t0 = time.monotonic()
        th.start()
        p = subprocess.run(base + ["up", "--scale", f"supernode={nodes}", "--exit-code-from", "run"], cwd=ROOT,
                           env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        stop.set()
        th.join()
        subprocess.run(base + ["down", "-v"], cwd=ROOT, env=env, capture_output=True)
        if p.returncode != 0:
            raise RuntimeError(f"compose with {nodes} SuperNodes failed:\n{p.stdout[-3000:]}")
        out = runs / name
        rr = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
        walls = [r["wall_s"] for r in rr]
        nodes_mb = [v for k, v in peaks.items() if "supernode" in k]
        row = {"compose": True, "nodes": nodes, "rounds": len(rr), "command_s": round(wall, 1),
               "round_s": [round(w, 2) for w in walls], "median_round_s": round(statistics.median(walls[1:] or walls), 2),
               "supernode_containers": len(nodes_mb), "node_peak_mb_max_process": [round(max(nodes_mb, default=0))],
               "supernode_containers_peak_mb_sum": round(sum(nodes_mb)),
               "superlink_peak_mb": round(max((v for k, v in peaks.items() if "superlink" in k), default=0)),
               "superlink_cpu_percent_mean": round(statistics.mean(link_cpu), 1) if link_cpu else None,
               "superlink_cpu_s": None, "superlink_peak_rss_mb": None,
               "metrics": json.loads((out / "summary.json").read_text())["metrics"],
               "loadavg_before": load0, "loadavg_during": round(statistics.mean(loads), 2) if loads else None,
               "cores": os.cpu_count()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def plot(paths: list[str], out: str) -> None:
    from corolla.report.plots import scale

    rows = [r for p in paths for r in json.loads(Path(p).read_text())["rows"]]
    scale([r for r in rows if "method" in r and "fedca-block" not in r], [r for r in rows if "method" not in r], Path(out))


def cmd_fedca(a) -> list[dict]:
    """FedCA PMF (``fedca-upload = subset``, the clients drawn for aggregation upload) on a
    growing number of users, exact (``fedca-block = 0``) and in blocks: the server's aggregation
    seconds and the metrics against the exact run's."""
    rows = []
    for users in a.users:
        for block in a.blocks:
            sets = ["fedca-upload=subset", f"fedca-block={block}", f"clients-per-message={a.clients_per_message}"]
            if users != 943:
                sets += ["dataset=gowalla", f"max-users={users}"]
            out = Path(a.out) / f"fedca-{users}-b{block}"
            row = run("fedca-pmf-ml100k", sets, a.nodes[0], out, a.data_dir, a.rounds)
            rr = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
            row.update(method="fedca", users=users, upload="full", dataset="ml-100k" if users == 943 else "gowalla",
                       **{"fedca-block": block}, aggregated=rr[0]["train"].get("aggregated"),
                       blocks=rr[0]["train"].get("blocks"),
                       server_aggregation_s=[round(r["train"].get("server-s", 0.0), 2) for r in rr])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("clients")
    c.add_argument("--data-dir", required=True)
    c.add_argument("--methods", nargs="+", default=["fedavg-pmf", "pfedrec"], choices=list(CLIENT_RUNS))
    c.add_argument("--users", type=int, nargs="+", default=[943, 1000, 5000, 29857],
                   help="943 = the ML-100K preset; any other N = the first N Gowalla users")
    c.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    c.add_argument("--upload", nargs="+", default=["full", "rows"], choices=("full", "rows"))
    c.add_argument("--full-max", type=int, default=1000, help="item-upload=full only up to this many users")
    c.add_argument("--rounds", type=int, default=2)
    f = sub.add_parser("fedca")
    f.add_argument("--data-dir", required=True)
    f.add_argument("--users", type=int, nargs="+", default=[943, 1000, 5000])
    f.add_argument("--blocks", type=int, nargs="+", default=[0, 64])
    f.add_argument("--nodes", type=int, nargs=1, default=[2])
    f.add_argument("--clients-per-message", type=int, default=500)
    f.add_argument("--rounds", type=int, default=2)
    n = sub.add_parser("nodes")
    n.add_argument("--data-dir", required=True)
    n.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    n.add_argument("--rounds", type=int, default=5)
    n.add_argument("--idle-poll", type=float, help="the SuperNodes' idle poll (default: corolla run's 0.05 s)")
    for x in (c, f, n):
        x.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "scale"))
        x.add_argument("--json")
    d = sub.add_parser("compose")
    d.add_argument("--data-dir", required=True)
    d.add_argument("--nodes", type=int, nargs="+", default=[16])
    d.add_argument("--rounds", type=int, default=5)
    d.add_argument("--runs", default=str(ROOT / "runs"))
    d.add_argument("--json")
    p = sub.add_parser("plot")
    p.add_argument("--json", nargs="+", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "plot":
        plot(a.json, a.out)
        return
    rows = {"clients": cmd_clients, "fedca": cmd_fedca, "nodes": cmd_nodes, "compose": cmd_compose}[a.cmd](a)
    print(markdown_table(a.cmd, {"rows": rows}))   # the report's scale.html table, as Markdown
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"command": "python benchmarks/scale.py " + " ".join(sys.argv[1:]),
                                            "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
