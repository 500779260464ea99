"""``corolla`` command line: ``corolla run``, ``corolla presets [--long]``, ``corolla keys
[--method NAME]`` and ``corolla methods``.

``corolla run --preset NAME [--set key=value ...] [--mode local|sim|inproc] [--nodes N]
[--data-dir DIR] [--out DIR] [--resume RUN_DIR] [--export-topk K] [--config FILE]
[--superlink HOST:PORT [--root-certificates CA]]``

* ``--mode local`` (default): starts a SuperLink and N SuperNode processes on loopback (free
  ports; N defaults to one per core, at most 8), submits the app with ``flwr run``, prints
  progress, and stops every process it started, also on Ctrl-C or failure. Exit code 0 only when
  ``OUT/summary.json`` says ``completed`` (``flwr run`` itself exits 0 on failure).
* ``--superlink HOST:PORT``: starts nothing; submits to a running SuperLink (compose, another
  machine), streams the ServerApp's log and exits 0 only if the SuperLink reports the run
  completed.
* ``--mode sim``: a simulation SuperLink (Flower's simulation runtime, Ray) with N virtual nodes.
* ``--mode inproc``: no Flower runtime: the ServerApp's loop calls the ClientApp's handler for N
  nodes in this process (``launcher.inproc``). Same numbers as the other modes (tested); for
  sweeps and ablations on one machine, not a deployment.

``local`` and ``sim`` run through Flower's own processes; nothing is simulated by Corolla itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from corolla import extras, provenance
from corolla.config import ConfigError, parse_overrides, resolve
from corolla.util import atomic_write_json
from flower_io import compat
from flower_io.pulls import DEFAULT_PULL_BACKOFF
from flower_io.pulls import ENV as PULL_BACKOFF_ENV
from launcher import fab, procs
from launcher.ports import free_port, listening, port_taken
from launcher.supernode import DEFAULT_REPLY_POLL, LOCAL_IDLE_POLL, seconds_arg

APP_DIR = Path(__file__).resolve().parents[1]
NODE_NICE = 10            # SuperNodes' niceness when there are more of them than cores (Cluster._spawn)
SUPEREXEC_POLL_S = 0.05   # FLWR_SUPEREXEC_TASK_POLL_INTERVAL of the processes Corolla starts (Flower: 1 s)
START_TRIES = 3           # starts of the SuperLink or of one SuperNode whose port another program took first


def _path_with_interpreter(path: str) -> str:
    """PATH with this interpreter's bin directory first: the SuperLink and SuperNodes start
    flwr-serverapp / flwr-clientapp by name, and they must be the same Flower as ours."""
    return os.pathsep.join([str(Path(sys.executable).parent), path]).rstrip(os.pathsep)


def flower_bin(name: str) -> str:
    """Flower's command ``name`` (flwr, flower-superlink, flower-supernode), looked up on the same
    PATH the children get: this interpreter's bin directory first (a venv used without being
    activated), then PATH."""
    import shutil
    found = shutil.which(name, path=_path_with_interpreter(os.environ.get("PATH", "")))
    if found:
        return found
    raise FileNotFoundError(f"Flower's command '{name}' is neither beside {sys.executable} nor on PATH; "
                            "install the project (pip install -e .) into the interpreter that runs corolla")


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args[0]} exited with code {proc.returncode} before listening on {port}")
        if listening(port):
            return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def _toml_str(v: str) -> str:
    return json.dumps(str(v))


class Cluster:
    """SuperLink + SuperNodes (or a simulation SuperLink) on loopback, stopped on exit."""

    def __init__(self, out: Path, mode: str, nodes: int, data_dir: str | None, node_configs=None,
                 idle_poll: float = LOCAL_IDLE_POLL, reply_poll: float = DEFAULT_REPLY_POLL,
                 clientapp_start: str = "fork", pull_backoff: float = DEFAULT_PULL_BACKOFF):
        self.out, self.mode, self.nodes, self.data_dir = out, mode, nodes, data_dir
        self.pull_backoff = pull_backoff
        self.idle_poll, self.reply_poll, self.clientapp_start = idle_poll, reply_poll, clientapp_start
        self.node_configs = node_configs
        self.procs: list[subprocess.Popen] = []
        self.subreaper = False   # set by start(): this process adopts the run's orphans
        self.node_procs: dict[int, subprocess.Popen] = {}
        self.starting: dict[int, tuple[int, int]] = {}   # node -> (its port, its log's size at start) until it listens
        self.start_tries: dict[int, int] = {}
        self.link: subprocess.Popen | None = None
        self.fleet = ""     # where the SuperNodes reach the SuperLink's Fleet API (host:port)
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # Flower's config lives in the run folder, where `flwr ls/log/stop` find it (printed at start)
        self.flwr_home = out / "flwr"
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        self.run_id = uuid.uuid4().hex   # every process of this launch carries it (launcher/procs.py)
        self.env = dict(os.environ, FLWR_HOME=str(self.flwr_home), **{procs.MARKER: self.run_id},
                        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", FLWR_DISABLE_UPDATE_CHECK="1",
                        PYTHONUNBUFFERED="1")
        # the SuperExecs that the SuperLink and each SuperNode start (and that start the
        # ServerApp and every ClientApp process) look for a task every second by default
        self.env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", str(SUPEREXEC_POLL_S))
        self.env[PULL_BACKOFF_ENV] = str(pull_backoff)   # the ServerApp's pulls (it inherits the SuperLink's env)
        self.env["PYTHONPATH"] = os.pathsep.join([str(APP_DIR), self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.env["PATH"] = _path_with_interpreter(self.env.get("PATH", ""))

    def _spawn(self, name: str, cmd: list[str], node: bool = False) -> subprocess.Popen:
        """Start ``cmd`` in its own process group (stopped as one). The SuperLink gets its own session;
        SuperNodes stay in this command's session: on Linux with scheduler autogroups each session
        is one CPU share, so all nodes together get the share of the SuperLink and its ServerApp
        instead of one share each. With more nodes than cores they also run at nice
        :data:`NODE_NICE`: a ServerApp must start within Flower's 30 s task-claim window
        (``HEARTBEAT_DEFAULT_INTERVAL``), which 32 SuperNodes on 2 cores otherwise starve."""
        log = open(self.logs / f"{name}.log", "ab")
        if node:
            crowded = self.nodes > (os.cpu_count() or 1)

            def prepare():
                procs.die_with_parent()
                if crowded:
                    os.nice(NODE_NICE)
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                 cwd=self.out, process_group=0, preexec_fn=prepare)
        else:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.out,
                                 start_new_session=True, preexec_fn=procs.die_with_parent)
        self.procs.append(p)
        return p

    def start_node(self, i: int) -> subprocess.Popen:
        """Start SuperNode ``i`` (again, after :meth:`kill_node`: the churn drill)."""
        nc = self.node_configs[i] if self.node_configs else {"partition-id": i, "num-partitions": self.nodes}
        nc = dict(nc)
        if self.data_dir and "data-dir" not in nc:
            nc["data-dir"] = self.data_dir
        nc.setdefault("state-dir", str(self.out / "node-state" / f"node{i}"))
        ncs = " ".join(f"{k}={_toml_str(v) if isinstance(v, str) else v}" for k, v in nc.items())
        port, mark = free_port(), self._log_size(f"supernode{i}")
        p = self._spawn(f"supernode{i}", [sys.executable, "-m", "launcher.supernode",
                                          "--idle-poll", str(self.idle_poll), "--reply-poll", str(self.reply_poll),
                                          "--clientapp-start", self.clientapp_start,
                                          "--pull-backoff", str(self.pull_backoff),
                                          "--insecure", "--superlink", self.fleet,
                                          "--host", "127.0.0.1", "--port", str(port),
                                          "--node-config", ncs], node=True)
        self.node_procs[i] = p
        self.starting[i] = (port, mark)
        self.start_tries[i] = self.start_tries.get(i, 0) + 1
        return p

    def _write_pids(self) -> None:
        """``logs/pids.json``: the SuperLink's and each SuperNode's pid (read by benchmarks/scale.py)."""
        atomic_write_json(self.logs / "pids.json", {"superlink": self.link.pid,
                                                    "supernodes": [self.node_procs[i].pid for i in sorted(self.node_procs)]})

    def _log_size(self, name: str) -> int:
        log = self.logs / f"{name}.log"
        return log.stat().st_size if log.exists() else 0

    def check_starts(self) -> list[int]:
        """Start again, on another port, each SuperNode that ended before it listened on its
        runtime port because another program took that port first (``launcher/ports.py``), at
        most :data:`START_TRIES` starts per node; a node that ended for any other reason is left
        to the run (it starts without it after the min-nodes wait). Called while the run goes;
        returns the nodes started again."""
        again = []
        for i, (port, mark) in list(self.starting.items()):
            p = self.node_procs.get(i)
            if p is None or listening(port):   # killed on purpose (kill_node), or up
                del self.starting[i]
                continue
            if p.poll() is None:
                continue
            del self.starting[i]
            if not port_taken(self.logs / f"supernode{i}.log", mark):
                continue
            if self.start_tries[i] >= START_TRIES:
                print(f"corolla: SuperNode {i} could not bind a free port in {START_TRIES} starts "
                      f"(logs/supernode{i}.log); the run goes on without it", file=sys.stderr, flush=True)
                continue
            print(f"corolla: SuperNode {i} ended before it listened: 127.0.0.1:{port} was taken by another "
                  f"program; starting it again on another port", file=sys.stderr, flush=True)
            self.procs.remove(p)
            self.start_node(i)
            again.append(i)
        if again:
            self._write_pids()
        return again

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and the ClientApps it started (its process group)."""
        p = self.node_procs.pop(i)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def start(self) -> str:
        # orphans of the run (a ServerApp whose SuperExec ended first, ...) come back to this process
        # instead of init, so that stop() still finds them among its descendants (launcher/procs.py)
        self.subreaper = procs.become_subreaper()
        for attempt in range(1, START_TRIES + 1):
            port, mark = free_port(), self._log_size("superlink")
            cmd = [flower_bin("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                   "--host", "127.0.0.1", "--port", str(port)]
            if self.mode == "sim":
                cmd += ["--simulation"]
            else:   # the Fleet API: its own gRPC port on Flower 1.39, the shared HTTP port on 1.42
                fleet_port = free_port()
                cmd += compat.superlink_fleet_args("127.0.0.1", fleet_port)
                self.fleet = compat.fleet_address("127.0.0.1", port, fleet_port)
            link = self._spawn("superlink", cmd)
            try:
                wait_port(port, link)
                if self.mode == "local":
                    wait_port(int(self.fleet.rsplit(":", 1)[1]), link)
                break
            except RuntimeError:   # ended before it listened: again only when its port was taken
                if link.poll() is None or attempt == START_TRIES or not port_taken(self.logs / "superlink.log", mark):
                    raise
                print("corolla: the SuperLink's port was taken by another program; starting it on another port",
                      file=sys.stderr, flush=True)
                self.procs.remove(link)
        if self.mode == "local":
            for i in range(self.nodes):
                self.start_node(i)
        self.link = link
        self._write_pids()
        (self.flwr_home / "config.toml").write_text(
            f'[superlink]\ndefault = "corolla"\n\n[superlink.corolla]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
        print(f"corolla: while it runs, Flower sees it: FLWR_HOME={self.flwr_home} flwr ls corolla "
              f"(then flwr log RUN_ID corolla --stream, flwr stop RUN_ID corolla)", flush=True)
        return "corolla"

    def stop(self) -> None:
        """Stop every process of the run, however it ends: first each process group the way Flower
        expects (SIGTERM, then SIGKILL after 10 s), then whatever is still running of the run —
        found by what it is, not by the groups above: the processes started here and their
        descendants, and any process that carries this run's ``FLWR_HOME`` (the ServerApp and the
        SuperExecs live in sessions of Flower's own; ``launcher/procs.py``). Signals that would
        interrupt this (a second Ctrl-C or ``kill``) are held until it is done."""
        held = _hold_signals()
        try:
            self._stop()
        finally:
            _release_signals(held)

    def _stop(self) -> None:
        # a subreaper's children are all the run's (orphans come back to it); else what was started here
        roots = [os.getpid()] if self.subreaper else [p.pid for p in self.procs if p.poll() is None]
        known = procs.run_processes(self.flwr_home, roots, marker=self.run_id)   # before any signal: every parent chain intact
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        left = procs.end_run_processes(self.flwr_home, roots, grace=3.0, known=known,
                                       keep={p.pid for p in self.procs}, marker=self.run_id)
        if left:
            print(f"corolla: {len(left)} process(es) of the run would not end: {left}", file=sys.stderr)
        self.procs.clear()


def _hold_signals() -> dict:
    held = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            held[sig] = signal.signal(sig, signal.SIG_IGN)
    return held


def _release_signals(held: dict) -> None:
    for sig, handler in held.items():
        signal.signal(sig, handler)


def _tail(path: Path, pos: int, show: bool = True) -> int:
    if not path.is_file():
        return pos
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(pos)
        chunk = fh.read()
        if chunk and show:
            sys.stdout.write(chunk)
            sys.stdout.flush()
        return fh.tell()


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def default_nodes() -> int:
    """One SuperNode per available core, at most 8: on 2 cores 2 nodes were fastest for FedCIA
    GF-CF and FedCA and within 5 % of 1 node for FedAvg-MF, 4 nodes slowest for all three
    (docs/results.md, "Speed through a real SuperLink")."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def _summary_line(summary: dict, out) -> str:
    return json.dumps({"out": str(out), "rounds_completed": summary["rounds_completed"],
                       "selected_round": summary["selection"]["round"], "metrics": summary["metrics"],
                       **({"metrics_paper_compat": summary["metrics_paper_compat"]["metrics"]}
                          if "metrics_paper_compat" in summary else {}),
                       "paper": summary.get("paper", {})}, indent=2)


def run_command(args: argparse.Namespace) -> int:
    # SIGTERM (``kill``, ``docker stop``, systemd) and SIGHUP (terminal closed) stop a run the way
    # Ctrl-C does: every process this command started is stopped and the run can be resumed
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    remote = bool(args.superlink)
    if remote and args.mode not in (None, "local"):
        print("error: --superlink submits to a running deployment; --mode does not apply", file=sys.stderr)
        return 2
    if args.root_certificates and not remote:
        print("error: --root-certificates goes with --superlink", file=sys.stderr)
        return 2
    if args.drop_node_state and remote:
        print("error: --drop-node-state: with --superlink the node state lives on the SuperNodes' machines",
              file=sys.stderr)
        return 2
    launch = {} if remote or not args.resume else read_launch(Path(args.resume).expanduser())
    if args.mode is None:   # a resume keeps the interrupted run's mode and node count unless told otherwise
        args.mode = launch.get("mode", "local")
    nodes = args.nodes or launch.get("nodes") or (1 if remote else default_nodes())
    overrides = parse_overrides(args.set or [])
    if args.export_topk is not None:
        overrides["export-topk"] = args.export_topk
    if remote:
        return _run_remote(args, overrides, nodes)
    if args.resume:
        out = Path(args.resume).expanduser().resolve()
        if not out.is_dir():
            print(f"error: --resume {out}: no such directory (expected the --out folder of an earlier run)",
                  file=sys.stderr)
            return 2
        if not (out / "checkpoint.npz").is_file():
            print(f"error: --resume {out}: no checkpoint.npz (no completed round to resume from)", file=sys.stderr)
            return 2
        try:
            from server_app.results import RunRecorder

            RunRecorder.read_checkpoint(out)
            saved = json.loads((out / "config.json").read_text())
        except Exception as e:  # noqa: BLE001 - a damaged file, whatever the reader says
            print(f"error: --resume {out}: its checkpoint cannot be read ({e}); the run cannot continue from it: "
                  f"start it again with another --out", file=sys.stderr)
            return 2
        cfg, preset = saved["config"], saved["preset"]
    else:
        if not args.preset:
            print("error: --preset NAME is required (see 'corolla presets')", file=sys.stderr)
            return 2
        cfg = resolve(args.preset, overrides, args.config)  # validates before any process starts
        preset = args.preset
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path(args.out).expanduser().resolve() if args.out else (Path.cwd() / "runs" / f"{preset}-{stamp}")
        if (out / "summary.json").exists() or (out / "checkpoint.npz").exists():
            print(f"error: --out {out} already holds a run; use --resume {out} or another --out", file=sys.stderr)
            return 2
    try:
        extras.check(cfg)   # a method whose optional dependency is missing fails here, in one line
        if args.track:
            extras.require("track")
    except extras.MissingExtra as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.data_dir and not Path(args.data_dir).expanduser().is_dir():
        print(f"error: --data-dir {args.data_dir}: no such directory (expected the datasets folder, laid out as "
              f"corolla/data/sources.py names them: ml-100k/u.data, ...; leave it out to download from the official URLs)",
              file=sys.stderr)
        return 2
    for flag, value in (("--ray-address", args.ray_address), ("--sim-client-cpus", args.sim_client_cpus)):
        if value is not None and args.mode != "sim":
            print(f"error: {flag}: only with --mode sim (Flower's simulation runtime runs on Ray)", file=sys.stderr)
            return 2
    if args.sim_client_cpus is not None and args.sim_client_cpus < 1:
        print(f"error: --sim-client-cpus {args.sim_client_cpus}: expected at least 1 CPU per ClientApp actor",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / LAUNCH_FILE, {"mode": args.mode, "nodes": nodes})
    data_dir = str(Path(args.data_dir).expanduser().resolve()) if args.data_dir else os.environ.get("COROLLA_DATA", "")
    # the fully resolved config travels as overrides, so the ServerApp resolves exactly this config
    run_cfg = {"preset": preset or "",
               "set": " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items()) if not args.resume else "",
               "out-dir": str(out), "data-dir": data_dir, "resume-dir": str(out) if args.resume else "",
               "min-nodes": nodes if args.mode == "local" else 0,
               "provenance": json.dumps(provenance.collect(APP_DIR)), "mode": args.mode, "track": args.track or ""}
    summary_path = out / "summary.json"
    if args.resume and summary_path.exists():
        summary_path.unlink()
    print(f"corolla: {preset} ({cfg['method']}, {cfg['dataset']}), {args.mode} mode, {nodes} nodes -> {out}"
          + (f" (resumed; the run had {launch['mode']} mode, {launch['nodes']} nodes)" if launch else ""))
    node_configs = [{"partition-id": i, "num-partitions": nodes} for i in range(nodes)]
    for item in args.node_config or []:
        idx, _, kv = item.partition(":")
        if not idx.isdigit() or int(idx) >= nodes or "=" not in kv:
            print(f"error: --node-config {item!r}: expected 'I:key=value' with 0 <= I < --nodes", file=sys.stderr)
            return 2
        node_configs[int(idx)].update(parse_overrides([kv]))
    if args.mode == "inproc":
        rc = _run_inproc(out, run_cfg, node_configs, data_dir, args.quiet)
        if rc == 0 and args.drop_node_state:
            drop_node_state(out, node_configs)
        return rc
    cluster = Cluster(out, args.mode, nodes, data_dir or None, node_configs, args.idle_poll, args.reply_poll,
                      args.clientapp_start, args.pull_backoff)
    if args.ray_address:   # Flower's simulation calls ray.init(), which joins the cluster RAY_ADDRESS names
        cluster.env["RAY_ADDRESS"] = args.ray_address
    progress = out / "rounds.log"   # one line per round (the per-phase detail is in progress.log)
    pos = progress.stat().st_size if progress.exists() else 0
    show = not args.quiet
    rc_flwr = None
    staging = Path(tempfile.mkdtemp(prefix="corolla-app-"))
    try:
        conn = cluster.start()
        rc_file = out / "run-config.toml"
        write_run_config(rc_file, run_cfg)
        app_src = fab.stage(APP_DIR, staging / "app")   # flwr run bundles this folder: only the FAB's files
        cmd = [flower_bin("flwr"), "run", str(app_src), conn, "--stream", "--run-config", str(rc_file)]
        if args.mode == "sim":
            fed = f"num-supernodes={nodes}"
            if args.sim_client_cpus:
                fed += f" client-resources-num-cpus={args.sim_client_cpus}"
            cmd += ["--federation-config", fed]
        with open(cluster.logs / "flwr-run.log", "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=cluster.env, cwd=str(APP_DIR),
                                    start_new_session=True)
            cluster.procs.insert(0, proc)
            while proc.poll() is None:
                cluster.check_starts()
                procs.reap_adopted({p.pid for p in cluster.procs})   # orphans re-parented to this process
                pos = _tail(progress, pos, show)
                if summary_path.exists():
                    break
                time.sleep(0.5)
            rc_flwr = proc.poll()
        pos = _tail(progress, pos, show)
    except KeyboardInterrupt:
        print("\ncorolla: interrupted; stopping the SuperLink and SuperNodes "
              f"(resume with: corolla run --resume {out})", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as e:
        print(f"corolla: {e}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        shutil.rmtree(staging, ignore_errors=True)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if summary.get("status") == "completed":
        print(_summary_line(summary, out))
        _print_run_page(out)
        if args.drop_node_state:
            drop_node_state(out, node_configs)
        return 0
    if summary.get("input_error"):   # the reason is the input (e.g. data no node could load): one line
        print(f"error: {summary['error']} (logs in {cluster.logs})", file=sys.stderr)
        return 2
    print(f"corolla: the run failed (flwr run exit code {rc_flwr}); logs in {cluster.logs}", file=sys.stderr)
    for name in ("flwr-run.log", "superlink.log"):
        p = cluster.logs / name
        if p.exists():
            tail = p.read_text(errors="replace").splitlines()[-25:]
            print(f"--- {p} (last lines)\n" + "\n".join(tail), file=sys.stderr)
    if summary.get("error"):
        print(f"error: the run failed: {summary['error']}", file=sys.stderr)
    return 1


LAUNCH_FILE = "launch.json"


def drop_node_state(out: Path, node_configs: list[dict]) -> None:
    """``--drop-node-state``: after a completed run, remove ``OUT/node-state`` (every hosted
    client's last states, kept for ``--resume``: gigabytes for hundreds of clients with large
    tables). A ``state-dir`` given with ``--node-config`` is the user's and stays."""
    root = (out / "node-state").resolve()
    given = [Path(nc["state-dir"]).resolve() for nc in node_configs if nc.get("state-dir")]
    if any(d != root and root not in d.parents for d in given):
        print("corolla: --drop-node-state: a node's state-dir is outside OUT/node-state; nothing removed",
              file=sys.stderr)
        return
    if not root.is_dir():
        return
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    shutil.rmtree(root)
    print(f"corolla: node state dropped ({size / 1e6:.1f} MB; the run can no longer be resumed)")


def read_launch(out: Path) -> dict:
    """The mode and node count ``corolla run`` started ``out``'s run with (``OUT/launch.json``), for a
    ``--resume`` without ``--mode`` / ``--nodes``; empty for a run folder written before that file
    existed, or one whose file is not what this function expects (the defaults apply then)."""
    try:
        saved = json.loads((out / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return {}
    ok = (isinstance(saved, dict) and saved.get("mode") in ("local", "sim", "inproc")
          and isinstance(saved.get("nodes"), int) and not isinstance(saved["nodes"], bool) and saved["nodes"] >= 1)
    return {"mode": saved["mode"], "nodes": saved["nodes"]} if ok else {}


def write_run_config(path: Path, run_cfg: dict) -> None:
    path.write_text("".join(f"{k} = {_toml_str(v) if isinstance(v, str) else v}\n" for k, v in run_cfg.items()))


def flwr_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, FLWR_HOME=str(home), FLWR_DISABLE_UPDATE_CHECK="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(APP_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = _path_with_interpreter(env.get("PATH", ""))
    return env


def run_status(env: dict[str, str], conn: str, run_id: str) -> str:
    """The run's status on the SuperLink (``finished:completed``, ``finished:failed``, ...)."""
    p = subprocess.run([flower_bin("flwr"), "ls", conn, "--run-id", run_id, "--format", "json"], env=env, cwd=str(APP_DIR),
                       capture_output=True, text=True, timeout=120)
    try:
        return str(json.loads(p.stdout)["runs"][0]["status"])
    except (ValueError, KeyError, IndexError):
        return f"unknown ({(p.stdout + p.stderr).strip()[-300:]})"


def _run_remote(args: argparse.Namespace, overrides: dict, nodes: int) -> int:
    """Submit to a running SuperLink (``--superlink HOST:PORT``, its Control API), stream the
    ServerApp's log, and exit 0 only if the SuperLink reports the run ``finished:completed``
    (``flwr run`` exits 0 either way). Paths (``--out``, ``--resume``, ``--data-dir``) are
    those of the SuperLink's and the nodes' machines; the summary is printed when ``--out`` is
    visible here too (compose's results volume)."""
    for opt in ("out", "resume"):
        v = getattr(args, opt)
        if v and not os.path.isabs(v):
            print(f"error: --{opt} {v!r}: with --superlink, give the absolute path on the SuperLink's machine",
                  file=sys.stderr)
            return 2
    if args.resume:
        local = Path(args.resume)
        if local.is_dir() and not (local / "checkpoint.npz").is_file():
            print(f"error: --resume {local}: no checkpoint.npz (no completed round to resume from)", file=sys.stderr)
            return 2
        run_cfg = {"preset": "", "set": "", "out-dir": args.resume, "resume-dir": args.resume}
        what = f"resume {args.resume}"
    else:
        if not args.preset:
            print("error: --preset NAME is required (see 'corolla presets')", file=sys.stderr)
            return 2
        cfg = resolve(args.preset, overrides, args.config)
        run_cfg = {"preset": args.preset, "set": " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items()),
                   "out-dir": args.out or "", "resume-dir": ""}
        what = f"{args.preset} ({cfg['method']}, {cfg['dataset']})"
    run_cfg.update({"data-dir": args.data_dir or "", "min-nodes": nodes,
                    "provenance": json.dumps(provenance.collect(APP_DIR)), "mode": "superlink",
                    "track": args.track or ""})
    home = Path(tempfile.mkdtemp(prefix="corolla-flwr-"))   # flwr's config for this submission only
    try:
        return _submit(args, run_cfg, what, nodes, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _submit(args: argparse.Namespace, run_cfg: dict, what: str, nodes: int, home: Path) -> int:
    """``flwr run`` the staged app against ``args.superlink`` with FLWR_HOME ``home``."""
    conn = "corolla"
    ca = ""
    if args.root_certificates:
        ca_path = Path(args.root_certificates).expanduser().resolve()
        if not ca_path.is_file():
            print(f"error: --root-certificates {ca_path}: no such file", file=sys.stderr)
            return 2
        ca = f"root-certificates = {_toml_str(str(ca_path))}\n"
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{conn}"\n\n[superlink.{conn}]\naddress = {_toml_str(args.superlink)}\n'
        + (ca or "insecure = true\n"))
    env = flwr_env(home)
    rc_file = home / "run-config.toml"
    write_run_config(rc_file, run_cfg)
    print(f"corolla: {what} -> SuperLink {args.superlink}" + (" (TLS)" if ca else " (insecure)")
          + f", waiting for {nodes} SuperNode(s)")
    app_src = fab.stage(APP_DIR, home / "app")   # flwr run bundles this folder: only the FAB's files
    proc = subprocess.Popen([flower_bin("flwr"), "run", str(app_src), conn, "--stream", "--run-config", str(rc_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=str(APP_DIR))
    run_id = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = re.search(r"Successfully started run (\d+)", line)
            if m and run_id is None:
                run_id = m.group(1)
        proc.wait()
    except KeyboardInterrupt:
        if run_id is not None:
            subprocess.run([flower_bin("flwr"), "stop", run_id, conn], env=env, cwd=str(APP_DIR), capture_output=True, timeout=60)
        print(f"\ncorolla: interrupted; run {run_id} stopped on the SuperLink"
              + (f" (resume with: corolla run --superlink {args.superlink} --resume {run_cfg['out-dir']})"
                 if run_cfg["out-dir"] else ""), file=sys.stderr)
        proc.kill()
        return 130
    if run_id is None:
        print(f"corolla: the SuperLink at {args.superlink} did not start the run (flwr run exit code "
              f"{proc.returncode})", file=sys.stderr)
        return 1
    status = run_status(env, conn, run_id)
    out = Path(run_cfg["out-dir"]) if run_cfg["out-dir"] else None
    if out is not None and (out / "summary.json").is_file():
        summary = json.loads((out / "summary.json").read_text())
        if summary.get("status") == "completed" and status == "finished:completed":
            print(_summary_line(summary, out))
    if status == "finished:completed":
        print(f"corolla: run {run_id} completed")
        return 0
    print(f"corolla: run {run_id} did not complete: {status}", file=sys.stderr)
    return 1


def _run_inproc(out: Path, run_cfg: dict, node_configs: list[dict], data_dir: str, quiet: bool = False) -> int:
    from launcher.inproc import InProcessTransport
    from server_app.app import run_federation
    from server_app.loop import NoClients

    for nc in node_configs:
        nc.setdefault("state-dir", str(out / "node-state"))
        if data_dir:
            nc.setdefault("data-dir", data_dir)
    if quiet:   # Flower's logger carries the round lines in process; warnings and errors still show
        import logging

        from flwr.common.logger import FLOWER_LOGGER

        FLOWER_LOGGER.setLevel(logging.WARNING)
    try:
        summary = run_federation(InProcessTransport(node_configs), run_cfg)
    except KeyboardInterrupt:
        print(f"\ncorolla: interrupted (resume with: corolla run --resume {out} --mode inproc)", file=sys.stderr)
        return 130
    except NoClients as e:   # the input's fault (e.g. the data no node could load): one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (the traceback is in the log and summary.json)
        print(f"corolla: the run failed: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"out": str(out), "rounds_completed": summary["rounds_completed"],
                      "selected_round": summary["selection"]["round"], "metrics": summary["metrics"],
                      **({"metrics_paper_compat": summary["metrics_paper_compat"]["metrics"]}
                         if "metrics_paper_compat" in summary else {}),
                      "paper": summary.get("paper", {})}, indent=2))
    _print_run_page(out)
    return 0 if summary.get("status") == "completed" else 1


def _print_run_page(out: Path) -> None:
    """The run's page (``corolla report``): its curves, phases, exclusions, config and provenance."""
    try:
        from corolla.report.make import run_page

        print(f"corolla: run page {run_page(out)}")
    except Exception as e:  # noqa: BLE001 - a page that cannot be drawn must not fail a finished run
        print(f"corolla: no run page ({e})", file=sys.stderr)


def presets_command(args: argparse.Namespace) -> int:
    from corolla.catalog import presets_text

    print(presets_text(args.long))
    return 0


def keys_command(args: argparse.Namespace) -> int:
    from corolla.catalog import keys_text

    print(keys_text(args.method))
    return 0


def report_command(args: argparse.Namespace) -> int:
    from corolla.report.make import make

    res = make(args.inputs, Path(args.out).expanduser().resolve() if args.out else None,
               Path(args.markdown) if args.markdown else None, Path(args.readme) if args.readme else None,
               results_dir=args.results, catalogue=args.catalogue, results_md=args.results_md,
               method_docs=args.method_docs)
    print(f"corolla report: {res['rows']} rows in {res['boards']} leaderboards, {len(res['pages'])} pages in "
          f"{res['seconds']:.1f} s -> {res['index']}")
    for p in res["run_pages"]:
        print(f"run page: {p}")
    return 0


def flwr_config_command(args: argparse.Namespace) -> int:
    """A run-config file for ``flwr run . <federation> --run-config FILE``: a preset (validated
    here) and its overrides as the app's run-config keys (a preset file itself has tables Flower
    does not accept as run config)."""
    overrides = parse_overrides(args.set or [])
    resolve(args.preset, overrides)   # the same checks as corolla run, before Flower sees it
    lines = [f"preset = {_toml_str(args.preset)}",
             f"set = {_toml_str(' '.join(f'{k}={json.dumps(v)}' for k, v in overrides.items()))}"]
    if args.data_dir:
        lines.append(f"data-dir = {_toml_str(str(Path(args.data_dir).expanduser().resolve()))}")
    if args.out_dir:   # where the ServerApp writes summary.json etc. (its default: runs/<preset>-<time>)
        lines.append(f"out-dir = {_toml_str(str(Path(args.out_dir).expanduser().resolve()))}")
    text = "\n".join(lines) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def methods_command(args: argparse.Namespace) -> int:
    from corolla.catalog import methods_text

    print(methods_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="corolla", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a preset through a real SuperLink and SuperNodes")
    r.add_argument("--preset")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    r.add_argument("--config", help="TOML file of config keys (between the preset and --set)")
    r.add_argument("--mode", choices=("local", "sim", "inproc"), default=None,
                   help="local (default), sim or inproc; a --resume without it keeps the run's mode")
    r.add_argument("--nodes", type=int, default=None,
                   help="SuperNodes to start (default: one per core, at most 8; a --resume without it keeps "
                        "the run's count); with --superlink: how many to wait for before the run starts (default 1)")
    r.add_argument("--superlink", metavar="HOST:PORT",
                   help="submit to a running SuperLink (its Control API, e.g. superlink:8000) instead of "
                        "starting processes; exits non-zero unless the run completes")
    r.add_argument("--root-certificates", metavar="CA",
                   help="with --superlink: the CA certificate of a TLS SuperLink (else insecure)")
    r.add_argument("--data-dir")
    r.add_argument("--idle-poll", type=seconds_arg("--idle-poll"), default=LOCAL_IDLE_POLL, metavar="S",
                   help=f"local mode: the SuperNodes' wait after an empty pull (default {LOCAL_IDLE_POLL}; "
                        "Flower's SuperNode: 3)")
    r.add_argument("--reply-poll", type=seconds_arg("--reply-poll"), default=DEFAULT_REPLY_POLL, metavar="S",
                   help=f"local mode: the SuperNodes' step while waiting for a ClientApp's reply (default "
                        f"{DEFAULT_REPLY_POLL}; Flower's SuperNode: 0.5)")
    r.add_argument("--clientapp-start", choices=("fork", "exec"), default="fork",
                   help="local mode: fork each ClientApp from a process that has imported Flower and torch "
                        "(default) or start a fresh interpreter per message (Flower's way)")
    r.add_argument("--pull-backoff", type=seconds_arg("--pull-backoff"), default=DEFAULT_PULL_BACKOFF, metavar="S",
                   help=f"local mode: the first retry of an object pull that finds a chunk not yet uploaded, in "
                        f"the ServerApp, SuperNodes and ClientApps (default {DEFAULT_PULL_BACKOFF}; Flower: 1)")
    r.add_argument("--ray-address", metavar="HOST:PORT",
                   help="sim mode: run the simulation on this running Ray cluster (its head's GCS address, "
                        "as `ray start --head` prints) instead of a Ray instance on this machine")
    r.add_argument("--sim-client-cpus", type=int, metavar="N",
                   help="sim mode: CPUs Ray reserves per ClientApp actor (Flower's default: 2); a cluster "
                        "runs as many actors at once as its CPUs allow")
    r.add_argument("--out")
    r.add_argument("--resume", metavar="RUN_DIR")
    r.add_argument("--export-topk", type=int, metavar="K")
    r.add_argument("--track", choices=("tensorboard",),
                   help="log config, per-round metrics, bytes and the summary as TensorBoard event files in "
                        "OUT/tensorboard (extra 'track')")
    r.add_argument("--quiet", action="store_true",
                   help="print only the result (the round lines stay in OUT/rounds.log, the per-phase detail in "
                        "OUT/progress.log)")
    r.add_argument("--drop-node-state", action="store_true",
                   help="after a completed run, remove OUT/node-state (every client's last states, kept for "
                        "--resume; gigabytes for hundreds of clients with large tables)")
    r.add_argument("--node-config", action="append", metavar="I:KEY=VALUE",
                   help="extra node config for SuperNode I in local mode (repeatable)")
    p = sub.add_parser("presets", help="list presets with their paper numbers")
    p.add_argument("--long", action="store_true", help="also the method each resolves to and its description")
    k = sub.add_parser("keys", help="list the config keys with type, default and help")
    k.add_argument("--method", help="only the core keys and those of this method")
    sub.add_parser("methods", help="list the method table: method, harness, models, strategy and client")
    fc = sub.add_parser("flwr-config", help="a run-config file for 'flwr run . FEDERATION --run-config FILE'")
    fc.add_argument("preset")
    fc.add_argument("--set", action="append", metavar="KEY=VALUE")
    fc.add_argument("--data-dir")
    fc.add_argument("--out-dir", help="the run's output folder on the ServerApp's machine")
    fc.add_argument("-o", "--output", help="write it here (default: standard output)")
    rp = sub.add_parser("report", help="the leaderboards of the papers' tables, a page per method and per run "
                                       "(static HTML + PNG) and a Markdown overview")
    rp.add_argument("inputs", nargs="*", help="run directories or result files (a page each) and/or a directory "
                                              "of result files (as --results)")
    rp.add_argument("--results", metavar="DIR", help="the folder of result files the leaderboards read (default: "
                                                      "./docs/results, a checkout's root; else this flag is needed)")
    rp.add_argument("--catalogue", metavar="TOML", help="the papers' headline tables (default: the catalogue "
                                                         "shipped in the package, corolla/report/paper_tables.toml)")
    rp.add_argument("--results-md", metavar="FILE", help="the write-up whose sections the tables link to "
                                                          "(default: results.md beside the results folder if there)")
    rp.add_argument("--method-docs", metavar="DIR", help="the method write-ups the method pages link to "
                                                          "(default: methods/ beside the results folder if there)")
    rp.add_argument("--out", metavar="DIR", help="site folder (default: site/ beside the results folder, "
                                                  "docs/site in a checkout)")
    rp.add_argument("--markdown", help="also write the Markdown overview here (docs/leaderboard.md)")
    rp.add_argument("--readme", help="also fill the README's <!-- leaderboard --> block")
    sub.add_parser("supernode", add_help=False,
                   help="Flower's SuperNode with settable waits: corolla supernode [--idle-poll S] [--reply-poll S] "
                        "[--pull-backoff S] "
                        "FLOWER-SUPERNODE-ARGS (see corolla supernode --help)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["supernode"]:   # every other argument belongs to flower-supernode
        from launcher import supernode
        return supernode.main(argv[1:])
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            if args.nodes is not None and args.nodes < 1:
                ap.error("--nodes: expected >= 1")
            from corolla import install
            install.check()   # another distribution's 'strategies' or 'server_app' would be run silently
            return run_command(args)
        return {"presets": presets_command, "keys": keys_command, "methods": methods_command,
                "report": report_command, "flwr-config": flwr_config_command}[args.cmd](args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
