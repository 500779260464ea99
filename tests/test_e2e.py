"""End to end over real Flower processes: a SuperLink and SuperNodes on loopback (``corolla run``).

Each test starts its own SuperLink and SuperNodes on free loopback ports through the CLI, so
what is checked is what a user runs. The config is small (20 logical clients, d=8) so that a
run takes about a minute on 2 cores.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flower_io import compat
from launcher import procs
from launcher.cli import _path_with_interpreter, flower_bin
from launcher.ports import free_port as _free_port
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
SMALL = ["num-rounds=3", "split=loo", "partition=blocks", "num-clients=20", "protocol=loo", "dim=8",
         "loss=bpr", "train-samples=per-positive", "batch-size=1024", "lr=0.05",
         "compat-fedcia-metrics=false", "select-metric=ndcg@10", "patience=0", "phase-timeout=120"]


def corolla(args, out, data_dir, path=(), **kw):
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", "fedavg-mf-ml100k", "--data-dir", data_dir,
           "--out", str(out)] + args
    env = dict(os.environ, COROLLA_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(ROOT), *map(str, path)]))
    # as a command typed at a terminal: SIGINT at its default, even when pytest itself was started
    # in the background of a script (which ignores SIGINT, and Python then keeps it ignored)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_default_sigint, **kw)


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sets(extra=()):
    return [a for s in list(SMALL) + list(extra) for a in ("--set", s)]


def wait_for(path: Path, text: str, proc, timeout=240):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file() and text in path.read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended before '{text}':\n{proc.stdout.read()}")
        time.sleep(0.3)
    raise AssertionError(f"'{text}' not in {path} after {timeout} s")


class RunWatch:
    """Every process of one ``corolla run`` found by what it is, sampled while it runs: its
    session (the test starts it in a session of its own), its ``FLWR_HOME`` (``OUT/flwr``, in the
    environment of everything Flower and Corolla start) and its parent chain; then
    :meth:`leftovers`: the ones still running once the command has exited."""

    def __init__(self, proc, out: Path):
        import threading
        self.proc, self.home = proc, str(out / "flwr")
        self.seen: dict[int, procs.Proc] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        table = procs.processes()
        found = {q.pid: q for q in procs.run_processes(self.home, [self.proc.pid])}
        found.update({q.pid: q for q in table.values() if q.sid == self.proc.pid and q.alive})
        found.pop(self.proc.pid, None)
        for pid, q in found.items():
            old = self.seen.get(pid)
            # a child sampled between its fork and its exec shows its parent's command line (a
            # ServerApp forked by the SuperExec read as "flower-superexec"): the same process (same
            # start time) seen again keeps its latest program
            if old is None or (old.start == q.start and old.cmd != q.cmd):
                self.seen[pid] = q

    def _watch(self) -> None:
        while not self.done.is_set() and self.proc.poll() is None:
            self._sample()
            self.done.wait(0.3)

    def leftovers(self) -> list[procs.Proc]:
        assert self.proc.poll() is not None, "the command is still running"
        self.done.set()
        self.thread.join()
        table = procs.processes()
        left = [table[pid] for pid, q in self.seen.items()
                if pid in table and table[pid].start == q.start and table[pid].alive]
        left += [q for q in table.values() if q.alive and q.pid not in self.seen
                 and (q.env_home == self.home or q.sid == self.proc.pid)]
        return left

    def kinds(self) -> set[str]:
        """What was seen, by program: flower-superlink, flwr-serverapp, launcher.warm, ... A fork
        server forked from its SuperNode (``launcher.warm.fork_server``) has the SuperNode's
        command line: it is told by its parent, a SuperNode, and counts as ``launcher.warm serve``."""
        names = ("flower-superlink", "flower-superexec", "flwr-serverapp", "flwr run", "launcher.supernode",
                 "launcher.warm serve", "launcher.warm superexec", "flwr-simulation")
        out = {n for q in self.seen.values() for n in names if n in q.cmd}
        nodes = {pid for pid, q in self.seen.items() if "launcher.supernode" in q.cmd}
        if any(q.ppid in nodes and "launcher.supernode" in q.cmd for q in self.seen.values()):
            out.add("launcher.warm serve")
        return out


def inproc(tmp_path, data_dir, nodes, extra=""):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    return run_federation(t, {"preset": "fedavg-mf-ml100k", "set": " ".join(SMALL) + " " + extra,
                              "out-dir": str(tmp_path / f"inproc{nodes}"), "data-dir": data_dir})


def test_real_superlink_run_matches_twenty_node_run_and_excludes_bad_payloads(tmp_path, data_dir):
    out = tmp_path / "run"
    p = corolla(["--nodes", "2"] + sets(), out, data_dir)
    watch = RunWatch(p, out)
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log
    assert re.search(r"round +3/\d+ .*\| valid \S+=[0-9.]+ test", log)  # live progress on the terminal
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "completed" and s["rounds_completed"] == 3
    # corolla run's SuperNodes are `corolla supernode`: short waits, ClientApps forked warm
    node_log = (out / "logs" / "supernode0.log").read_text()
    assert node_log.count("corolla warm: ClientApp process") >= 4   # handshake + 3 rounds
    # 20 logical clients on 2 real SuperNodes == the same 20 clients on 20 nodes
    ref = inproc(tmp_path, data_dir, 20)
    assert s["metrics"] == ref["metrics"]
    item_table = 1682 * 8 * 4 + 128
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["phases"][0]["bytes_up"] for r in rounds] == [20 * item_table] * 3
    assert [r["phases"][0]["bytes_down"] for r in rounds] == [2 * item_table] * 3
    assert (out / "learning_curve.png").is_file()
    # no process left behind: SuperLink, SuperExecs, ServerApp, SuperNodes, fork servers, ClientApps
    assert not watch.leftovers()
    assert {"flower-superlink", "flwr-serverapp", "launcher.supernode", "launcher.warm serve"} <= watch.kinds()


def test_nan_and_wrong_shape_payloads_are_excluded(tmp_path, data_dir):
    out = tmp_path / "faults"
    # test-only fault injection (tests/faults.py) in the SuperNodes' ClientApps, by their PYTHONPATH
    p = corolla(["--nodes", "2", "--node-config", "0:fault-nan=3", "--node-config", "1:fault-shape=12"]
                + sets(["num-rounds=2"]), out, data_dir, path=[ROOT / "tests" / "fault_hook"])
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    for r in rounds:
        ex = {e["client"]: e["reason"] for e in r["phases"][0]["excluded"]}
        assert set(ex) == {3, 12} and "non-finite" in ex[3] and "shape" in ex[12]
    assert re.search(r"logical client 3 \(node \d+\): invalid payload", (out / "logs" / "flwr-run.log").read_text())


def test_node_killed_mid_round_costs_only_its_contribution(tmp_path, data_dir):
    out = tmp_path / "kill"
    p = corolla(["--nodes", "3"] + sets(["num-rounds=4", "phase-timeout=60"]), out, data_dir)
    wait_for(out / "progress.log", "round   2/4 train", p)
    victim = json.loads((out / "logs" / "pids.json").read_text())["supernodes"][2]
    os.killpg(victim, signal.SIGKILL)
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 4 and rounds[0]["clients"] == 20
    assert rounds[-1]["clients"] == 14  # the third node's 6 clients are gone
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "completed"


# Ctrl-C (SIGINT to the whole group) is a drill (-m drill); SIGTERM to the CLI alone, where the launcher
# must end every process itself, stays in the README's test command
@pytest.mark.parametrize("how", [pytest.param("ctrl-c", marks=pytest.mark.drill), "sigterm"])
def test_killed_run_resumes_to_the_same_final_metrics(tmp_path, data_dir, how):
    """Ctrl-C or ``kill`` (SIGTERM, as ``docker stop`` sends) of ``corolla run`` and a ``--resume``:
    the same final metrics as an uninterrupted run, and after each command no process of it is
    left: found by session, ``FLWR_HOME`` and parent chain, not by the groups the launcher made
    (a ServerApp once outlived such a kill by 20 minutes, reparented to init)."""
    out = tmp_path / "resume"
    p = corolla(["--nodes", "2"] + sets(["num-rounds=4"]), out, data_dir)
    watch = RunWatch(p, out)
    wait_for(out / "rounds.log", "round   2/4", p)   # round 2 recorded (with round 3's message)
    if how == "ctrl-c":
        os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    else:
        os.kill(p.pid, signal.SIGTERM)   # kill / docker stop: the CLI alone
    p.communicate(timeout=120)
    assert p.returncode != 0
    assert not watch.leftovers()
    assert {"flower-superlink", "flwr-serverapp", "launcher.supernode"} <= watch.kinds()
    done = len((out / "rounds.jsonl").read_text().splitlines())
    assert 2 <= done < 4
    q = corolla(["--resume", str(out), "--nodes", "2"], out, data_dir)
    again = RunWatch(q, out)
    # --resume ignores --preset/--set and reuses the run's config
    log, _ = q.communicate(timeout=600)
    assert q.returncode == 0, log
    assert not again.leftovers()
    s = json.loads((out / "summary.json").read_text())
    ref = inproc(tmp_path, data_dir, 2, "num-rounds=4")
    assert s["rounds_completed"] == 4
    assert s["metrics"] == ref["metrics"] and s["last_round_metrics"] == ref["last_round_metrics"]


def test_simulation_runtime_twenty_nodes_equal_two(tmp_path, data_dir):
    out = tmp_path / "sim"
    p = corolla(["--mode", "sim", "--nodes", "20"] + sets(), out, data_dir)
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log
    s = json.loads((out / "summary.json").read_text())
    assert s["metrics"] == inproc(tmp_path, data_dir, 2)["metrics"]


def superlink_equals_in_process(tmp_path, data_dir, preset: str, small: list[str], nodes: int = 2,
                                inproc_nodes: int = 3, timeout: int = 900) -> dict:
    """Run ``preset`` through ``corolla run`` (a real SuperLink and ``nodes`` SuperNodes) and in
    process on ``inproc_nodes`` nodes; the metrics and bytes must be the same. Returns the summary.
    Methods that send what several clients of a node share once per node message (LPSFed's
    reference kernel, Dist-FedAvg's evaluation item table) have node-dependent bytes: they compare with the
    same number of nodes in process."""
    out = tmp_path / preset
    cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", preset, "--data-dir", data_dir,
           "--out", str(out), "--nodes", str(nodes)] + [a for s in small for a in ("--set", s)]
    env = dict(os.environ, COROLLA_OFFLINE="1", PYTHONPATH=str(ROOT))
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.loads((out / "summary.json").read_text())
    t = InProcessTransport(partitions(inproc_nodes, {"data-dir": data_dir}))
    ref = run_federation(t, {"preset": preset, "set": " ".join(small), "out-dir": str(tmp_path / f"{preset}-inproc"),
                             "data-dir": data_dir})
    same = s["metrics"] == ref["metrics"] and s.get("metrics_paper_compat") == ref.get("metrics_paper_compat")
    assert same, run_difference(out, tmp_path / f"{preset}-inproc")
    assert s["bytes_up"] == ref["bytes_up"] and s["bytes_down"] == ref["bytes_down"], \
        run_difference(out, tmp_path / f"{preset}-inproc")
    return s


def run_difference(real: Path, ref: Path) -> str:
    """What a failing comparison needs to be diagnosed after the fact (the real run's own output is
    not shown when it exits 0): each round's clients, metrics, train loss and exclusions in both
    runs, the real run's progress log and the warnings and errors of its processes' logs."""
    def rounds(d: Path) -> dict[int, dict]:
        f = d / "rounds.jsonl"
        return {r["round"]: r for r in map(json.loads, f.read_text().splitlines())} if f.exists() else {}

    a, b = rounds(real), rounds(ref)

    def brief(rec: dict) -> dict:
        out = {k: rec[k] for k in ("clients", "users", "metrics", "valid") if k in rec}
        out["train-loss"] = rec.get("train", {}).get("train-loss")
        out["excluded"] = [e for ph in rec.get("phases", []) for e in ph.get("excluded", [])]
        return out

    lines = ["metrics or bytes differ from the in-process run's; per round (real | in process):"]
    for r in sorted(set(a) | set(b)):
        ra, rb = brief(a.get(r, {})), brief(b.get(r, {}))
        lines.append(f"round {r}: {'same' if ra == rb else f'{ra} | {rb}'}")
    prog = real / "progress.log"
    if prog.exists():
        lines += ["progress.log of the real run:", prog.read_text()[-4000:]]
    warn = []
    for f in sorted((real / "logs").glob("*.log")):
        warn += [f"{f.name}: {x[:300]}" for x in f.read_text(errors="replace").splitlines()
                 if ("WARNING" in x or "ERROR" in x or "Traceback" in x) and "--insecure" not in x]
    return "\n".join(lines + ["warnings and errors of its processes:"] + warn[-60:])


def test_fedca_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """FedCA's personalised downloads (Q_g[u] to the aggregated clients only) and its fused
    evaluation over 2 real SuperNodes give the in-process numbers and bytes."""
    superlink_equals_in_process(tmp_path, data_dir, "fedca-pmf-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "local-epochs=2", "phase-timeout=120"])


def test_ufgraphfr_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """UFGraphFR over 2 real SuperNodes (the encoder runs in each node's ClientApp process, the
    vectors stay in the client state; personalised tables go to each user) gives the in-process
    numbers and bytes on 54 users."""
    superlink_equals_in_process(tmp_path, data_dir, "ufgraphfr-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "phase-timeout=300"])


@pytest.mark.one_more_method
def test_metamf_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """MetaMF over 2 real SuperNodes (each user's generated item table and RP weights down, its
    gradients w.r.t. them up, the server's back-propagation through the meta network) gives the
    in-process numbers and bytes on 54 users (small generator widths)."""
    superlink_equals_in_process(tmp_path, data_dir, "metamf-ufgraphfr-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "metamf-hidden=16", "metamf-memory=8",
                                 "metamf-user-dim=8", "lr=0.01", "phase-timeout=120"])


def test_lpsfed_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """LPSFed's 4 subgraph clients on 2 real SuperNodes (statistics phase, reference kernel,
    personalised MLPs and margins) give the in-process numbers and bytes."""
    s = superlink_equals_in_process(tmp_path, data_dir, "lpsfed-ml100k",
                                    ["num-rounds=2", "local-epochs=2", "lpsfed-freeze-epochs=2", "lgcn-phi=16",
                                     "batch-size=2048", "eval-every=1"], inproc_nodes=2)
    assert s["per_client_metrics"].keys() == {"0", "1", "2", "3"}


@pytest.mark.one_more_method
def test_dist_fedavg_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """Dist-FedAvg's expansion, matching and row pulls over 2 real SuperNodes give the in-process
    numbers and bytes."""
    superlink_equals_in_process(tmp_path, data_dir, "distfedavg-ml100k",
                                ["num-rounds=2", "min-user-interactions=200", "clients-per-round=6",
                                 "local-epochs=3"], inproc_nodes=2)


# a drill on the default line (tests/test_lines.py's stock nodes from their own venv serve a run
# submitted the same way there); .ci/run runs it in the other line's phase, for that line's Fleet flags
@pytest.mark.drill
def test_submit_to_a_running_superlink_with_auto_nodes(tmp_path, data_dir):
    """``corolla run --superlink HOST:PORT`` against a SuperLink and two stock ``flower-supernode``
    with ``clients="auto"`` started apart (as compose does), with this venv's Flower line's Fleet
    flags (CI runs it on both lines): the run completes with the numbers of the
    in-process run, exit 0; a run that fails on the nodes exits non-zero (``flwr run`` would
    exit 0)."""
    from launcher.cli import wait_port

    env = dict(os.environ, COROLLA_OFFLINE="1", PYTHONPATH=str(ROOT), FLWR_HOME=str(tmp_path / "home"),
               PATH=_path_with_interpreter(os.environ.get("PATH", "")))
    control, fleet_port = _free_port(), _free_port()
    fleet = compat.fleet_address("127.0.0.1", control, fleet_port)   # this Flower line's Fleet API
    procs = []
    try:
        link = subprocess.Popen([flower_bin("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                                 "--host", "127.0.0.1", "--port", str(control),
                                 *compat.superlink_fleet_args("127.0.0.1", fleet_port)], env=env, cwd=tmp_path,
                                start_new_session=True, stdout=open(tmp_path / "link.log", "w"), stderr=subprocess.STDOUT)
        procs.append(link)
        wait_port(control, link)
        wait_port(int(fleet.rsplit(":", 1)[1]), link)
        for i in range(2):
            nc = f'clients="auto" data-dir="{data_dir}" state-dir="{tmp_path / "state"}"'
            procs.append(subprocess.Popen([flower_bin("flower-supernode"), "--insecure", "--superlink", fleet,
                                           "--host", "127.0.0.1", "--port", str(_free_port()), "--node-config", nc],
                                          env=env, cwd=tmp_path, start_new_session=True,
                                          stdout=open(tmp_path / f"node{i}.log", "w"), stderr=subprocess.STDOUT))
        base = [sys.executable, "-m", "launcher.cli", "run", "--superlink", f"127.0.0.1:{control}", "--nodes", "2",
                "--preset", "fedavg-mf-ml100k"] + sets()
        p = subprocess.run(base + ["--out", str(tmp_path / "ok")], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"round +3/\d+ .*\| valid \S+=[0-9.]+ test", p.stdout) and "completed" in p.stdout   # streamed
        s = json.loads((tmp_path / "ok" / "summary.json").read_text())
        assert s["metrics"] == inproc(tmp_path, data_dir, 2)["metrics"]
        bad = ["--set", "dataset=ml-1m", "--set", "split=ratio", "--set", "eval-negatives=1"]
        q = subprocess.run(base + bad + ["--out", str(tmp_path / "bad")], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        assert q.returncode == 1 and "did not complete: finished:failed" in q.stderr, q.stdout + q.stderr
    finally:
        for pr in procs:
            try:
                os.killpg(pr.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            pr.wait()


@pytest.mark.one_more_method
def test_fedprox_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """FedProx (added by docs/adding-a-method.md: a table entry, a client file, a preset) runs
    through a real SuperLink and 2 SuperNodes with the in-process numbers and bytes."""
    superlink_equals_in_process(tmp_path, data_dir, "fedprox-mf-ml100k",
                                ["num-rounds=2", "fedprox-mu=0.1", "patience=0"], inproc_nodes=2)


@pytest.mark.one_more_method
def test_perfedrec_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """PerFedRec (its own draw of 16 clients a round, K-means, the global and cluster tables sent
    once per node, the cluster ids per client, every client evaluated with the next message) over
    2 real SuperNodes gives the in-process numbers and bytes (in process on 2 nodes too: the
    tables go once per node); 3 rounds, so the clients of round 3 start from their cluster's table."""
    superlink_equals_in_process(tmp_path, data_dir, "perfedrec-pmf-ml100k",
                                ["num-rounds=3", "min-user-interactions=300", "local-epochs=2", "clients-per-round=16",
                                 "perfedrec-clusters=3", "phase-timeout=120"], inproc_nodes=2)


@pytest.mark.one_more_method
def test_fedfast_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """FedFast (cluster-by-cluster draw, the server's user vectors to each client, every client
    evaluated with the global model) over 2 real SuperNodes gives the in-process numbers and bytes
    (in process on 2 nodes too: the global table goes once per node)."""
    superlink_equals_in_process(tmp_path, data_dir, "fedfast-pmf-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "local-epochs=2", "clients-per-round=16",
                                 "fedfast-clusters=3", "phase-timeout=120"], inproc_nodes=2)


@pytest.mark.one_more_method
def test_pfedgraph_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """pFedGraph (each client's graph aggregate and target down, the similarity term in round 2's
    training) over 2 real SuperNodes gives the in-process numbers and bytes."""
    superlink_equals_in_process(tmp_path, data_dir, "pfedgraph-pmf-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "local-epochs=2", "phase-timeout=120"])


@pytest.mark.one_more_method
def test_fedrecon_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """FedRecon over 2 real SuperNodes (the global item table down once per node, each client
    reconstructs a fresh user vector and uploads only the rows it trained, item-upload=rows; no
    client state between rounds) gives the in-process numbers and bytes."""
    superlink_equals_in_process(tmp_path, data_dir, "fedrecon-ufgraphfr-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "item-upload=rows", "phase-timeout=120"],
                                inproc_nodes=2)


@pytest.mark.one_more_method
def test_fedpergnn_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """FedPerGNN over 2 real SuperNodes (round 1's expansion and matching through every client, the
    network and the item table once per node, per client its neighbour rows; 8 clients a round
    upload gradients with 100 pseudo items and Laplace noise) gives the in-process numbers and bytes
    on 54 users."""
    superlink_equals_in_process(tmp_path, data_dir, "fedpergnn-ufgraphfr-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "clients-per-round=8",
                                 "fedpergnn-neighbours=10", "fedpergnn-history-len=20", "fedpergnn-pseudo-items=100",
                                 "phase-timeout=120"], inproc_nodes=2)


@pytest.mark.one_more_method
def test_central_reference_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """The centralised reference (one logical client holding every user, on one of the 2 real
    SuperNodes; nothing is uploaded) gives the in-process numbers."""
    superlink_equals_in_process(tmp_path, data_dir, "central-mf-fedca-ml100k",
                                ["num-rounds=2", "min-user-interactions=300", "phase-timeout=120"])


@pytest.mark.one_more_method
def test_gga_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """Graph-guided aggregation on the silo harness (FedCIA Table 3's GGA column: each client's
    item table up, its graph-aggregated table and the global one down, evaluation with the next
    message) over 2 real SuperNodes gives the in-process numbers and bytes on 54 users."""
    superlink_equals_in_process(tmp_path, data_dir, "gga-mlp-ml100k-943",
                                ["num-rounds=2", "split=ratio", "min-user-interactions=300", "patience=0",
                                 "phase-timeout=120"], inproc_nodes=2)


def test_one_user_full_ranking_through_real_superlink_equals_in_process(tmp_path, data_dir):
    """PFedRec on FedCIA's protocol (one-user clients ranking every item, FedCIA's metrics) over
    2 real SuperNodes gives the in-process numbers and bytes on 54 users."""
    superlink_equals_in_process(tmp_path, data_dir, "pfedrec-fedcia-ml100k",
                                ["num-rounds=2", "split=ratio", "min-user-interactions=300", "phase-timeout=120"],
                                inproc_nodes=2)
