"""Bad input, as a new user gives it: every row is one CLI call -> one line on stderr that names the
input, the reason and what to do, and a non-zero exit (``docs/bad-input.md`` is this table).

Then the node side: a node whose state directory cannot be written (a full disk, a path that is
not a folder) fails its own logical clients with that reason, and the run completes without them.
"""
from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launcher.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "num-rounds=1", "--set", "fraction-train=0.1"]


def _finished(tmp: Path) -> Path:
    """A finished one-round run (made once per test session)."""
    out = tmp / "finished"
    if not (out / "summary.json").exists():
        assert main(["run", "--preset", "fedavg-mf-ml100k", *SMALL, "--mode", "inproc", "--quiet",
                     "--out", str(out)]) == 0
    return out


def _truncated(tmp: Path) -> Path:
    src = _finished(tmp)
    out = tmp / "truncated"
    if not out.exists():
        shutil.copytree(src, out)
        (out / "summary.json").unlink()
        data = (out / "checkpoint.npz").read_bytes()
        (out / "checkpoint.npz").write_bytes(data[: len(data) // 3])
    return out


def _bad_toml(tmp: Path) -> Path:
    p = tmp / "bad.toml"
    p.write_text('num-rounds = 3\nlr = [\n')
    return p


def _empty(tmp: Path) -> Path:
    p = tmp / "empty-data"
    p.mkdir(exist_ok=True)
    return p


# (name, argv built from the tmp folder, substrings of the one stderr line, exit code)
ROWS = [
    ("unknown preset", lambda t: ["run", "--preset", "nope"], ["unknown preset 'nope'", "Presets:"], 2),
    ("unknown key", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--set", "bogus=1"],
     ["unknown config key 'bogus'", "Valid keys:"], 2),
    ("override without '='", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--set", "num-rounds"],
     ["override 'num-rounds'", "key=value"], 2),
    ("wrong type", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--set", "num-rounds=abc"],
     ["'num-rounds'", "expected int", "'abc'"], 2),
    ("rounds <= 0", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--set", "num-rounds=0"],
     ["'num-rounds'", "expected >= 1", "got 0"], 2),
    ("not a choice", lambda t: ["run", "--preset", "fedca-pmf-ml100k", "--set", "fedca-qp=foo"],
     ["'fedca-qp'", "expected one of", "'foo'"], 2),
    ("--nodes 0", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--nodes", "0"], ["--nodes", ">= 1"], 2),
    ("--node-config index", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--nodes", "2", "--node-config",
                                       "5:x=1"], ["--node-config '5:x=1'", "0 <= I < --nodes"], 2),
    ("--config missing file", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--config", str(t / "no.toml")],
     ["--config", "no.toml", "no such file", "TOML"], 2),
    ("--config invalid TOML", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--config", str(_bad_toml(t))],
     ["--config", "bad.toml", "not valid TOML"], 2),
    ("--data-dir missing", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--data-dir", str(t / "nowhere")],
     ["--data-dir", "nowhere", "no such directory", "leave it out to download"], 2),
    ("--resume missing folder", lambda t: ["run", "--resume", str(t / "nowhere")],
     ["--resume", "nowhere", "no such directory"], 2),
    ("--resume without checkpoint", lambda t: ["run", "--resume", str(_empty(t))],
     ["--resume", "empty-data", "no checkpoint.npz"], 2),
    ("--resume truncated checkpoint", lambda t: ["run", "--resume", str(_truncated(t)), "--mode", "inproc"],
     ["--resume", "truncated", "checkpoint cannot be read", "start it again with another --out"], 2),
    ("--out of a finished run", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--out", str(_finished(t))],
     ["--out", "already holds a run", "--resume"], 2),
    ("no node can load the data", lambda t: ["run", "--preset", "fedavg-mf-ml100k", *SMALL, "--mode", "inproc",
                                             "--quiet", "--data-dir", str(_empty(t)), "--out", str(t / "nodata")],
     ["no node could host a logical client", "ml100k_100clients.tsv", "not found", "Get it from https://",
      "--data-dir"], 2),
    ("supernode poll", lambda t: ["supernode", "--idle-poll", "abc"], ["--idle-poll", "seconds", "'abc'"], 2),
    ("--ray-address outside sim", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--ray-address", "10.0.0.1:6379"],
     ["--ray-address", "only with --mode sim"], 2),
    ("--drop-node-state with --superlink", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--superlink",
                                                      "127.0.0.1:1", "--drop-node-state"],
     ["--drop-node-state", "SuperNodes' machines"], 2),
    ("--sim-client-cpus 0", lambda t: ["run", "--preset", "fedavg-mf-ml100k", "--mode", "sim", "--sim-client-cpus", "0"],
     ["--sim-client-cpus 0", "at least 1"], 2),
    ("max-users < 0", lambda t: ["run", "--preset", "pfedrec-ml100k", "--set", "max-users=-5"],
     ["max-users", "positive count", "-5"], 2),
    ("item-upload=rows for FedCA", lambda t: ["run", "--preset", "fedca-pmf-ml100k", "--set", "item-upload=rows"],
     ["item-upload", "method 'fedca'", "item-upload='full'"], 2),
    ("one-user-eval=global for FedCA", lambda t: ["run", "--preset", "fedca-pmf-ml100k", "--set", "one-user-eval=global"],
     ["one-user-eval", "method 'fedca'", "use 'own'"], 2),
    ("ncf-tower=personal for FedCA", lambda t: ["run", "--preset", "fedca-ncf-ml100k", "--set", "ncf-tower=personal"],
     ["ncf-tower", "method 'fedca'", "use 'shared'"], 2),
    ("test-mask-valid=false on leave-one-out", lambda t: ["run", "--preset", "fedca-pmf-ml100k", "--set",
                                                         "test-mask-valid=false"],
     ["test-mask-valid", "protocol='full-rank'", "got protocol='loo'"], 2),
    ("one-user clients in subgraphs on leave-one-out", lambda t: ["run", "--preset", "pfedrec-lpsfed-gowalla", "--set",
                                                                  "protocol=loo"],
     ["'protocol'", "partition='spectral'", "needs protocol='full-rank'"], 2),
    ("ranking beyond a subgraph without subgraphs", lambda t: ["run", "--preset", "pfedrec-ml100k", "--set",
                                                               "rank-items=all"],
     ["'rank-items'", "partition='user'", "use 'own'"], 2),
    ("report --results missing", lambda t: ["report", "--results", str(t / "nowhere"), "--out", str(t / "site")],
     ["--results", "nowhere", "expected a folder of result files"], 2),
    ("report --results-md missing", lambda t: ["report", "--results", str(ROOT / "docs" / "results"), "--results-md",
                                               str(t / "no.md"), "--out", str(t / "site")],
     ["--results-md", "no.md", "no such file"], 2),
    ("report --method-docs missing", lambda t: ["report", "--results", str(ROOT / "docs" / "results"), "--method-docs",
                                                str(t / "nowhere"), "--out", str(t / "site")],
     ["--method-docs", "nowhere", "no such folder"], 2),
]


STARTS_A_RUN = {"no node can load the data"}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("bad-input")


@pytest.mark.parametrize("name,argv,says,code", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_with_the_input_the_reason_and_the_fix(name, argv, says, code, tmp, capsys,
                                                                     monkeypatch, data_dir):
    monkeypatch.setenv("COROLLA_DATA", data_dir)
    if name == "no node can load the data":   # offline, nothing cached: the file is nowhere
        monkeypatch.setenv("COROLLA_DATA", str(_empty(tmp)))
        monkeypatch.setenv("COROLLA_CACHE", str(_empty(tmp)))
        monkeypatch.setenv("COROLLA_OFFLINE", "1")
    args = argv(tmp)
    if name in STARTS_A_RUN:   # its own process: Flower's logger as a user's terminal has it
        r = subprocess.run([sys.executable, "-c", "import sys; from launcher.cli import main; "
                            "sys.exit(main(sys.argv[1:]))", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        rc, err = r.returncode, r.stderr.strip().splitlines()
    else:
        capsys.readouterr()
        try:
            rc = main(args)
        except SystemExit as e:   # argparse's own errors
            rc = e.code
        err = capsys.readouterr().err.strip().splitlines()
    assert rc == code, (name, rc, err[-3:])
    last = err[-1]
    assert "error" in last and all(s in last for s in says), (name, last)
    assert "Traceback" not in "\n".join(err), name


def test_the_docs_table_lists_every_row():
    text = (ROOT / "docs" / "bad-input.md").read_text()
    for name, *_ in ROWS:
        assert f"| {name} |" in text, name


def _run_with_node_state(tmp_path, data_dir, state_dir: str, name: str):
    from launcher.inproc import InProcessTransport, partitions
    from server_app.app import run_federation

    nodes = partitions(2, {"data-dir": data_dir})
    nodes[1]["state-dir"] = state_dir
    return run_federation(InProcessTransport(nodes), {"preset": "fedavg-mf-ml100k", "set": "num-rounds=2",
                                                      "out-dir": str(tmp_path / name), "data-dir": data_dir})


def test_a_full_disk_on_one_node_fails_only_its_clients(tmp_path, data_dir, monkeypatch):
    import corolla.state as state

    real = state.atomic_save_npz

    def save(path, arrays, private=False, **kw):
        if "full-disk" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, arrays, private, **kw)

    monkeypatch.setattr(state, "atomic_save_npz", save)
    s = _run_with_node_state(tmp_path, data_dir, str(tmp_path / "full-disk"), "full")
    assert s["status"] == "completed" and np.isfinite(s["metrics"]["ndcg@10"])
    rounds = [json.loads(x) for x in open(tmp_path / "full" / "rounds.jsonl")]
    ex = [e for r in rounds for p in r["phases"] for e in p["excluded"]]
    assert ex and all("No space left on device" in e["reason"] and "full-disk" in e["reason"]
                      and "state-dir" in e["reason"] for e in ex)
    assert len({e["node"] for e in ex}) == 1
    assert s["rounds_completed"] == 2


def test_states_that_cannot_be_made_durable_fail_only_that_nodes_clients(tmp_path, data_dir, monkeypatch):
    """The states a phase saved are flushed once before the node replies (``StateStore.sync``);
    when that flush fails (an I/O error), the node's clients of that phase fail, not the run."""
    import corolla.state as state

    real = state.sync_files

    def sync(directory, paths):
        if "bad-disk" in str(directory):
            raise OSError(errno.EIO, "Input/output error")
        return real(directory, paths)

    monkeypatch.setattr(state, "sync_files", sync)
    s = _run_with_node_state(tmp_path, data_dir, str(tmp_path / "bad-disk"), "eio")
    assert s["status"] == "completed" and np.isfinite(s["metrics"]["ndcg@10"])
    rounds = [json.loads(x) for x in open(tmp_path / "eio" / "rounds.jsonl")]
    ex = [e for r in rounds for p in r["phases"] for e in p["excluded"]]
    assert ex and all("cannot make" in e["reason"] and "durable" in e["reason"] and "Input/output error" in e["reason"]
                      for e in ex)
    assert len({e["node"] for e in ex}) == 1


def test_sync_files_flushes_once_with_syncfs_else_each_file(tmp_path, monkeypatch):
    import os

    from corolla import util

    paths = []
    for i in range(3):
        util.atomic_save_npz(tmp_path / f"c{i}.npz", {"x": np.arange(4)}, durable=False)
        paths.append(tmp_path / f"c{i}.npz")
    fsyncs, flushes = [], []
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))
    real = util._syncfs()
    if real is not None:                                    # Linux: one syncfs for the batch, no fsync
        monkeypatch.setattr(util, "_syncfs", lambda: (lambda fd: flushes.append(fd) or real(fd)))
        util.sync_files(tmp_path, paths)
        assert len(flushes) == 1 and fsyncs == []
    monkeypatch.setattr(util, "_syncfs", lambda: None)      # no syncfs: each file and the directory
    util.sync_files(tmp_path, paths)
    assert len(fsyncs) == 4
    assert all(util.load_npz(p)["x"].tolist() == [0, 1, 2, 3] for p in paths)


def test_a_state_dir_that_cannot_be_created_fails_only_that_node(tmp_path, data_dir):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    s = _run_with_node_state(tmp_path, data_dir, str(blocker / "state"), "blocked")
    assert s["status"] == "completed"
    failed = [v for v in s["nodes"].values() if "failure" in v]
    assert len(failed) == 1 and "node state directory" in failed[0]["failure"] and "cannot create" in failed[0]["failure"]


def test_version_mismatch_is_one_line_naming_both_versions():
    from corolla.messages import version_mismatch

    server = {"protocol": "1", "corolla": "0.1.0", "flwr": "1.39.0"}
    assert version_mismatch(server, dict(server)) is None
    assert version_mismatch(server, {**server, "flwr": "1.39.2"}) is None      # a patch release speaks the same
    msg = version_mismatch(server, {**server, "flwr": "1.38.0"})
    assert msg == ("version mismatch: this node runs Flower 1.38.0 (the server: 1.39.0); install flwr==1.39.0 on "
                   "the node (or the node's on the server)")
    msg = version_mismatch(server, {"protocol": "2", "corolla": "0.2.0", "flwr": "1.39.0"})
    assert "message protocol 2 (the server: 1)" in msg and "Corolla 0.2.0 (the server: 0.1.0)" in msg


def test_a_node_with_another_flower_fails_its_handshake_with_that_line(tmp_path, data_dir, monkeypatch, capsys):
    import client_app.app as capp

    real = capp.node_versions
    monkeypatch.setattr(capp, "node_versions", lambda: {**real(), "flwr": "1.38.0"})
    rc = main(["run", "--preset", "fedavg-mf-ml100k", *SMALL, "--mode", "inproc", "--quiet", "--data-dir", data_dir,
               "--out", str(tmp_path / "mismatch")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and last.startswith("error: no node could host a logical client: version mismatch: this node "
                                       "runs Flower 1.38.0 (the server: ") and "install flwr==" in last, last


class _Nodes:
    """A transport whose SuperNodes connect one per ``every`` calls of ``node_ids``."""

    def __init__(self, total: int, every: int):
        self.total, self.every, self.calls = total, every, 0

    def node_ids(self):
        self.calls += 1
        return list(range(min(self.total, self.calls // self.every + 1)))


@pytest.mark.parametrize("total, want, says", [(2, 2, "2 SuperNodes connected"),
                                              (1, 2, "only 1 of the 2 SuperNodes asked for (min-nodes)")])
def test_a_run_that_starts_with_fewer_nodes_than_asked_warns(total, want, says, caplog):
    """``min-nodes`` waits for the nodes; when some do not come within the wait, the run starts
    with those there and says so in a warning (not silently: its first rounds lack their clients)."""
    import logging

    from server_app.app import wait_for_nodes

    with caplog.at_level(logging.INFO, logger="flwr"):
        wait_for_nodes(_Nodes(total, every=2), want, timeout=1.0)
    level = [r.levelname for r in caplog.records if says in r.getMessage()]
    assert level == (["INFO"] if total >= want else ["WARNING"]), caplog.text
