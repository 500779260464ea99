"""Deployment: the compose files, TLS with SuperNode authentication, machines apart (network
namespaces running the exact commands of docs/deployment.md). The Docker drills are
``tests/test_docker.py``.

Each test that needs something this machine may lack (openssl and ssh-keygen, root for network
namespaces) is skipped with the reason printed.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flower_io import compat
from launcher.cli import _path_with_interpreter, flower_bin
from launcher.ports import free_port as _free_port
from tests.test_e2e import SMALL

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def doc_blocks(path: Path = ROOT / "docs" / "deployment.md", line: str | None = None) -> dict[str, str]:
    """The ```bash blocks of the deployment page marked ``<!-- deploy:NAME -->``, for the Flower
    ``line`` (default: the installed one): a block marked ``NAME@LINE`` replaces ``NAME`` there."""
    line = line or compat.major_minor(compat.flower_version())
    text = path.read_text()
    found = {m.group(1): m.group(2) for m in re.finditer(r"<!-- deploy:([\w.@-]+) -->\s*```bash\n(.*?)```", text, re.S)}
    blocks = {k: v for k, v in found.items() if "@" not in k}
    blocks.update({k.split("@")[0]: v for k, v in found.items() if k.endswith(f"@{line}")})
    return blocks


def test_deployment_page_has_the_commands_of_each_line():
    """The default line's blocks use the shared HTTP port; 1.39's the gRPC Fleet port."""
    for line in compat.LINES:
        b = doc_blocks(line=line)
        assert {"certs", "superlink", "register", "shard-node", "edge-node", "submit"} <= set(b)
        grpc = compat.LINES[line].fleet == "grpc"
        assert ("--fleet-api-address 0.0.0.0:9092" in b["superlink"]) == grpc, line
        for node in ("shard-node", "edge-node"):
            assert f'--superlink "$LINK:{9092 if grpc else 8000}"' in b[node], (line, node)


def _env(**extra) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COROLLA_OFFLINE="1",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _need_tls_tools():
    missing = [t for t in ("openssl", "ssh-keygen") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} to make certificates and node keys")


def _kill(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def _wait_port(port: int, proc, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")


# --------------------------------------------------------------------------- compose files

def test_compose_files_define_the_services_and_the_gpu_profile():
    base = yaml.safe_load((ROOT / "compose.yaml").read_text())
    tls = yaml.safe_load((ROOT / "docker" / "compose.tls.yaml").read_text())
    svc = base["services"]
    assert {"superlink", "supernode", "run", "supernode-gpu"} <= set(svc)
    assert svc["superlink"]["command"] == ["superlink"] and svc["run"]["command"] == ["submit"]
    assert any(v.endswith(":/data:ro") for v in svc["supernode"]["volumes"])     # datasets read-only
    assert any(v.endswith(":/runs") for v in svc["run"]["volumes"])
    assert "node-state:/state" in svc["supernode"]["volumes"]                   # shared client state
    # safe default: the SuperLink's ports are published on the host's loopback unless COROLLA_BIND says otherwise
    ports = svc["superlink"]["ports"]
    assert ports and all(p.startswith("${COROLLA_BIND:-127.0.0.1}:") for p in ports), ports
    gpu = svc["supernode-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    for name in ("superlink", "supernode", "run"):
        assert tls["services"][name]["environment"]["COROLLA_CERTS"] == "/certs"
    # each replica makes its own key and publishes only its public key; the SuperLink registers it
    assert "node-keys:/node-keys" in tls["services"]["supernode"]["volumes"]
    assert "node-keys:/node-keys:ro" in tls["services"]["superlink"]["volumes"]
    tool = (["docker", "compose"] if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
            else ["docker-compose"]) if shutil.which("docker") else ["docker-compose"]
    if shutil.which(tool[0]) is None:
        print("docker compose / docker-compose not installed: the files were checked as YAML only")
        return
    for files in (["-f", "compose.yaml"], ["-f", "compose.yaml", "-f", "docker/compose.tls.yaml"],
                  ["-f", "compose.yaml", "--profile", "gpu"]):
        p = subprocess.run(tool + files + ["config", "-q"], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_no_private_key_is_tracked_or_enters_an_image():
    """Keys and certificates are made by docker/certs.sh into docker/certs (ignored by git and by
    the image build); no tracked file holds a private key."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    pem_key = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")
    names = [n for n in tracked.stdout.split("\0") if n]
    assert names
    for name in names:
        path = ROOT / name
        if path.is_file():
            assert not pem_key.search(path.read_bytes()), f"{name} holds a private key"
    assert "docker/certs" in (ROOT / ".dockerignore").read_text().split()
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/certs/keys/node0"], cwd=ROOT)
    assert ignored.returncode == 0, "docker/certs is not ignored by git"


# --------------------------------------------------------------------------- TLS on loopback

def test_tls_superlink_refuses_an_unregistered_node_and_runs_with_a_registered_one(tmp_path, data_dir):
    _need_tls_tools()
    certs = tmp_path / "certs"
    subprocess.run(["bash", str(ROOT / "docker" / "certs.sh"), str(certs), "2"], check=True, capture_output=True)
    env = _env(FLWR_HOME=tmp_path / "home")
    procs = []
    try:
        control, fleet = _tls_superlink(tmp_path, certs, env, procs)
        reg = subprocess.run([flower_bin("flwr"), "supernode", "register", f"{certs}/keys/node0.pub", "c"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert reg.returncode == 0 and "registered successfully" in reg.stdout, reg.stdout + reg.stderr

        def node(key, i):
            nc = f'clients="auto" data-dir="{data_dir}" state-dir="{tmp_path / "state"}"'
            return subprocess.Popen(
                [flower_bin("flower-supernode"), "--root-certificates", f"{certs}/ca.crt", "--auth-supernode-private-key",
                 f"{certs}/keys/{key}", "--superlink", f"127.0.0.1:{fleet}", "--host", "127.0.0.1",
                 "--port", str(_free_port()), "--node-config", nc],
                env=env, cwd=tmp_path, start_new_session=True, stdout=open(tmp_path / f"node{i}.log", "w"),
                stderr=subprocess.STDOUT)

        procs.append(node("node0", 0))
        stranger = node("node1", 1)     # its key was never registered
        procs.append(stranger)
        assert stranger.wait(timeout=120) != 0   # it logs Flower's exit code 305, the process returns 1
        refused = (tmp_path / "node1.log").read_text()
        assert "[code: 2004] Failed to activate SuperNode" in refused and "Exit Code: 305" in refused
        run = subprocess.run(
            [sys.executable, "-m", "launcher.cli", "run", "--superlink", f"127.0.0.1:{control}",
             "--root-certificates", f"{certs}/ca.crt", "--preset", "fedavg-mf-ml100k", "--out", str(tmp_path / "out")]
            + [a for s in SMALL + ["num-rounds=1"] for a in ("--set", s)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        s = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert s["status"] == "completed" and s["rounds_completed"] == 1
    finally:
        _kill(procs)


# --------------------------------------------------------------------------- machines apart


def _tls_superlink(tmp_path: Path, certs: Path, env: dict, procs: list) -> tuple[int, int]:
    """A SuperLink with TLS and SuperNode authentication on loopback (appended to ``procs``), and a
    ``flwr`` config in ``FLWR_HOME`` naming it "c"; returns its (control, fleet) ports: the port
    SuperNodes connect to is the gRPC Fleet port on Flower 1.39, the control port itself on 1.42."""
    control, fleet_port = _free_port(), _free_port()
    fleet = int(compat.fleet_address("127.0.0.1", control, fleet_port).rsplit(":", 1)[1])   # this line's Fleet API
    link = subprocess.Popen(
        [flower_bin("flower-superlink"), "--ssl-ca-certfile", f"{certs}/ca.crt", "--ssl-certfile", f"{certs}/server.pem",
         "--ssl-keyfile", f"{certs}/server.key", "--enable-supernode-auth",
         "--disable-runtime-dependency-installation", "--host", "127.0.0.1", "--port", str(control),
         *compat.superlink_fleet_args("127.0.0.1", fleet_port)],
        env=env, cwd=tmp_path, start_new_session=True, stdout=open(tmp_path / "link.log", "w"),
        stderr=subprocess.STDOUT)
    procs.append(link)
    _wait_port(control, link)
    _wait_port(fleet, link)
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "config.toml").write_text(
        f'[superlink]\ndefault = "c"\n[superlink.c]\naddress = "127.0.0.1:{control}"\n'
        f'root-certificates = "{certs}/ca.crt"\n')
    return control, fleet


def _can_netns() -> str:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's ip"
    probe = f"corprobe{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return f"cannot create a network namespace here: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


@pytest.mark.drill
def test_across_network_namespaces(tmp_path, data_dir):
    """The SuperLink, a shard node and an edge node in three network namespaces, each node
    reaching the SuperLink's namespace only through its own veth link (a bridge there), TLS and
    SuperNode authentication on, running the exact commands of docs/deployment.md; the run
    aggregates with SecAgg+ over the two stock SuperNodes, signed with their node keys."""
    why = _can_netns()
    if why:
        pytest.skip(why)
    _need_tls_tools()
    blocks = doc_blocks()
    assert {"certs", "superlink", "register", "shard-node", "edge-node", "submit"} <= set(blocks)
    tag = f"{os.getpid() % 100000}"
    ns = {"link": f"corl{tag}", "shard": f"cors{tag}", "edge": f"core{tag}"}
    sh = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, text=True)  # noqa: E731
    procs = []
    try:
        for n in ns.values():
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        sh("ip", "-n", ns["link"], "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", ns["link"], "addr", "add", "10.231.0.1/24", "dev", "br0")
        sh("ip", "-n", ns["link"], "link", "set", "br0", "up")
        for i, role in enumerate(("shard", "edge")):
            a, b = f"v{tag}l{i}", f"v{tag}n{i}"
            sh("ip", "link", "add", a, "netns", ns["link"], "type", "veth", "peer", "name", b, "netns", ns[role])
            sh("ip", "-n", ns["link"], "link", "set", a, "master", "br0")
            sh("ip", "-n", ns["link"], "link", "set", a, "up")
            sh("ip", "-n", ns[role], "addr", "add", f"10.231.0.{i + 2}/24", "dev", b)
            sh("ip", "-n", ns[role], "link", "set", b, "up")
        rows = [line.split("\t") for line in open(f"{data_dir}/ml-100k/u.data") if line.startswith("1\t")]
        mine = tmp_path / "me.csv"
        mine.write_text("".join(f"{r[1]},{r[2]},{r[3].strip()}\n" for r in rows))
        extra = " ".join(f"--set {s}" for s in SMALL + ["num-rounds=2", "secagg=secaggplus"])
        env = _env(LINK="10.231.0.1", CERTS=tmp_path / "certs", DATA=data_dir, MY_FILE=mine, RUNS=tmp_path / "runs",
                   EXTRA=extra)

        def in_ns(role, block, name, background=False, **more):
            e = dict(env, STATE=str(tmp_path / f"state-{name}"), FLWR_HOME=str(tmp_path / f"flwr-{role}"), **more)
            cmd = ["ip", "netns", "exec", ns[role], "bash", "-ec", blocks[block]]
            log = open(tmp_path / f"{name}.log", "w")
            p = subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if background:
                procs.append(p)
                return p
            p.wait(timeout=600)
            return p

        assert in_ns("link", "certs", "certs").returncode == 0, (tmp_path / "certs.log").read_text()
        link = in_ns("link", "superlink", "superlink", background=True)
        for _ in range(120):   # the Control API answers inside the SuperLink's namespace
            if subprocess.run(["ip", "netns", "exec", ns["link"], "bash", "-c", "echo > /dev/tcp/127.0.0.1/8000"],
                              capture_output=True).returncode == 0:
                break
            assert link.poll() is None, (tmp_path / "superlink.log").read_text()
            time.sleep(0.5)
        assert in_ns("link", "register", "register").returncode == 0, (tmp_path / "register.log").read_text()
        # the shard node's namespace reaches the SuperLink's address, not its loopback
        assert subprocess.run(["ip", "netns", "exec", ns["shard"], "bash", "-c", "echo > /dev/tcp/127.0.0.1/8000"],
                              capture_output=True).returncode != 0
        in_ns("shard", "shard-node", "shard-node", background=True)
        in_ns("edge", "edge-node", "edge-node", background=True)
        submit = in_ns("link", "submit", "submit")
        log = (tmp_path / "submit.log").read_text()
        assert submit.returncode == 0, log
        s = json.loads((tmp_path / "runs" / "across-machines" / "summary.json").read_text())
        rounds = [json.loads(x) for x in (tmp_path / "runs" / "across-machines" / "rounds.jsonl").read_text().splitlines()]
        assert s["status"] == "completed" and s["rounds_completed"] == 2
        train = next(p for p in rounds[0]["phases"] if p["name"] == "train")
        assert rounds[0]["clients"] == 21 and not train["excluded"]   # 20 shard clients + the edge user
        assert train["replies"] == 2
        # stock flower-supernodes with their keys and the operator's list: signed secure aggregation
        assert s["secure_aggregation"]["model"].startswith("malicious server"), s["secure_aggregation"]
        assert rounds[0]["train"]["secagg-nodes"] == 2
        assert all(v.get("key", "").startswith("SHA256:") for v in s["nodes"].values())
        assert rounds[-1]["users"]["test"] == 944
    finally:
        _kill(procs)
        for n in ns.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def test_flower_commands_come_from_the_interpreters_bin_before_path(tmp_path, monkeypatch):
    """`corolla run` starts the SuperLink, SuperNodes and `flwr` of the Flower it imports: a
    different `flwr` earlier on PATH is not used, and children get the same PATH order."""
    from launcher.cli import flower_bin

    other = tmp_path / "bin"
    other.mkdir()
    fake = other / "flwr"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(other))
    assert flower_bin("flwr") == str(Path(sys.executable).parent / "flwr")
    assert _path_with_interpreter(os.environ["PATH"]).split(os.pathsep) == [str(Path(sys.executable).parent), str(other)]
    with pytest.raises(FileNotFoundError, match="no-such-flower-command"):
        flower_bin("no-such-flower-command")


@pytest.mark.drill
def test_sim_on_a_ray_cluster_in_two_namespaces(tmp_path, data_dir):
    """Flower's simulation runtime on a Ray head and a Ray worker in two network namespaces
    (``benchmarks/ray_cluster.py``, the commands of docs/deployment.md's Ray section): ClientApp
    actors run in both, and every round's metrics equal a one-machine simulation's."""
    why = _can_netns()
    if why:
        pytest.skip(why)
    out = tmp_path / "ray.json"
    p = subprocess.run([sys.executable, "benchmarks/ray_cluster.py", "--data-dir", data_dir, "--rounds", "2",
                        "--out", str(tmp_path / "runs"), "--json", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=1200, env=_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["cluster"]["actors_per_netns"].get("raywork", 0) >= 1
    assert r["cluster"]["actors_per_netns"].get("rayhead", 0) >= 1
    assert r["round_metrics_equal"] and r["metrics_equal"] and r["cluster"]["metrics"]["ndcg@10"] > 0
    assert "--ray-address 10.77.0.1:6379" in r["cluster"]["command"]
