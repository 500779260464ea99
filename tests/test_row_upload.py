"""``item-upload = rows``: one-user clients that start from the global item table send only the
rows they trained (``client_app.oneuser``, ``strategies.fedavg``); the aggregate and every metric
equal the full-table protocol's, for a fraction of the bytes and no table per client in state."""

import json

import numpy as np
import pytest

from corolla.config import ConfigError, resolve
from corolla.protocol import ArraySpec, PayloadError, validate_payload
from server_app.app import run_federation
from strategies.aggregation import weighted_mean, weighted_mean_rows
from tests.inproc import InProcessTransport, partitions

SMALL = "num-rounds=2 min-user-interactions=300 local-epochs=2"   # 54 heavy users, 1597 items


def test_rows_mean_equals_dense_mean():
    g = np.random.default_rng(0)
    base = g.normal(size=(50, 4)).astype(np.float32)
    tables, parts = [], []
    for _ in range(7):
        rows = np.sort(g.choice(50, size=int(g.integers(0, 20)), replace=False)).astype(np.int32)
        t = base.copy()
        t[rows] = g.normal(size=(len(rows), 4)).astype(np.float32)
        tables.append({"t": t})
        parts.append((rows, t[rows]))
    w = [float(x) for x in g.integers(1, 30, size=7)]
    dense = weighted_mean(tables, w)["t"]
    sparse = weighted_mean_rows(base, parts, w)
    assert np.abs(dense - sparse).max() <= 1e-6
    assert (dense == sparse).mean() > 0.9          # float64 sums: float32 results mostly bit-equal
    untouched = np.setdiff1d(np.arange(50), np.concatenate([p[0] for p in parts]))
    assert (sparse[untouched] == base[untouched]).all()
    # a wrong row id changes the mean (the test can fail)
    bad = [(np.minimum(parts[0][0] + 1, 49), parts[0][1])] + parts[1:]
    if len(parts[0][0]):
        assert np.abs(weighted_mean_rows(base, bad, w) - dense).max() > 1e-3


def test_bounded_variable_shape():
    spec = {"r": ArraySpec((-1,), "int32", max_shape=(10,)), "v": ArraySpec((-1, 3), max_shape=(10, 3))}
    validate_payload({"r": np.zeros(4, np.int32), "v": np.zeros((4, 3), np.float32)}, spec)
    with pytest.raises(PayloadError, match="at most"):
        validate_payload({"r": np.zeros(11, np.int32), "v": np.zeros((4, 3), np.float32)}, spec)
    with pytest.raises(PayloadError, match="'v'"):
        validate_payload({"r": np.zeros(4, np.int32), "v": np.zeros((4, 2), np.float32)}, spec)


def test_max_users_keeps_the_first_users_and_their_items(data_dir):
    from corolla.data.federation import build_federation

    full = build_federation(resolve("pfedrec-ml100k"), data_dir)
    part = build_federation(resolve("pfedrec-ml100k", {"max-users": 100}), data_dir)
    assert part.n_users == 100 and full.n_users == 943 and part.n_items < full.n_items
    assert part.count("train", np.arange(100)) == full.count("train", np.arange(100))
    with pytest.raises(ConfigError, match="max-users"):
        resolve("lpsfed-gowalla", {"max-users": 10})


def test_rows_only_for_clients_that_start_from_the_global_table():
    with pytest.raises(ConfigError, match="item-upload.*method 'fedca'"):
        resolve("fedca-pmf-ml100k", {"item-upload": "rows"})
    with pytest.raises(ConfigError, match="item-upload"):
        resolve("fedca-pmf-ml100k", {"item-upload": "half"})
    for preset in ("pfedrec-ml100k", "fedavg-pmf-ml100k", "fcf-pmf-ml100k"):
        assert resolve(preset, {"item-upload": "rows"})["item-upload"] == "rows"


def _run(tmp_path, name, data_dir, preset, extra):
    t = InProcessTransport(partitions(2, {"data-dir": data_dir, "state-dir": str(tmp_path / name / "state")}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    rounds = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    return s, rounds


@pytest.mark.parametrize("preset", ["fedavg-pmf-ml100k", "pfedrec-ml100k"])
def test_rows_upload_gives_the_full_protocols_run(tmp_path, data_dir, preset):
    a, ra = _run(tmp_path, "full", data_dir, preset, "")
    b, rb = _run(tmp_path, "rows", data_dir, preset, "item-upload=rows")
    assert a["status"] == b["status"] == "completed"
    assert a["metrics"] == b["metrics"] and a["valid_metrics"] == b["valid_metrics"]
    for x, y in zip(ra, rb):
        assert x["metrics"] == y["metrics"]
    up_full, up_rows = ra[0]["phases"][0]["bytes_up"], rb[0]["phases"][0]["bytes_up"]
    assert up_rows < up_full   # heavy users here touch most rows; on Gowalla ~1 % of them
    # the clients' saved state holds no item table
    states = list((tmp_path / "rows" / "state").rglob("c*.r*.npz"))
    assert states and all("item.weight" not in np.load(p).files for p in states)
    assert all("item.weight" in np.load(p).files for p in (tmp_path / "full" / "state").rglob("c*.r*.npz"))


def test_ragged_packing_round_trip_and_malformed_lengths():
    from corolla.protocol import pack, unpack

    g = np.random.default_rng(1)
    pc = {c: {"r": np.arange(c % 5, dtype=np.int32), "v": g.normal(size=(c % 5, 3)).astype(np.float32),
              "b": np.ones(1, np.float32)} for c in range(30)}
    packed = pack(pc)
    assert len(packed) == 6   # one group: ids, two concatenated arrays with their lengths, the stacked bias
    back = unpack(packed)
    assert sorted(back) == list(range(30))
    assert all(np.array_equal(back[c][k], pc[c][k]) for c in pc for k in pc[c])
    bad = dict(packed)
    bad["g0/r#len"] = bad["g0/r#len"] + 1
    with pytest.raises(PayloadError, match="does not split"):
        unpack(bad)


def test_a_large_array_is_packed_one_client_per_stack_without_a_copy():
    """Arrays above the stack bound (GF-CF's 11.3 MB filters) go one client per group as a view
    with the stack axis: packing 50 of them copies nothing (it copied 566 MB per node before)."""
    from corolla.protocol import PACK_MAX_BYTES, pack, unpack

    n = PACK_MAX_BYTES // 4 + 1   # float32 entries: just over the bound
    pc = {c: {"filter": np.full(n, c, np.float32)} for c in range(3)}
    packed = pack(pc)
    assert sorted(k for k in packed if k.endswith("/filter")) == ["g0/filter", "g1/filter", "g2/filter"]
    for g, c in enumerate(range(3)):
        a = packed[f"g{g}/filter"]
        assert a.shape == (1, n) and np.shares_memory(a, pc[c]["filter"])
    back = unpack(packed)
    assert all(np.array_equal(back[c]["filter"], pc[c]["filter"]) for c in pc)


def test_the_num_examples_bound_is_computed_once_per_phase_not_per_client(tmp_path, data_dir, monkeypatch):
    from server_app.exchange import Exchanger

    calls = []
    real = Exchanger._compute_bound
    monkeypatch.setattr(Exchanger, "_compute_bound", lambda self: calls.append(1) or real(self))
    s, rounds = _run(tmp_path, "bound", data_dir, "fedavg-pmf-ml100k", "item-upload=rows")
    clients = sum(r["train"]["clients"] for r in rounds)
    assert s["status"] == "completed" and clients >= 100 and 1 <= len(calls) <= len(rounds)
