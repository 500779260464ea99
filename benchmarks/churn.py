"""Churn under load: SuperNodes killed and started at random while a run goes on (issue 24).

A real SuperLink on loopback and ``--nodes`` SuperNode processes (``corolla supernode``), every one
``clients="auto"`` (the server gives each live node a block of the logical clients and moves the
blocks when nodes come and go) and all sharing one ``state-dir``, so that a client's state follows
it to its new node. While the run goes on, at every ``--every``-th round the drill kills a random
live node (SIGKILL, its ClientApps with it) or starts a random dead one, never below
``--min-alive`` nodes, at most ``--max-events`` times.

It checks what the issue asks: the run completes; every round's aggregate comes only from the
clients that replied (the round's ``clients`` is its replies; the rest are exclusions with their
node and reason); no client's state is lost when its block moves (``state_lost`` in
``rounds.jsonl``: a client that trained from an older state than its last round's, which the
server detects from each reply's ``state-round``); and it prints the table (round, nodes alive,
replies, excluded, round time, the event before the round) and the final metrics, with the
round-time cost of a failure (a round that lost a node against the median of the others).

    python benchmarks/churn.py --data-dir $COROLLA_DATA --json docs/results/churn.json
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from corolla.config import resolve  # noqa: E402
from launcher.cli import APP_DIR, Cluster, flower_bin, write_run_config  # noqa: E402


def round_lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def drill(out: Path, nodes: int, rounds: int, every: int, min_alive: int, max_events: int, seed: int,
          data_dir: str, preset: str, sets: list[str], timeout: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    shared = out / "shared-state"
    ncs = [{"clients": "auto", "state-dir": str(shared), "data-dir": data_dir} for _ in range(nodes)]
    overrides = dict(kv.split("=", 1) for kv in sets)
    overrides["num-rounds"] = str(rounds)
    cfg = resolve(preset, {k: v for k, v in overrides.items()})
    run_cfg = {"preset": preset, "set": " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items()),
               "out-dir": str(out), "data-dir": data_dir, "resume-dir": "", "min-nodes": nodes,
               "provenance": "", "mode": "local", "track": ""}
    cluster = Cluster(out, "local", nodes, data_dir, ncs)
    rng = random.Random(seed)
    events: list[dict] = []
    t0 = time.monotonic()
    try:
        conn = cluster.start()
        rc_file = out / "run-config.toml"
        write_run_config(rc_file, run_cfg)
        log = open(cluster.logs / "flwr-run.log", "ab")
        proc = subprocess.Popen([flower_bin("flwr"), "run", str(APP_DIR), conn, "--stream", "--run-config",
                                 str(rc_file)], stdout=log, stderr=subprocess.STDOUT, env=cluster.env,
                                cwd=str(APP_DIR), start_new_session=True)
        cluster.procs.insert(0, proc)
        seen = 0
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            cluster.check_starts()   # a node whose port was taken before it bound starts again (launcher/ports.py)
            if (out / "summary.json").exists():
                break
            done = len(round_lines(out / "rounds.jsonl"))
            if done > seen:
                seen = done
                if done % every == 0 and done < rounds and len(events) < max_events:
                    live, dead = sorted(cluster.node_procs), sorted(set(range(nodes)) - set(cluster.node_procs))
                    kill = bool(live) and (not dead or rng.random() < 0.5) and len(live) > min_alive
                    if kill:
                        i = rng.choice(live)
                        cluster.kill_node(i)
                    elif dead:
                        i = rng.choice(dead)
                        cluster.start_node(i)
                    else:
                        continue
                    events.append({"after_round": done, "action": "kill" if kill else "start", "node": i,
                                   "alive": len(cluster.node_procs), "t_s": round(time.monotonic() - t0, 1)})
                    print(f"after round {done}: {'killed' if kill else 'started'} node {i}; "
                          f"{len(cluster.node_procs)} alive", flush=True)
            time.sleep(0.2)
        proc.wait(timeout=60)
    finally:
        cluster.stop()
    wall = time.monotonic() - t0
    return report(out, events, nodes, rounds, every, min_alive, seed, preset, wall)


def report(out: Path, events: list[dict], nodes: int, rounds: int, every: int, min_alive: int, seed: int,
           preset: str, wall: float) -> dict:
    """The drill's table. With fused evaluation, round r's record is written when round r+1's
    replies are in, so an event taken when r records exist hits the message of round r+2."""
    summary = json.loads((out / "summary.json").read_text())
    recs = round_lines(out / "rounds.jsonl")
    table, lost = [], []
    alive = nodes
    for r in recs:
        ph = r["phases"]
        ev = [e for e in events if e["after_round"] + 2 == r["round"] or   # the last round's evaluation too
              r["round"] == len(recs) and e["after_round"] + 2 > r["round"]]
        if ev:
            alive = ev[-1]["alive"]
        lost += [c for p in ph for c in p.get("state_lost", [])]
        table.append({"round": r["round"], "nodes_alive": alive,
                      "replies": sum(p["replies"] for p in ph), "clients": r.get("clients"),
                      "excluded": sum(len(p["excluded"]) for p in ph), "wall_s": round(r["wall_s"], 2),
                      "event": ", ".join(f"{e['action']} node {e['node']}" for e in ev)})
    late = [e for e in events if e["after_round"] + 2 > len(recs)]
    calm = [row["wall_s"] for row in table if not row["event"] and not row["excluded"]]
    hit = [row["wall_s"] for row in table if row["event"].startswith("kill") or row["excluded"]]
    res = {"command": "python " + " ".join(sys.argv[:1] + [x for x in sys.argv[1:] if x != "--table-only"]),
           "preset": preset, "nodes": nodes, "rounds": rounds,
           "every": every, "min_alive": min_alive, "seed": seed, "events": events, "table": table,
           "events_after_the_last_round_record": late,
           "state_lost": sorted(set(lost)), "status": summary["status"],
           "rounds_completed": summary["rounds_completed"], "metrics": summary["metrics"],
           "exclusions": sum(row["excluded"] for row in table), "wall_s": round(wall, 1),
           "median_round_s_calm": round(statistics.median(calm), 2) if calm else None,
           "median_round_s_after_a_kill": round(statistics.median(hit), 2) if hit else None}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--every", type=int, default=1, help="an event after every N-th round")
    ap.add_argument("--min-alive", type=int, default=6)
    ap.add_argument("--max-events", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="fedavg-mf-ml100k")
    ap.add_argument("--set", action="append", default=[], help="config overrides key=value")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "churn"))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--table-only", action="store_true", help="recompute the table of the drill in --out/--json")
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    if a.table_only:   # the table again from an earlier drill's folder and JSON (its events)
        old = json.loads(Path(a.json).read_text())
        res = {**old, **report(out, old["events"], old["nodes"], old["rounds"], old["every"], old["min_alive"],
                               old["seed"], old["preset"], old["wall_s"])}
        res["command"] = old["command"]
    else:
        if out.exists():
            import shutil
            shutil.rmtree(out)
        res = drill(out, a.nodes, a.rounds, a.every, a.min_alive, a.max_events, a.seed,
                    str(Path(a.data_dir).resolve()), a.preset, a.set, a.timeout)
    print(f"{'round':>5} {'alive':>5} {'replies':>7} {'clients':>7} {'excl':>5} {'wall s':>7}  event in this round")
    for row in res["table"]:
        print(f"{row['round']:>5} {row['nodes_alive']:>5} {row['replies']:>7} {row['clients']!s:>7} "
              f"{row['excluded']:>5} {row['wall_s']:>7}  {row['event']}")
    print(f"status {res['status']}, rounds {res['rounds_completed']}, exclusions {res['exclusions']}, "
          f"state lost {res['state_lost']}, metrics {res['metrics']}")
    print(f"median round: {res['median_round_s_calm']} s calm, {res['median_round_s_after_a_kill']} s after a kill")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    ok = res["status"] == "completed" and res["rounds_completed"] == a.rounds and not res["state_lost"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
