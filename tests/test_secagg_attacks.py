"""Secure aggregation under attack, through Corolla's rounds (``secagg = "secaggplus"``;
``server_app/secure.py``, ``client_app/secure.py``, protocol ``corolla.secagg``). Each test plays
one finding of the review behind issue 35 as an attacker or an accident would — a lost reply, a
hostile node's reply, a server that omits or rewrites what it sends — through the real ServerApp
loop and the real ClientApp handler (``launcher.inproc``), and checks what must hold: no node
uploads in the clear, one masked vector per node and round, a wrong sum never comes back, a node
fixes its parameters itself, no secret is written to disk, only aggregate metrics leave a node,
every secure-aggregation reply is bounded, compose shares no private key, and no SuperLink is
published beyond the host without TLS. Protocol-level attacks (a lying server, substituted keys)
are in ``tests/test_secagg.py``."""
from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from client_app.app import handle_flat
from corolla.config import resolve
from corolla.messages import PhaseRequest, RunInfo, config_hash
from launcher.inproc import InProcessTransport, partitions
from server_app import secure as server_secure
from server_app.app import run_federation
from server_app.transport import TIMEOUT_PREFIX

ROOT = Path(__file__).resolve().parents[1]
ONE = "num-rounds=1 secagg=secaggplus"


class Net(InProcessTransport):
    """The in-process transport with the network's accidents: ``lose(node, type, message)``
    loses a reply after the node handled its message."""

    def __init__(self, configs, tamper=None, lose=None):
        super().__init__(configs, tamper=tamper)
        self.lose = lose

    def _replies(self, messages, message_type, dead, limits=None):
        for idx, rep in super()._replies(messages, message_type, dead, limits):
            if self.lose is not None and self.lose(messages[idx][0], message_type, messages[idx][1]):
                yield idx, f"{TIMEOUT_PREFIX} 60 s"
            else:
                yield idx, rep


def _run(tmp_path, data_dir, name, sets, nodes=4, tamper=None, lose=None, preset="fedavg-mf-ml100k", node_extra=None):
    t = Net([{**nc, **(node_extra or {})} for nc in partitions(nodes, {"data-dir": data_dir,
                                                                        "state-dir": str(tmp_path / name / "ns")})],
            tamper=tamper, lose=lose)
    out = tmp_path / name
    try:
        s = run_federation(t, {"preset": preset, "set": sets, "out-dir": str(out), "data-dir": data_dir})
    except Exception:   # noqa: BLE001 - a failed run still writes its summary
        s = json.loads((out / "summary.json").read_text())
    rounds = [json.loads(x) for x in open(out / "rounds.jsonl")] if (out / "rounds.jsonl").exists() else []
    ck = np.load(out / "checkpoint.npz") if (out / "checkpoint.npz").exists() else None
    return s, ck, rounds, t


def _phase(rounds, name):
    return next(p for p in rounds[0]["phases"] if p["name"] == name)


class Spy:
    """Records every reply of the summed phase: which records it carried."""

    def __init__(self, mtype="train"):
        self.mtype, self.seen = mtype, []

    def __call__(self, node, mtype, rd):
        if mtype == self.mtype:
            self.seen.append((node, {k: dict(v) for k, v in rd.items()}))
        return rd

    def plaintext(self):
        return [n for n, rd in self.seen if "payload" in rd]


def _second(t):
    return sorted(t.nodes)[1]


@pytest.fixture(scope="module")
def plain(tmp_path_factory, data_dir):
    """The plain run the secure ones are compared with."""
    tmp = tmp_path_factory.mktemp("plain")
    s, ck, rounds, _ = _run(tmp, data_dir, "plain", "num-rounds=1")
    return s, ck


def _close_to_plain(ck, plain_ck, rounds, nodes):
    cfg = resolve("fedavg-mf-ml100k", {"secagg": "secaggplus"})
    e = nodes * 2 * cfg["secagg-clip"] / (1 << cfg["secagg-bits"])
    w = rounds[0]["train"]["secagg-weight"]
    a = plain_ck["global/item.weight"].astype(np.float64)
    return np.abs(a - ck["global/item.weight"]).max() <= e * (1 + np.abs(a).max()) / (w - e)


# ---------------------------------------------------------------- 1. plaintext fallback
def test_a_lost_share_reply_never_makes_a_node_upload_in_the_clear(tmp_path, data_dir):
    spy = Spy()
    victim = []

    def lose(node, mtype, content):
        if content["config"]["phase"] == "secagg-share" and not victim:
            victim.append(node)
        return content["config"]["phase"] == "secagg-share" and node == victim[0]
    s, ck, rounds, t = _run(tmp_path, data_dir, "lost", ONE, tamper=spy, lose=lose)
    assert s["status"] == "completed"
    assert spy.plaintext() == [], "a node uploaded its clients' payloads in the clear"
    assert victim[0] not in [n for n, _ in spy.seen]      # it got no message of the summed phase
    reasons = [x["reason"] for x in _phase(rounds, "train")["excluded"]]
    assert len(reasons) == 25 and all("did not complete the key sharing" in r for r in reasons)
    assert rounds[0]["train"]["secagg-nodes"] == 3


def test_a_node_refuses_the_summed_phase_without_its_secure_entries(tmp_path, data_dir, monkeypatch):
    """A server (buggy or lying) sends one node the summed phase without its secure-aggregation
    entries: the node refuses instead of answering in the clear."""
    orig = server_secure.SecureRound.collect_config
    bare = []

    def collect_config(self, node):
        cfg = orig(self, node)
        if not bare:
            bare.append(node)
        return {} if node == bare[0] else cfg
    monkeypatch.setattr(server_secure.SecureRound, "collect_config", collect_config)
    spy = Spy()
    s, ck, rounds, t = _run(tmp_path, data_dir, "bare", ONE, tamper=spy)
    assert spy.plaintext() == []
    why = [x["reason"] for x in _phase(rounds, "train")["excluded"] if x["node"] == bare[0]]
    assert why and all("refused" in w and "in the clear" in w for w in why), why


def test_one_node_with_an_invalid_key_leaves_its_neighbours_masked(tmp_path, data_dir):
    spy = Spy()
    hostile = []

    def tamper(node, mtype, rd):
        if mtype == "query.secagg" and "secagg" in rd and "pk1" in rd["secagg"] and not hostile:
            hostile.append(node)
            rd["secagg"]["pk1"] = base64.b64encode(b"\x04" + b"\x01" * 96).decode()   # not a point
        return spy(node, mtype, rd)
    s, ck, rounds, _ = _run(tmp_path, data_dir, "badkey", ONE, tamper=tamper)
    assert s["status"] == "completed" and spy.plaintext() == []
    assert rounds[0]["train"]["secagg-nodes"] == 3
    assert any("not a point" in x["reason"] for x in _phase(rounds, "secagg-setup")["excluded"])


# ------------------------------------------------------------- 2. one mask, several vectors
def test_one_masked_vector_per_node_and_round_with_chunked_messages(tmp_path, data_dir, plain):
    spy = Spy()
    s, ck, rounds, t = _run(tmp_path, data_dir, "chunks", f"{ONE} clients-per-message=10", tamper=spy)
    per_node = {}
    for n, rd in spy.seen:
        per_node[n] = per_node.get(n, 0) + ("secagg" in rd)
    assert s["status"] == "completed" and set(per_node.values()) == {1}, per_node
    assert _close_to_plain(ck, plain[1], rounds, 4)


# ---------------------------------------------------------- 3. one bad share, a wrong sum
def test_a_corrupted_unmask_share_never_gives_a_wrong_sum(tmp_path, data_dir, plain):
    hostile = []

    def tamper(node, mtype, rd):
        if mtype == "query.secagg" and "shares" in rd.get("secagg", {}) and not hostile:
            hostile.append(node)
            shares = json.loads(rd["secagg"]["shares"])
            k = sorted(shares)[0]
            raw = base64.b64decode(shares[k])
            shares[k] = base64.b64encode(raw[:4] + bytes(len(raw) - 4)).decode()
            rd["secagg"]["shares"] = json.dumps(shares)
        return rd
    s, ck, rounds, _ = _run(tmp_path, data_dir, "badshare", ONE, tamper=tamper)
    if s["status"] == "completed":
        assert _close_to_plain(ck, plain[1], rounds, 4), "a wrong sum was accepted"
    else:
        assert "secure" in s["error"] or "secagg" in s["error"] or "share" in s["error"]


def test_a_garbage_masked_vector_never_gives_a_wrong_sum(tmp_path, data_dir):
    """A hostile node sends uniform noise as its masked vector (well-formed: the right size and
    range): the unmasked sum leaves the range of the nodes' quantised vectors and the round fails
    with a clear error instead of aggregating garbage."""
    hostile = []

    def tamper(node, mtype, rd):
        if mtype == "train" and "secagg" in rd and not hostile:
            hostile.append(node)
            y = rd["secagg"]["masked"].numpy()
            from flwr.app import Array
            rd["secagg"]["masked"] = Array(np.random.default_rng(1).integers(0, 1 << 32, y.shape, dtype=np.int64))
        return rd
    s, ck, rounds, _ = _run(tmp_path, data_dir, "garbage", ONE, tamper=tamper)
    assert s["status"] == "failed" and "outside the range" in s["error"], s.get("error")


def test_a_share_set_missing_a_neighbour_excludes_only_its_node(tmp_path, data_dir):
    hostile = []

    def tamper(node, mtype, rd):
        if mtype == "query.secagg" and "cts" in rd.get("secagg", {}) and not hostile:
            hostile.append(node)
            cts = json.loads(rd["secagg"]["cts"])
            cts.pop(sorted(cts)[0])
            rd["secagg"]["cts"] = json.dumps(cts)
        return rd
    spy = Spy()
    s, ck, rounds, _ = _run(tmp_path, data_dir, "missing", ONE, tamper=lambda n, m, r: spy(n, m, tamper(n, m, r)))
    assert s["status"] == "completed" and spy.plaintext() == []
    assert rounds[0]["train"]["secagg-nodes"] == 3


def test_a_key_that_is_not_text_excludes_only_its_node(tmp_path, data_dir):
    def tamper(node, mtype, rd):
        if mtype == "query.secagg" and "pk1" in rd.get("secagg", {}) and node == sorted(rd_nodes)[0]:
            rd["secagg"]["pk1"] = 12345
        return rd
    rd_nodes = [1000 + 7919 * (i + 1) for i in range(4)]
    s, ck, rounds, _ = _run(tmp_path, data_dir, "intkey", ONE, tamper=tamper)
    assert s["status"] == "completed", s.get("error")
    assert rounds[0]["train"]["secagg-nodes"] == 3


# --------------------------------------------------------- 4. parameters from every message
def _handshake(node_config, cfg, run):
    state: dict = {}
    handle_flat(PhaseRequest("handshake", 0, [], run, cfg=cfg, versions=None).encode(), node_config, state)
    return state


def test_a_node_takes_its_parameters_from_the_run_config_and_refuses_a_weak_threshold(tmp_path, data_dir):
    """The server sends a threshold of 1 (in its config, and in a message as the old wire format
    carried it): the node refuses to set up."""
    cfg = resolve("fedavg-mf-ml100k", {"secagg": "secaggplus", "secagg-threshold": 1})
    run = RunInfo("attack-run", config_hash(cfg), str(tmp_path / "st"), data_dir)
    nc = {"partition-id": 0, "num-partitions": 4, "data-dir": data_dir}
    state = _handshake(nc, cfg, run)
    setup = PhaseRequest("secagg-setup", 1, [], run, secagg={
        "secagg-round": 1, "secagg-id": 1, "secagg-n": 4, "secagg-phase": "train",
        "secagg-params": json.dumps([1, 4.0, 24, 0])}).encode()
    with pytest.raises(Exception, match="secagg-threshold: expected >= 2"):
        handle_flat(setup, nc, state)


# ----------------------------------------------------------------- 5. secrets on a shared disk
def test_no_secret_is_written_to_disk_and_client_state_is_private(tmp_path, data_dir):
    files: list[Path] = []

    def tamper(node, mtype, rd):
        files.extend(p for p in (tmp_path / "disk").rglob("*") if p.is_file())
        return rd
    s, _, _, t = _run(tmp_path, data_dir, "disk", ONE, tamper=tamper)
    assert s["status"] == "completed"
    assert not [p for p in files if "secagg" in p.name], "secure-aggregation secrets were written to disk"
    states = [p for p in (tmp_path / "disk" / "ns").rglob("*.npz")]
    assert states and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in states)
    assert all(stat.S_IMODE(p.parent.stat().st_mode) == 0o700 for p in states)
    assert all("secagg" not in st for st in t.run_states.values())   # deleted after unmasking


# --------------------------------------------------------------- 6. metrics still per client
def test_only_aggregate_metrics_leave_a_node(tmp_path, data_dir):
    spy = Spy()
    s, ck, rounds, _ = _run(tmp_path, data_dir, "metrics", ONE, tamper=spy)
    assert s["status"] == "completed" and len(spy.seen) == 4
    for _, rd in spy.seen:
        assert set(rd) <= {"secagg", "secagg-info", "results"}, set(rd)
        assert json.loads(rd.get("results", {}).get("metrics", "{}")) == {}
        assert set(rd["secagg-info"]) == {"failed", "compute-s"}
    train = rounds[0]["train"]
    assert train["clients"] == 100 and 0 < train["train-loss"] < 10   # the global mean, from the masked sum


def test_the_clip_error_carries_no_value(tmp_path, data_dir):
    small = "num-rounds=1 local-epochs=1 finetune-steps=5 clients-per-round=10"
    s, _, rounds, _ = _run(tmp_path, data_dir, "clip", f"{small} secagg=secaggplus", preset="fedcia-mf-ml100k")
    reasons = [x["reason"] for p in rounds[0]["phases"] for x in p["excluded"]] if rounds else [s["error"]]
    said = [r for r in reasons if "secagg-clip" in r]
    assert said and all(not re.search(r"\d\.\d|reaches", r.split("secagg-clip")[0]) for r in said), said


# ---------------------------------------------------------------- 7. unbounded query replies
def test_an_oversized_secure_aggregation_reply_is_rejected_before_it_is_decoded(tmp_path, data_dir):
    hostile = []

    def tamper(node, mtype, rd):
        if mtype == "query.secagg" and "pk1" in rd.get("secagg", {}) and not hostile:
            hostile.append(node)
            rd["secagg"]["pk1"] = "A" * 5_000_000
        return rd
    s, _, rounds, _ = _run(tmp_path, data_dir, "huge", ONE, tamper=tamper)
    assert s["status"] == "completed"
    assert any("rejected" in x["reason"] for x in _phase(rounds, "secagg-setup")["excluded"])


# ---------------------------------------------------- the roster's key is proved, not said
def test_a_node_must_prove_the_key_it_reports(tmp_path, data_dir):
    from tests.secagg_helpers import node_keys
    keys, _ = node_keys(tmp_path / "keys", 2)

    def tamper(node, mtype, rd):   # node 2 claims node 1's key with its own signature
        if mtype == "query.handshake" and node == sorted(rd_nodes)[1]:
            rd["node"]["key"] = (keys[0].parent / "node0.pub").read_text().strip()
        return rd
    rd_nodes = [1000 + 7919 * (i + 1) for i in range(2)]
    t = Net(partitions(2, {"data-dir": data_dir}), tamper=tamper)
    for i, nc in enumerate(sorted(t.nodes)):
        t.nodes[nc]["auth-key-file"] = str(keys[i])
    s = run_federation(t, {"preset": "fedavg-mf-ml100k", "set": "num-rounds=1", "out-dir": str(tmp_path / "o"),
                           "data-dir": data_dir})
    nodes = s["nodes"] if "nodes" in s else json.loads((tmp_path / "o" / "summary.json").read_text()).get("nodes", {})
    good = nodes[str(sorted(rd_nodes)[0])]
    bad = nodes[str(sorted(rd_nodes)[1])]
    assert good["key"].startswith("SHA256:") and "key" not in bad and "key proof" in bad["failure"]


# ---------------------------------------------------------------- 11, 12. deployment
def test_the_tls_overlay_gives_no_container_a_private_key_it_does_not_own():
    """The overlay's mounts, with compose's ``${VAR:-default}`` resolved to the defaults: no
    container gets the certificate folder, the CA key or another's key; the SuperNodes and the
    submitter get ``ca.crt`` alone (their own key they make themselves)."""
    doc = yaml.safe_load((ROOT / "docker" / "compose.tls.yaml").read_text())
    for name, svc in doc["services"].items():
        files = []
        for vol in svc.get("volumes", []):
            src, dst = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(vol)).split(":")[:2]
            assert Path(src).name != "certs" and Path(dst).name != "certs", (name, vol)   # no folder of keys
            if "/" in src:
                files.append(Path(src).name)
        assert "ca.key" not in files and not any(f.startswith("node") for f in files), (name, files)
        assert files == ["ca.crt"] if name != "superlink" else sorted(files) == ["ca.crt", "server.key",
                                                                                  "server.pem"], (name, files)


def test_an_insecure_non_loopback_bind_is_refused(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / "started"
    (fake / "flower-superlink").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (fake / "flower-superlink").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "COROLLA_BIND": "0.0.0.0",
           "COROLLA_UID": str(os.getuid() or 65534), "HOME": str(tmp_path)}
    env.pop("COROLLA_CERTS", None)
    r = subprocess.run(["bash", str(ROOT / "docker" / "entrypoint.sh"), "superlink"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and not marker.exists()
    assert "without TLS" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    env["COROLLA_BIND"] = "127.0.0.1"
    assert "without TLS" not in subprocess.run(["bash", str(ROOT / "docker" / "entrypoint.sh"), "superlink"], env=env,
                                               capture_output=True, text=True, timeout=60).stderr
