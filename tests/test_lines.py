"""Both Flower lines against each other (``docs/deployment.md``, "Flower lines"):

* the same preset and seed through ``corolla run --mode local`` gives identical metrics, bytes
  and per-round numbers on Flower 1.39 (gRPC Fleet) and Flower 1.42 (HTTP Fleet);
* a stock ``flower-supernode`` installed from the registry in a venv of its own (Flower and
  Corolla's dependencies, *not* Corolla: the ClientApp's code comes in the FAB) joins a run with
  ``clients="auto"`` and gives the same metrics as the 1.39 run;
* a node of one line pointed at a SuperLink of the other is refused in one line.

They need the other line's interpreter and the stock node's venv, which ``.ci/run`` makes:
``COROLLA_OTHER_LINE_PYTHON`` (a venv of the other line with Corolla installed) and
``COROLLA_STOCK_NODE_VENV``. Without them they skip, unless ``COROLLA_REQUIRE_LINES=1`` (set by
``.ci/run``): then they fail.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flower_io import compat
from launcher.cli import wait_port
from launcher.ports import free_port
from tests.test_e2e import SMALL

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
JOB = SMALL[:] + ["num-rounds=2"]


def _need(var: str) -> str:
    value = os.environ.get(var, "")
    if value and Path(value).exists():
        return value
    why = f"{var} is not set to an existing path (.ci/run sets it)"
    if os.environ.get("COROLLA_REQUIRE_LINES") == "1":
        pytest.fail(f"COROLLA_REQUIRE_LINES=1 but {why}")
    pytest.skip(why)


def _flower_of(python: str) -> str:
    return subprocess.run([python, "-c", "from importlib.metadata import version; print(version('flwr'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def pythons() -> dict[str, str]:
    """Line name -> an interpreter with Corolla on that line (this one and the other)."""
    other = _need("COROLLA_OTHER_LINE_PYTHON")
    found = {compat.major_minor(compat.flower_version()): sys.executable,
             compat.major_minor(_flower_of(other)): other}
    assert set(found) == set(compat.LINES), f"the two interpreters are on lines {sorted(found)}"
    return found


def _env(**extra) -> dict[str, str]:
    env = dict(os.environ, COROLLA_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _sets(items):
    return [a for s in items for a in ("--set", s)]


@pytest.fixture(scope="module")
def line_runs(pythons, data_dir, tmp_path_factory) -> dict[str, dict]:
    """The README job, small, through a local SuperLink and 2 SuperNodes on each line."""
    out = {}
    for name, py in sorted(pythons.items()):
        d = tmp_path_factory.mktemp(f"line{name}") / "run"
        p = subprocess.run([py, "-m", "launcher.cli", "run", "--preset", "fedavg-mf-ml100k", "--data-dir", data_dir,
                            "--out", str(d), "--nodes", "2", "--quiet", *_sets(JOB)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        s = json.loads((d / "summary.json").read_text())
        s["rounds"] = [json.loads(x) for x in (d / "rounds.jsonl").read_text().splitlines()]
        s["superlink_log"] = (d / "logs" / "superlink.log").read_text(errors="replace")
        out[name] = s
    return out


def _numbers(s: dict) -> dict:
    return {"metrics": s["metrics"], "last": s["last_round_metrics"], "bytes": (s["bytes_up"], s["bytes_down"]),
            "rounds": [(r["round"], r.get("metrics"), [(ph["bytes_up"], ph["bytes_down"]) for ph in r["phases"]])
                       for r in s["rounds"]]}


def test_same_preset_and_seed_give_identical_metrics_on_both_lines(line_runs):
    a, b = line_runs["1.39"], line_runs["1.42"]
    assert a["status"] == b["status"] == "completed" and a["rounds_completed"] == b["rounds_completed"] == 2
    assert _numbers(a) == _numbers(b)
    assert a["provenance"]["versions"]["flwr"] == "1.39.0" and b["provenance"]["versions"]["flwr"] == "1.42.0"
    # and each went over its own Fleet transport
    assert "Starting the SuperLink Fleet HTTP API" in b["superlink_log"]
    assert "Starting the SuperLink Fleet HTTP API" not in a["superlink_log"]


def test_stock_flower_supernode_from_its_own_venv_serves_a_run(pythons, line_runs, data_dir, tmp_path):
    """Stock ``flower-supernode`` of a venv made from the registry with Flower and Corolla's
    dependencies only: two of them with ``clients="auto"`` serve the run submitted with
    ``corolla run --superlink``; the metrics equal the 1.39 line's run of the same job."""
    venv = Path(_need("COROLLA_STOCK_NODE_VENV"))
    node_py = str(venv / "bin" / "python")
    version = _flower_of(node_py)
    name = compat.major_minor(version)
    assert name in pythons, f"the stock node venv has Flower {version}"
    lacks = subprocess.run([node_py, "-c", "import corolla"], capture_output=True, text=True, cwd=tmp_path,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert lacks.returncode != 0 and "No module named 'corolla'" in lacks.stderr   # stock: no Corolla there
    link_bin = Path(pythons[name]).parent
    home = tmp_path / "home"
    control, fleet_port = free_port(), free_port()
    fleet = compat.fleet_address("127.0.0.1", control, fleet_port, version)
    procs = []
    try:
        link = subprocess.Popen([str(link_bin / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                                 "--host", "127.0.0.1", "--port", str(control),
                                 *compat.superlink_fleet_args("127.0.0.1", fleet_port, version)],
                                cwd=tmp_path, env=_env(FLWR_HOME=home, PATH=f"{link_bin}:{os.environ['PATH']}"),
                                start_new_session=True, stdout=open(tmp_path / "link.log", "w"), stderr=subprocess.STDOUT)
        procs.append(link)
        wait_port(control, link)
        wait_port(int(fleet.rsplit(":", 1)[1]), link)
        node_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        node_env.update(PATH=f"{venv / 'bin'}:{os.environ['PATH']}", COROLLA_OFFLINE="1")
        for i in range(2):
            # each node its own FLWR_HOME, as on its own machine: two SuperNodes installing the app
            # bundle into one apps/ folder at once race (one ClientApp found no pyproject.toml)
            node_env["FLWR_HOME"] = str(tmp_path / f"node-home{i}")
            nc = f'clients="auto" data-dir="{data_dir}" state-dir="{tmp_path / "state"}"'
            procs.append(subprocess.Popen([str(venv / "bin" / "flower-supernode"), "--insecure", "--superlink", fleet,
                                           "--host", "127.0.0.1", "--port", str(free_port()), "--node-config", nc],
                                          cwd=tmp_path, env=node_env, start_new_session=True,
                                          stdout=open(tmp_path / f"node{i}.log", "w"), stderr=subprocess.STDOUT))
        out = tmp_path / "out"
        p = subprocess.run([pythons[name], "-m", "launcher.cli", "run", "--superlink", f"127.0.0.1:{control}",
                            "--nodes", "2", "--preset", "fedavg-mf-ml100k", "--out", str(out), *_sets(JOB)],
                           cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        s = json.loads((out / "summary.json").read_text())
        s["rounds"] = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
        assert s["provenance"]["nodes"] == 2
        assert _numbers(s)["metrics"] == _numbers(line_runs["1.39"])["metrics"]
        assert _numbers(s)["rounds"] == _numbers(line_runs["1.39"])["rounds"]
    finally:
        for pr in procs:
            try:
                os.killpg(pr.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            pr.wait()


@pytest.mark.parametrize("node_line", sorted(compat.LINES))
def test_a_node_of_the_other_line_is_refused_in_one_line(pythons, tmp_path, node_line):
    """``corolla supernode`` of one line at a SuperLink of the other exits 2 with one line saying
    which transports differ and what to install (stock Flower: a 404 exit or endless retries)."""
    link_line = next(n for n in pythons if n != node_line)
    link_py, node_py = pythons[link_line], pythons[node_line]
    link_version = _flower_of(link_py)
    link_bin = Path(link_py).parent
    control, fleet_port = free_port(), free_port()
    link = subprocess.Popen([str(link_bin / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                             "--host", "127.0.0.1", "--port", str(control),
                             *compat.superlink_fleet_args("127.0.0.1", fleet_port, link_version)],
                            cwd=tmp_path, env=_env(FLWR_HOME=tmp_path / "home", PATH=f"{link_bin}:{os.environ['PATH']}"),
                            start_new_session=True, stdout=open(tmp_path / "link.log", "w"), stderr=subprocess.STDOUT)
    try:
        try:
            wait_port(control, link)
        except RuntimeError as e:
            raise AssertionError(f"{e}\n{(tmp_path / 'link.log').read_text()[-3000:]}") from None
        # where a node of its own line would connect, and the other port a user might try
        targets = {compat.fleet_address("127.0.0.1", control, fleet_port, link_version), f"127.0.0.1:{control}"}
        for target in sorted(targets):
            p = subprocess.run([node_py, "-m", "launcher.supernode", "--insecure", "--superlink", target,
                                "--host", "127.0.0.1", "--port", str(free_port())], cwd=ROOT,
                               env=_env(FLWR_HOME=tmp_path / "node", PATH=f"{Path(node_py).parent}:{os.environ['PATH']}"),
                               capture_output=True, text=True, timeout=120)
            lines = [x for x in p.stderr.splitlines() if x.strip()]
            assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
            assert len(lines) == 1 and lines[0].startswith(f"error: --superlink {target} "), lines
            assert f"this node runs Flower {_flower_of(node_py)}" in lines[0]
            assert f"constraints/flwr-{link_line}.txt" in lines[0]
    finally:
        os.killpg(link.pid, signal.SIGKILL)
        link.wait()
