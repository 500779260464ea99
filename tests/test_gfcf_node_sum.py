"""FedCIA GF-CF with ``gfcf-upload = node-sum``: a node uploads the float64 sum of its clients'
filters once; F_agg is the same mean (up to float64 summation order) for a node's share of the
bytes; a malformed sum or a client that names no sum is excluded (strategies/fedcia.py)."""
import numpy as np
import pytest

from corolla.protocol import PayloadError, validate_payload
from strategies.aggregation import RunningMean
from strategies.base import ClientResult
from strategies.fedcia import FedCIAGFCF


def test_running_mean_of_sums_equals_mean_of_parts():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((5, 5)).astype(np.float32) for _ in range(7)]
    a, b = RunningMean(), RunningMean()
    for x in parts:
        a.add(x)
    b.add_sum(np.sum([p.astype(np.float64) for p in parts[:4]], axis=0), 4)
    b.add(parts[4])
    b.add_sum(parts[5].astype(np.float64) + parts[6], 2)
    ma, na = a.pop()
    mb, nb = b.pop()
    assert na == nb == 7 and np.allclose(ma, mb, rtol=0, atol=1e-6)


class _Roster:
    n_items = 3
    clients = {0: {"node": 10}, 1: {"node": 10}, 2: {"node": 11}}
    data_stats: dict = {}

    def available(self):
        return [0, 1, 2]


def _strategy():
    from corolla.config import resolve
    s = FedCIAGFCF(resolve("fedcia-gfcf-ml100k", {"gfcf-upload": "node-sum"}))
    s.roster = _Roster()
    return s


def test_node_sum_is_accepted_and_checked():
    s = _strategy()
    exp = s.expected_payload("upload", 0)
    validate_payload({"filter-sum": np.ones((3, 3))}, exp)                       # a node sum
    validate_payload({"filter": np.ones((3, 3), np.float32)}, exp)               # a lone client's filter
    validate_payload({}, exp)                                                    # summed into another
    with pytest.raises(PayloadError, match="dtype"):
        validate_payload({"filter-sum": np.ones((3, 3), np.float32)}, exp)
    s.accept("upload", 1, 0, ClientResult({"filter-sum": np.full((3, 3), 3.0)}, {"summed-clients": 2}))
    s.accept("upload", 1, 1, ClientResult({}, {"summed-into": 0}))
    s.accept("upload", 1, 2, ClientResult({"filter": np.zeros((3, 3), np.float32)}, {}))
    with pytest.raises(PayloadError, match="summed-clients"):      # more clients than its node hosts
        s.accept("upload", 1, 0, ClientResult({"filter-sum": np.ones((3, 3))}, {"summed-clients": 3}))
    with pytest.raises(PayloadError, match="alone"):
        s.accept("upload", 1, 0, ClientResult({"filter-sum": np.ones((3, 3)), "filter": np.ones((3, 3), np.float32)},
                                              {"summed-clients": 1}))
    with pytest.raises(PayloadError, match="names no client of its node"):   # client 2 is on another node
        s.accept("upload", 1, 2, ClientResult({}, {"summed-into": 0}))
    s.aggregate_phase("upload", 1, {})
    assert np.allclose(s.f_agg, np.full((3, 3), 1.0))   # (3 + 3 + 0 + ... ) -> (2*1.5 + 0)/3 per entry = 1


def test_node_sum_run_equals_per_client_run_with_a_node_share_of_the_bytes(tmp_path, data_dir):
    from server_app.app import run_federation
    from tests.inproc import InProcessTransport, partitions

    def run(extra, name):
        return run_federation(InProcessTransport(partitions(2, {"data-dir": data_dir})),
                              {"preset": "fedcia-gfcf-ml100k", "set": f"num-rounds=1 {extra}",
                               "out-dir": str(tmp_path / name), "data-dir": data_dir})
    plain, summed = run("", "plain"), run("gfcf-upload=node-sum", "sum")
    m = 1682 * 1682
    assert plain["bytes_up"] > 100 * m * 4 > 2 * m * 8 >= summed["bytes_up"] - 1_000_000
    for k, v in plain["metrics"].items():
        assert summed["metrics"][k] == pytest.approx(v, rel=1e-6, abs=1e-9), k


def test_a_node_claiming_more_clients_than_it_hosts_is_excluded_by_the_exchanger(tmp_path, data_dir):
    """Through the server's exchanger: a node whose sum claims 999 clients loses its sum (the
    exclusion names the carrier and the reason in rounds.jsonl); the other node's sum is used."""
    import json

    from flwr.app import ConfigRecord

    from server_app.app import run_federation
    from tests.inproc import InProcessTransport, partitions
    lied = []

    def tamper(node, message_type, rep):
        for name, rec in rep.items():
            if isinstance(rec, ConfigRecord):
                for k in [k for k in rec.keys() if k.endswith("metrics")]:
                    mets = json.loads(rec[k])
                    for m in mets.values():
                        if "summed-clients" in m and not lied:
                            m["summed-clients"] = 999
                            lied.append(node)
                    rec[k] = json.dumps(mets)
        return rep

    out = tmp_path / "run"
    s = run_federation(InProcessTransport(partitions(2, {"data-dir": data_dir}), tamper),
                       {"preset": "fedcia-gfcf-ml100k", "set": "num-rounds=1 gfcf-upload=node-sum",
                        "out-dir": str(out), "data-dir": data_dir})
    ex = json.loads((out / "rounds.jsonl").read_text().splitlines()[0])["phases"][0]["excluded"]
    assert lied and len(ex) == 1 and "summed-clients" in ex[0]["reason"], ex
    assert s["status"] == "completed"
