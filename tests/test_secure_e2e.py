"""Secure aggregation over the network: a TLS SuperLink with SuperNode authentication, 4
``corolla supernode`` processes with registered keys that also sign their round keys and the
survivor set (each trusts the registered public keys), FedAvg-MF with ``secagg = "secaggplus"``;
one SuperNode is SIGKILLed right after the key-sharing phase (once every node has sent its
shares). The round completes with the survivors' sum (3 masked vectors unmasked, the killed node's
mask keys reconstructed from its neighbours' shares), and its metrics match the in-process secure
run that loses the same node at the same point."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.cli import flower_bin
from launcher.ports import free_port as _free_port
from tests.test_deployment import _env, _kill, _need_tls_tools, _tls_superlink

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
SETS = ["num-rounds=1", "secagg=secaggplus", "fraction-train=1.0"]


def _secagg_replies_sent(log: Path) -> int:
    """How many secagg replies the SuperNode has sent (Flower logs "Sending: query.secagg ..." and,
    once the SuperLink has it, "Sent successfully")."""
    sent, pending = 0, False
    for line in (log.read_text(errors="replace").splitlines() if log.exists() else []):
        if "Sending: " in line:
            pending = "Sending: query.secagg" in line
        elif "Sent successfully" in line and pending:
            sent, pending = sent + 1, False
    return sent


def test_secagg_over_tls_with_a_node_killed_after_key_sharing(tmp_path, data_dir):
    _need_tls_tools()
    certs = tmp_path / "certs"
    subprocess.run(["bash", str(ROOT / "docker" / "certs.sh"), str(certs), "4"], check=True, capture_output=True)
    env = _env(FLWR_HOME=tmp_path / "home")
    state = tmp_path / "state"
    procs = []
    try:
        control, fleet = _tls_superlink(tmp_path, certs, env, procs)
        for i in range(4):
            reg = subprocess.run([flower_bin("flwr"), "supernode", "register", f"{certs}/keys/node{i}.pub", "c"],
                                 env=env, capture_output=True, text=True, timeout=120)
            assert reg.returncode == 0, reg.stdout + reg.stderr
        nodes = []
        for i in range(4):
            # each node: its own key (corolla supernode passes it on as auth-key-file) and the list of
            # the registered public keys it trusts
            nc = (f'partition-id={i} num-partitions=4 data-dir="{data_dir}" state-dir="{state / str(i)}" '
                  f'trusted-keys="{certs / "keys"}"')
            nodes.append(subprocess.Popen(
                [sys.executable, "-m", "launcher.supernode", "--idle-poll", "0.05", "--root-certificates",
                 f"{certs}/ca.crt", "--auth-supernode-private-key", f"{certs}/keys/node{i}", "--superlink",
                 f"127.0.0.1:{fleet}", "--host", "127.0.0.1", "--port", str(_free_port()), "--node-config", nc],
                env=env, cwd=ROOT, start_new_session=True, stdout=open(tmp_path / f"node{i}.log", "w"),
                stderr=subprocess.STDOUT))
        procs += nodes
        run = subprocess.Popen(
            [sys.executable, "-m", "launcher.cli", "run", "--superlink", f"127.0.0.1:{control}", "--nodes", "4",
             "--root-certificates", f"{certs}/ca.crt", "--preset", "fedavg-mf-ml100k", "--out", str(tmp_path / "out"),
             *[a for s in SETS for a in ("--set", s)]],
            cwd=ROOT, env=env, stdout=open(tmp_path / "run.log", "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        procs.append(run)
        victim = None
        end = time.monotonic() + 300
        while time.monotonic() < end and run.poll() is None:
            # every node's share reply has left it (its second secagg reply sent: setup, then share;
            # the shares themselves live in the SuperNodes' memory, nothing is on disk); node 1 dies
            # now, before it answers the train message
            if all(_secagg_replies_sent(tmp_path / f"node{i}.log") >= 2 for i in range(4)):
                victim = nodes[1]
                os.killpg(victim.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        assert victim is not None, (tmp_path / "run.log").read_text()[-3000:]
        assert run.wait(timeout=600) == 0, (tmp_path / "run.log").read_text()[-3000:]
        s = json.loads((tmp_path / "out" / "summary.json").read_text())
        rounds = [json.loads(x) for x in (tmp_path / "out" / "rounds.jsonl").read_text().splitlines()]
        names = [p["name"] for p in rounds[0]["phases"]]
        print("secure round over TLS, node 1 killed after key sharing:", json.dumps(
            {"phases": [{k: p[k] for k in ("name", "replies", "bytes_up", "bytes_down", "wall_s")} | {
                "excluded": len(p["excluded"])} for p in rounds[0]["phases"]],
             "train": rounds[0]["train"], "metrics": s["metrics"]}))
        assert names[:5] == ["secagg-setup", "secagg-share", "train", "secagg-confirm", "secagg-unmask"], names
        assert rounds[0]["phases"][1]["replies"] == 4                   # all four shared their keys
        assert rounds[0]["train"]["secagg-nodes"] == 3                  # the survivors' sum
        assert rounds[0]["phases"][3]["replies"] == 3 and rounds[0]["phases"][4]["replies"] == 3
        assert s["status"] == "completed"
        assert s["secure_aggregation"]["model"].startswith("malicious server")   # signed keys, checked
        keys = [v.get("key") for v in s["nodes"].values()]
        assert sum(1 for k in keys if k and k.startswith("SHA256:")) == 4   # each node's key is recorded
    finally:
        _kill(procs)
