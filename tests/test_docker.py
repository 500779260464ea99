"""The Docker drills as tests, driven from Python with the Docker SDK (``docker`` package):
containers started, killed, restarted and inspected here, on a network this test creates.

* the image is built from this tree (``docker/build-offline.sh``: debootstrap base, host
  wheelhouse; layers are cached, so a rebuild after a code change takes seconds);
* a run with 3 SuperNode containers gives the metrics of the same run in process on 2 nodes, and
  every role runs as a non-root user;
* TLS with SuperNode authentication: each SuperNode makes its own key pair in its container and
  only its public key is registered; each container holds only its own private key (listed); the
  run is secure aggregation with signed round keys, records each node's key fingerprint, and an
  unregistered key is refused;
* a SuperNode killed after round 2 and started again after round 3: the run completes, the round
  in flight loses only that node's clients, the others take its block, and it rejoins (``docker/faults.sh`` drill A);
* the SuperLink restarted mid-run: the submission fails, ``--resume`` from the checkpoint on the
  results folder completes with the metrics of an uninterrupted in-process run (drill B);
* ``compose.yaml`` itself, through docker compose (v2) or docker-compose (1.29).

Without a Docker daemon these tests skip, unless ``COROLLA_REQUIRE_DOCKER=1`` (``.ci/run`` sets it
when it started one): then they fail.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from flower_io import compat
from tests import cpu_paths

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
# the image is built for the Flower line of the venv that runs these tests (flower_io/compat.py):
# corolla:latest on the default line, corolla:flwr<line> on the other; COROLLA_TEST_IMAGE names it
# instead ("{line}" in it becomes the line, e.g. COROLLA_TEST_IMAGE=mine:flwr{line})
LINE = compat.line()
IMAGE = (os.environ.get("COROLLA_TEST_IMAGE") or (
    "corolla:latest" if LINE is None or LINE.name == compat.DEFAULT_LINE else "corolla:flwr{line}")).replace(
    "{line}", LINE.name if LINE else compat.DEFAULT_LINE)
SET = "fraction-train=0.1 local-epochs=1"   # small rounds: the drills test the plumbing


def _unavailable(why: str):
    if os.environ.get("COROLLA_REQUIRE_DOCKER") == "1":
        pytest.fail(f"COROLLA_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def dk():
    try:
        import docker
    except ImportError:
        _unavailable("the docker package is not installed (pip install 'corolla[test]')")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # noqa: BLE001
        _unavailable(f"no Docker daemon reachable ({type(e).__name__})")
    return client


@pytest.fixture(scope="module")
def image(dk):
    """The image of this tree (cached layers make a rebuild quick); its build time is printed."""
    t0 = time.monotonic()
    r = subprocess.run(["bash", "docker/build-offline.sh", IMAGE], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, COROLLA_FLWR_LINE=LINE.name if LINE else compat.DEFAULT_LINE),
                       timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"image {IMAGE}: {r.stdout.strip().splitlines()[-1]} ({time.monotonic() - t0:.0f} s)")
    dk.images.prune(filters={"dangling": True})   # the image this build replaced (GBs on a CI disk)
    yield IMAGE
    if os.environ.get("COROLLA_DROP_TEST_IMAGE") == "1":
        # .ci/run: the image (about 3 GB) and its wheelhouse (0.6 GB) are not needed by the tests after
        # these drills; a developer's run keeps them (a rebuild from cached layers is quick)
        import docker

        try:
            dk.images.remove(IMAGE, force=True)
            dk.images.prune(filters={"dangling": True})
        except docker.errors.APIError as e:   # a container still running on it: the phase's cleanup drops it
            print(f"image {IMAGE} kept: {e}")
        for wheel in [*ROOT.glob("docker/wheels/*.whl"), *ROOT.glob("docker/wheels/*.tar.gz")]:
            wheel.unlink()


class Deployment:
    """A SuperLink, SuperNodes and submitters on a network of their own, as compose.yaml (and, with
    ``certs``, docker/compose.tls.yaml) runs them: each container gets only the files its role needs."""

    def __init__(self, dk, image: str, data_dir: str, runs: Path, certs: Path | None = None):
        self.dk, self.image, self.data, self.runs, self.certs = dk, image, str(Path(data_dir).resolve()), runs, certs
        self.tag = uuid.uuid4().hex[:8]
        self.net = dk.networks.create(f"corolla-test-{self.tag}")
        self.state = dk.volumes.create(f"corolla-state-{self.tag}")
        self.keys = dk.volumes.create(f"corolla-node-keys-{self.tag}")
        self.registered = dk.volumes.create(f"corolla-registered-{self.tag}")
        self.containers = []

    def _env(self, **kw):
        env = {"COROLLA_OFFLINE": "1", "COROLLA_IDLE_POLL": "0.05"}
        # the CPU kernels of the test session (tests/cpu_paths.py): the containers' numbers are
        # compared with an in-process run of this process
        env.update({k: os.environ[k] for k in cpu_paths.PATHS if k in os.environ})
        if self.certs is not None:
            env["COROLLA_CERTS"] = "/certs"
        env.update({k: str(v) for k, v in kw.items()})
        return env

    def _vols(self, role, *extra):
        """As docker/compose.tls.yaml: the SuperLink its certificate, key and ca.crt, the public keys
        read-only and the registration marks; a SuperNode ca.crt, the public keys (it publishes its
        own) and the marks read-only; anything else ca.crt alone."""
        v = {}
        if self.certs is not None:
            files = ("ca.crt", "server.pem", "server.key") if role == "superlink" else ("ca.crt",)
            for f in files:
                v[str(self.certs / f)] = {"bind": f"/certs/{f}", "mode": "ro"}
            if role == "superlink":
                v[self.keys.name] = {"bind": "/node-keys", "mode": "ro"}
                v[self.registered.name] = {"bind": "/registered", "mode": "rw"}
            elif role == "supernode":
                v[self.keys.name] = {"bind": "/node-keys", "mode": "rw"}
                v[self.registered.name] = {"bind": "/registered", "mode": "ro"}
        for host, bind, mode in extra:
            v[host] = {"bind": bind, "mode": mode}
        return v

    def run(self, name, command, env=None, vols=(), role="other", **kw):
        c = self.dk.containers.run(self.image, command, name=f"{name}-{self.tag}", detach=True,
                                   network=self.net.name, environment=self._env(**(env or {})),
                                   volumes=self._vols(role, *vols), **kw)
        self.containers.append(c)
        return c

    def superlink(self):
        self.link = self.run("superlink", ["superlink"], vols=[(str(self.runs), "/runs", "rw")],
                             hostname="superlink", role="superlink")
        self.net.disconnect(self.link)
        self.net.connect(self.link, aliases=["superlink"])
        return self.link

    def supernode(self, i: int):
        return self.run(f"supernode{i}", ["supernode"], vols=[(self.data, "/data", "ro"),
                                                             (self.state.name, "/state", "rw")],
                        restart_policy={"Name": "unless-stopped"}, role="supernode", hostname=f"supernode{i}")

    def submit(self, name: str, rounds: int, nodes: int, resume: bool = False, sets: str = SET):
        env = {"COROLLA_NODES": nodes}
        if resume:
            env["COROLLA_RESUME"] = name
        else:
            env.update(COROLLA_PRESET="fedavg-mf-ml100k", COROLLA_ROUNDS=rounds, COROLLA_RUN_NAME=name,
                       COROLLA_SET=sets)
        return self.run(f"submit-{name}-{uuid.uuid4().hex[:4]}", ["submit"], env=env,
                        vols=[(str(self.runs), "/runs", "rw")])

    def logs(self) -> str:
        out = []
        for c in self.containers:
            try:
                out.append(f"--- {c.name}\n" + c.logs(tail=30).decode(errors="replace"))
            except Exception:  # noqa: BLE001
                pass
        return "\n".join(out)

    def close(self):
        for c in self.containers:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001
                pass
        for x in (self.net, self.state, self.keys, self.registered):
            try:
                x.remove()
            except Exception:  # noqa: BLE001
                pass


@pytest.fixture
def deploy(dk, image, data_dir, tmp_path):
    made = []

    def make(certs=None):
        runs = tmp_path / "runs"
        runs.mkdir(exist_ok=True)
        d = Deployment(dk, image, data_dir, runs, certs)
        made.append(d)
        return d
    yield make
    for d in made:
        d.close()


def _wait_exit(c, d: Deployment, timeout=600) -> int:
    try:
        return int(c.wait(timeout=timeout)["StatusCode"])
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{c.name} did not exit in {timeout} s ({e})\n{d.logs()}") from None


def _wait_round(path: Path, rnd: int, timeout=300):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and f"round {rnd:>3}/" in path.read_text():
            return
        time.sleep(0.5)
    raise AssertionError(f"round {rnd} not in {path} after {timeout} s")


def _uid(c) -> int:
    """The real uid of the container's main process (after the entry point dropped root)."""
    c.reload()
    status = c.exec_run(["cat", "/proc/1/status"]).output.decode()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def _summary(runs: Path, name: str) -> dict:
    return json.loads((runs / name / "summary.json").read_text())


def test_image_has_this_lines_flower_and_the_certifi_floor(dk, image):
    """The image carries the Flower of the line it was built for and certifi at or above the floor
    Flower 1.42 requires after the CA incident (both lines)."""
    out = dk.containers.run(image, ["python3", "-c", "from importlib.metadata import version as v; "
                                    "print(v('flwr'), v('certifi'))"], remove=True).decode().split()
    from packaging.version import Version
    assert compat.major_minor(out[0]) == (LINE.name if LINE else compat.DEFAULT_LINE), out
    assert out[0] == compat.flower_version(), out
    assert Version(out[1]) >= Version(compat.CERTIFI_FLOOR), out


def test_supernode_containers_give_the_in_process_metrics_as_non_root(deploy, data_dir, tmp_path):
    d = deploy()
    link = d.superlink()
    nodes = [d.supernode(i) for i in range(3)]
    t0 = time.monotonic()
    sub = d.submit("nodes-3", rounds=2, nodes=3)
    time.sleep(3)
    uids = {c.name: _uid(c) for c in (link, *nodes)}
    assert _wait_exit(sub, d) == 0, d.logs()
    s = _summary(d.runs, "nodes-3")
    print(f"3 SuperNode containers: {time.monotonic() - t0:.1f} s, uids {sorted(set(uids.values()))}")
    assert s["status"] == "completed" and s["rounds_completed"] == 2
    assert all(u != 0 for u in uids.values()), uids
    from launcher.cli import main

    ref = tmp_path / "reference"   # the same run in process, with another node count
    assert main(["run", "--preset", "fedavg-mf-ml100k", "--mode", "inproc", "--nodes", "2", "--quiet",
                 "--set", "num-rounds=2", *[x for kv in SET.split() for x in ("--set", kv)],
                 "--data-dir", data_dir, "--out", str(ref)]) == 0
    assert s["metrics"] == json.loads((ref / "summary.json").read_text())["metrics"]


PRIVATE = r"-----BEGIN [A-Z ]*PRIVATE KEY-----"


def _private_keys(c) -> list[str]:
    """Every file in the container's own file system that holds a private key (outside the
    installed packages, whose test vectors are not keys of anyone's)."""
    out = c.exec_run(["sh", "-c", "find / \\( -path /proc -o -path /sys -o -path /usr -o -path /opt -o -path /dev \\) "
                      f"-prune -o -type f -size -64k -print0 2>/dev/null | xargs -0 grep -lE -- '{PRIVATE}' "
                      "2>/dev/null || true"]).output
    return sorted(out.decode().split())


def test_tls_each_container_holds_only_its_own_key_and_a_stranger_is_refused(deploy, tmp_path):
    """docker/compose.tls.yaml's model: each SuperNode makes its key pair in its own container and
    publishes only the public key; the SuperLink registers it and holds its own TLS key; the
    submitter holds none; no container holds the CA key or another's key. The run is secure
    aggregation with signed round keys (the nodes trust the published keys), each node's key
    fingerprint recorded; a node whose key is not registered is refused."""
    if shutil.which("openssl") is None:
        _unavailable("needs openssl for the certificates")
    certs = tmp_path / "certs"
    subprocess.run(["bash", "docker/certs.sh", str(certs)], cwd=ROOT, check=True, capture_output=True)
    assert not (certs / "keys").exists() and (certs / "ca.key").exists()
    d = deploy(certs)
    link = d.superlink()
    nodes = [d.supernode(i) for i in range(2)]
    sub = d.submit("tls", rounds=1, nodes=2, sets=f"{SET} secagg=secaggplus")
    time.sleep(2)
    seen = {"superlink": _private_keys(link), "submit": _private_keys(sub)}
    assert _wait_exit(sub, d) == 0, d.logs()
    seen.update({f"supernode{i}": _private_keys(n) for i, n in enumerate(nodes)})
    print("private keys each container holds:", json.dumps(seen))
    assert seen["superlink"] and all(p.endswith("/server.key") for p in seen["superlink"]), seen
    assert seen["submit"] == [], seen
    for i in range(2):
        assert seen[f"supernode{i}"] and all(p.endswith("/node-key/key") for p in seen[f"supernode{i}"]), seen
    node_keys = {n.exec_run(["cat", f"/node-keys/supernode{i}.pub"]).output.decode().split()[1]
                 for i, n in enumerate(nodes)}
    assert len(node_keys) == 2      # two key pairs: each made its own
    s = _summary(d.runs, "tls")
    assert s["status"] == "completed" and s["secure_aggregation"]["model"].startswith("malicious server"), s
    keys = sorted(v["key"] for v in s["nodes"].values() if "key" in v)
    import base64
    import hashlib
    expected = sorted("SHA256:" + base64.b64encode(hashlib.sha256(base64.b64decode(k)).digest()).decode().rstrip("=")
                      for k in node_keys)
    assert keys == expected, (keys, expected)
    stranger_key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", "stranger", "-f",
                    str(stranger_key)], check=True)
    stranger = d.run("stranger", ["flower-supernode", "--root-certificates", "/certs/ca.crt",
                                  "--auth-supernode-private-key", "/stranger/stranger", "--superlink",
                                  compat.fleet_address("superlink", 8000, 9092),
                                  "--node-config", 'clients="auto"'], vols=[(str(tmp_path), "/stranger", "ro")])
    rc = _wait_exit(stranger, d, timeout=180)
    log = stranger.logs().decode(errors="replace")
    assert rc != 0 and "code: 2004" in log, log[-2000:]


@pytest.mark.drill
def test_supernode_killed_and_restarted_mid_run(deploy):
    """faults.sh drill A: the rounds without the node lose its clients only; it rejoins."""
    d = deploy()
    d.superlink()
    nodes = [d.supernode(i) for i in range(3)]
    # rounds of this small job take about a second: enough of them that the restarted node has time
    # to start and rejoin before the run ends
    sub = d.submit("faults-node", rounds=30, nodes=3)
    log = d.runs / "faults-node" / "rounds.log"
    _wait_round(log, 2)
    victim = nodes[0]
    t_kill = time.monotonic()
    victim.kill()
    _wait_round(log, 3)
    victim.start()
    started_after = len((d.runs / "faults-node" / "rounds.jsonl").read_text().splitlines())
    assert _wait_exit(sub, d) == 0, d.logs()
    s = _summary(d.runs, "faults-node")
    rounds = [json.loads(x) for x in (d.runs / "faults-node" / "rounds.jsonl").read_text().splitlines()]
    table = [(r["round"], r["phases"][0]["replies"], len(r["phases"][0]["excluded"]), round(r["wall_s"], 1))
             for r in rounds]
    print(f"drill A (killed at {time.monotonic() - t_kill:.0f} s before the end): round, replies, excluded, wall s "
          f"{table}")
    assert s["status"] == "completed" and s["rounds_completed"] == 30
    lost = next((i for i, r in enumerate(rounds) if r["phases"][0]["excluded"]), None)   # the round in flight
    assert lost is not None and 1 <= lost <= started_after, table                        # lost its clients
    assert all(r["phases"][0]["replies"] == 3 for r in rounds[:lost]), table
    assert all(r["phases"][0]["replies"] == 2 for r in rounds[lost:started_after]), table   # reassigned
    assert any(r["phases"][0]["replies"] == 3 for r in rounds[started_after:]), table    # and back
    assert not any(p.get("state_lost") for r in rounds for p in r["phases"])   # the state volume followed


@pytest.mark.drill
def test_superlink_restart_then_resume_equals_an_uninterrupted_run(deploy, data_dir, tmp_path):
    """faults.sh drill B."""
    d = deploy()
    link = d.superlink()
    for i in range(3):
        d.supernode(i)
    sub = d.submit("faults-link", rounds=4, nodes=3)
    _wait_round(d.runs / "faults-link" / "rounds.log", 2)
    link.restart(timeout=5)
    assert _wait_exit(sub, d) != 0, "the interrupted submission exited 0"
    again = d.submit("faults-link", rounds=4, nodes=3, resume=True)
    assert _wait_exit(again, d) == 0, d.logs()
    s = _summary(d.runs, "faults-link")
    from launcher.cli import main

    ref = tmp_path / "reference"
    assert main(["run", "--preset", "fedavg-mf-ml100k", "--mode", "inproc", "--nodes", "3", "--quiet",
                 "--set", "num-rounds=4", *[x for kv in SET.split() for x in ("--set", kv)],
                 "--data-dir", data_dir, "--out", str(ref)]) == 0
    assert s["status"] == "completed" and s["metrics"] == json.loads((ref / "summary.json").read_text())["metrics"]


def test_compose_file_runs_with_results_on_the_host(image, data_dir, tmp_path):
    tool = ["docker", "compose"] if subprocess.run(["docker", "compose", "version"],
                                                   capture_output=True).returncode == 0 else ["docker-compose"]
    if tool == ["docker-compose"] and shutil.which("docker-compose") is None:
        _unavailable("neither docker compose nor docker-compose")
    runs = tmp_path / "runs"
    runs.mkdir()
    project = f"corollatest{os.getpid()}"
    env = dict(os.environ, COROLLA_DATA=str(Path(data_dir).resolve()), COROLLA_RUNS=str(runs), COROLLA_IMAGE=image,
               COROLLA_PRESET="fedavg-mf-ml100k", COROLLA_ROUNDS="1", COROLLA_NODES="2", COROLLA_RUN_NAME="compose",
               COROLLA_OFFLINE="1", COROLLA_SET=SET, COROLLA_CONTROL_PORT="0", COROLLA_FLEET_PORT="0")
    base = tool + ["-p", project, "-f", str(ROOT / "compose.yaml")]
    try:
        p = subprocess.run(base + ["up", "--no-build", "--scale", "supernode=2", "--exit-code-from", "run"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        s = json.loads((runs / "compose" / "summary.json").read_text())
        assert s["status"] == "completed" and s["rounds_completed"] == 1
    finally:
        subprocess.run(base + ["down", "-v"], cwd=ROOT, env=env, capture_output=True, timeout=300)
