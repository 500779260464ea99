"""The run loop against real ClientApp handlers without a network (fast, deterministic).

Invariance to how logical clients are spread over nodes, payload validation, node loss,
resume and byte accounting. The same properties over real SuperLink/SuperNode processes are in
``test_e2e.py``.
"""

import json

import numpy as np
import pytest

from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions

SMALL = ("num-rounds=3 split=loo partition=blocks num-clients=20 protocol=loo dim=8 "
         "loss=bpr train-samples=per-positive batch-size=1024 lr=0.05 compat-fedcia-metrics=false "
         "select-metric=ndcg@10 patience=0")


def run(tmp_path, name, data_dir, nodes=2, extra="", tamper=None, node_extra=None, **rc):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir, **(node_extra or {})}), tamper)
    return run_federation(t, {"preset": "fedavg-mf-ml100k", "set": f"{SMALL} {extra}",
                              "out-dir": str(tmp_path / name), "data-dir": data_dir, **rc}), t


def test_twenty_nodes_equal_two_nodes(tmp_path, data_dir):
    a, _ = run(tmp_path, "n20", data_dir, nodes=20)
    b, _ = run(tmp_path, "n2", data_dir, nodes=2)
    assert a["metrics"] == b["metrics"] and a["valid_metrics"] == b["valid_metrics"]
    assert a["metrics"]["ndcg@10"] > 0
    # at most 3 logical clients per message: 4 messages to each of the 2 nodes, same numbers
    c, _ = run(tmp_path, "cpm3", data_dir, nodes=2, extra="clients-per-message=3")
    assert c["metrics"] == b["metrics"]
    r = json.loads(open(tmp_path / "cpm3" / "rounds.jsonl").readline())
    assert r["phases"][0]["bytes_down"] == 8 * (1682 * 8 * 4 + 128) and r["phases"][0]["replies"] == 8


@pytest.mark.parametrize("fused", [True, False])
def test_bytes_equal_payload_sizes(tmp_path, data_dir, fused):
    s, _ = run(tmp_path, "bytes", data_dir, nodes=3, extra=f"fused-evaluation={str(fused).lower()}")
    item_table = 1682 * 8 * 4 + 128  # float32 .npy: data + 128-byte header
    rounds = [json.loads(x) for x in open(tmp_path / "bytes" / "rounds.jsonl")]
    for r in rounds:
        train = r["phases"][0]
        assert train["name"] == ("train" if r["round"] == 1 or not fused else "train+evaluate")
        assert train["bytes_up"] == 20 * item_table
        assert train["bytes_down"] == 3 * item_table  # the global table once per node (also for the evaluation)
        evs = r["phases"][1:]
        assert len(evs) == (1 if not fused or r["round"] == 3 else 0)
        for ev in evs:
            assert ev["name"] == "evaluate" and ev["bytes_up"] == 0 and ev["bytes_down"] == 3 * item_table
    assert s["bytes_up"] == 3 * 20 * item_table
    # separate evaluation: the table goes down twice a round; fused: once, plus the final evaluation
    assert s["bytes_down"] == 3 * item_table * (6 if not fused else 4)


@pytest.mark.parametrize("fault", ["fault-nan", "fault-shape"])
def test_bad_payload_excluded_and_logged(tmp_path, data_dir, fault, monkeypatch):
    import client_app.host
    from tests import faults

    monkeypatch.setattr(client_app.host.NodeHost, "_finish", client_app.host.NodeHost._finish)
    faults.install()   # test-only: the node config's fault keys corrupt those clients' uploads
    s, _ = run(tmp_path, fault, data_dir, nodes=2, node_extra={fault: "3"})
    rounds = [json.loads(x) for x in open(tmp_path / fault / "rounds.jsonl")]
    for r in rounds:
        ex = r["phases"][0]["excluded"]
        assert [e["client"] for e in ex] == [3] and "invalid payload" in ex[0]["reason"]
    assert s["status"] == "completed" and np.isfinite(s["metrics"]["ndcg@10"])


def test_dead_node_costs_only_its_contribution(tmp_path, data_dir):
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    orig = t.exchange

    def exchange(contents, mtype, timeout, *rest):
        if mtype == "train" and contents[0][1]["config"]["round"] == 2:  # round 2: the second node dies
            t.dead.add(sorted(t.nodes)[1])
        return orig(contents, mtype, timeout, *rest)

    t.exchange = exchange
    s = run_federation(t, {"preset": "fedavg-mf-ml100k", "set": SMALL, "out-dir": str(tmp_path / "dead"),
                           "data-dir": data_dir})
    rounds = [json.loads(x) for x in open(tmp_path / "dead" / "rounds.jsonl")]
    assert s["status"] == "completed" and s["rounds_completed"] == 3
    # round 2's message (which also carries round 1's evaluation) loses the node's 10 clients
    assert sorted({e["client"] for e in rounds[1]["phases"][0]["excluded"]}) == list(range(10, 20))
    assert rounds[0]["clients"] == 20 and rounds[2]["clients"] == 10
    assert rounds[2]["users"]["test"] == rounds[0]["users"]["test"] < 943


@pytest.mark.parametrize("fused", [True, False])
def test_resume_equals_uninterrupted(tmp_path, data_dir, fused):
    flag = f"fused-evaluation={str(fused).lower()}"
    full, _ = run(tmp_path, "full", data_dir, nodes=2, extra=f"num-rounds=4 {flag}")
    # a run that dies in round 3 or 4, after round 2's checkpoint and some round-3 client state
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    orig, n = t.exchange, {"calls": 0}
    # separate: handshake, 2 rounds x (train, evaluate), round-3 train; dies in round-3 evaluate.
    # fused: handshake, round 1 train, round 2 train+eval(1), round 3 train+eval(2); dies in
    # round 4's train+eval(3), which would have closed round 3. The nodes do the dying message's
    # work (save their state of that round) and the server is gone before the replies come back
    # (a SuperLink restart): the clients must still hold the state of the checkpointed round.
    dies = 5 if fused else 7

    def exchange(contents, mtype, timeout, *rest):
        n["calls"] += 1
        out = list(orig(contents, mtype, timeout, *rest))   # the nodes run the phase now
        if n["calls"] == dies:
            raise KeyboardInterrupt
        return out

    t.exchange = exchange
    with pytest.raises(KeyboardInterrupt):
        run_federation(t, {"preset": "fedavg-mf-ml100k", "set": f"{SMALL} num-rounds=4 {flag}",
                           "out-dir": str(tmp_path / "part"), "data-dir": data_dir})
    assert len(open(tmp_path / "part" / "rounds.jsonl").readlines()) == 2
    t2 = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    resumed = run_federation(t2, {"resume-dir": str(tmp_path / "part"), "data-dir": data_dir})
    assert resumed["rounds_completed"] == 4
    assert resumed["metrics"] == full["metrics"]
    assert resumed["last_round_metrics"] == full["last_round_metrics"]


def test_edge_node_with_its_own_file_joins_the_run(tmp_path, data_dir):
    rows = [line.split("\t") for line in open(f"{data_dir}/ml-100k/u.data") if line.startswith("1\t")]
    edge = tmp_path / "me.csv"
    edge.write_text("# item,rating,timestamp\n" + "".join(f"{r[1]},{r[2]},{r[3].strip()}\n" for r in rows))
    nodes = partitions(2, {"data-dir": data_dir}) + [{"data-file": str(edge), "client-id": 5000, "data-dir": data_dir}]
    t = InProcessTransport(nodes)
    run_federation(t, {"preset": "fedavg-mf-ml100k", "set": f"{SMALL} num-rounds=1 export-topk=5",
                           "out-dir": str(tmp_path / "edge"), "data-dir": data_dir})
    r = json.loads(open(tmp_path / "edge" / "rounds.jsonl").readline())
    assert r["clients"] == 21 and r["users"]["test"] == 944 and not r["phases"][0]["excluded"]
    top = [json.loads(x) for x in open(tmp_path / "edge" / "topk.jsonl")]
    assert len(top) == 944 and all(len(x["items"]) == 5 for x in top)
    mine = [x for x in top if x["client"] == 5000][0]
    seen = {int(r[1]) - 1 for r in rows}
    assert len(set(mine["items"]) & seen) <= 1  # train and valid items are masked; only the test item may appear


def test_edge_file_errors_name_file_and_line(tmp_path, data_dir):
    from corolla.config import resolve
    from corolla.data import edge_federation

    bad = tmp_path / "bad.csv"
    bad.write_text("1,5,100\n99999,4,101\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: item id '99999'"):
        edge_federation(bad, resolve(None, {}), data_dir)


def test_auto_nodes_get_blocks_from_the_server_and_results_do_not_depend_on_their_number(tmp_path, data_dir):
    """``clients = "auto"`` (compose's ``--scale supernode=N``): the server assigns contiguous
    blocks; 1 or 3 auto nodes give the numbers of the 2 fixed partitions."""
    fixed, _ = run(tmp_path, "fixed", data_dir, nodes=2)
    for n in (1, 3):
        t = InProcessTransport([{"clients": "auto", "data-dir": data_dir} for _ in range(n)])
        s = run_federation(t, {"preset": "fedavg-mf-ml100k", "set": SMALL, "out-dir": str(tmp_path / f"auto{n}"),
                               "data-dir": data_dir})
        assert s["metrics"] == fixed["metrics"] and s["valid_metrics"] == fixed["valid_metrics"]
        r = json.loads(open(tmp_path / f"auto{n}" / "rounds.jsonl").readline())
        assert r["clients"] == 20 and r["phases"][0]["replies"] == n


def test_auto_nodes_are_reassigned_when_one_joins_or_leaves(tmp_path, data_dir):
    """A node that joins between rounds takes a block; one that leaves gives its block to the
    others. With a shared state directory (compose's state volume) the clients' state moves with
    them: joining changes nothing in the results; leaving costs only that round's contribution."""
    fixed, _ = run(tmp_path, "fixed", data_dir, nodes=2, extra="num-rounds=4")
    state = str(tmp_path / "shared-state")
    auto = {"clients": "auto", "data-dir": data_dir, "state-dir": state}
    t = InProcessTransport([auto, auto])
    orig = t.exchange

    def exchange(contents, mtype, timeout, *rest):
        rnd = contents[0][1]["config"]["round"] if contents else 0
        if mtype == "train" and rnd == 2 and len(t.nodes) == 2:
            t.nodes[99_991] = dict(auto)   # a third node appears before round 2's message
        return orig(contents, mtype, timeout, *rest)

    t.exchange = exchange
    s = run_federation(t, {"preset": "fedavg-mf-ml100k", "set": f"{SMALL} num-rounds=4",
                           "out-dir": str(tmp_path / "join"), "data-dir": data_dir})
    rounds = [json.loads(x) for x in open(tmp_path / "join" / "rounds.jsonl")]
    assert [r["phases"][0]["replies"] for r in rounds] == [2, 2, 3, 3]   # joins at round 3's refresh
    assert s["metrics"] == fixed["metrics"] and s["last_round_metrics"] == fixed["last_round_metrics"]

    t = InProcessTransport([auto, auto, auto])
    orig2 = t.exchange

    def leave(contents, mtype, timeout, *rest):
        if mtype == "train" and contents and contents[0][1]["config"]["round"] == 2:
            t.dead.add(sorted(t.nodes)[2])   # the third node dies as round 2 is sent
        return orig2(contents, mtype, timeout, *rest)

    t.exchange = leave
    s = run_federation(t, {"preset": "fedavg-mf-ml100k", "set": f"{SMALL} num-rounds=4",
                           "out-dir": str(tmp_path / "leave"), "data-dir": data_dir})
    rounds = [json.loads(x) for x in open(tmp_path / "leave" / "rounds.jsonl")]
    assert s["status"] == "completed"
    assert rounds[1]["phases"][0]["excluded"] and rounds[2]["clients"] == rounds[3]["clients"] == 20
    assert [r["phases"][0]["replies"] for r in rounds] == [3, 2, 2, 2]
    assert not any(p.get("state_lost") for r in rounds for p in r["phases"])   # the shared state followed them


def test_a_moved_client_without_its_state_is_detected(tmp_path, data_dir):
    """Nodes that do not share a state directory: when a node leaves, its clients move to nodes
    that lack their state; the server sees it in their replies (``state-round``) and records
    ``state_lost`` for them in that round (the churn drill asserts there is none)."""
    nodes = [{"clients": "auto", "data-dir": data_dir, "state-dir": str(tmp_path / f"own-{i}")} for i in range(3)]
    t = InProcessTransport(nodes)
    orig = t.exchange

    def leave(contents, mtype, timeout, *rest):
        if mtype == "train" and contents and contents[0][1]["config"]["round"] == 2:
            t.dead.add(sorted(t.nodes)[2])
        return orig(contents, mtype, timeout, *rest)

    t.exchange = leave
    run_federation(t, {"preset": "fedavg-mf-ml100k", "set": "num-rounds=3 fraction-train=1.0 local-epochs=1",
                       "out-dir": str(tmp_path / "own"), "data-dir": data_dir})
    rounds = [json.loads(x) for x in open(tmp_path / "own" / "rounds.jsonl")]
    lost = [c for p in rounds[2]["phases"] for c in p.get("state_lost", [])]
    assert lost and not any(p.get("state_lost") for r in rounds[:2] for p in r["phases"])
