"""The client state read cache (``corolla/state_cache.py``): what it returns is what the disk holds."""

import numpy as np
import pytest

import corolla.state as state_mod
from corolla.state import StateStore, truncate
from corolla.state_cache import CACHE, StateCache, budget_bytes
from corolla.util import atomic_save_npz


@pytest.fixture
def disk_reads(monkeypatch):
    """Count the state files read from disk; the process cache starts empty with room."""
    monkeypatch.delenv("COROLLA_STATE_CACHE_MB", raising=False)
    CACHE.clear()
    reads = []
    real = state_mod.load_npz
    monkeypatch.setattr(state_mod, "load_npz", lambda p: reads.append(p) or real(p))
    yield reads
    CACHE.clear()


def test_a_saved_state_is_read_back_from_memory_as_the_disk_has_it(tmp_path, disk_reads):
    st = StateStore(tmp_path, "run")
    f = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    st.save(0, 1, {"w": f, "step": np.float32(3.0), "ids": [1, 2]})
    rnd, got = st.load(0, 1)
    assert rnd == 1 and disk_reads == []
    disk = np.load(tmp_path / "run" / "c0.r1.npz")
    for k in ("w", "step", "ids"):   # values, dtype, shape and memory order as np.load gives them
        a, b = got[k], disk[k]
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        assert a.flags.f_contiguous == b.flags.f_contiguous and a.flags.c_contiguous == b.flags.c_contiguous
    got["w"][0, 0] = 99.0   # a client changing its loaded state in place changes no later load
    assert st.load(0, 1)[1]["w"][0, 0] == 0.0 and disk_reads == []


def test_a_file_rewritten_by_another_process_is_read_from_disk(tmp_path, disk_reads):
    a, b = StateStore(tmp_path, "run"), StateStore(tmp_path, "run")   # two nodes sharing a directory
    a.save(5, 2, {"x": np.array([1.0])})
    assert a.load(5, 2)[1]["x"].tolist() == [1.0] and disk_reads == []
    # another node retries the same round and rewrites the file (an atomic rename: a new inode)
    atomic_save_npz(tmp_path / "run" / "c5.r2.npz", {"x": np.array([2.0])}, private=True, durable=False)
    assert a.load(5, 2)[1]["x"].tolist() == [2.0] and len(disk_reads) == 1
    b.refresh()
    assert b.load(5, 2)[1]["x"].tolist() == [2.0] and len(disk_reads) == 1   # read once, then held


def test_deleted_versions_leave_the_cache(tmp_path, disk_reads):
    st = StateStore(tmp_path, "run")
    for r in (1, 2, 3, 4):
        st.save(0, r, {"x": np.full(256, float(r))})
    assert CACHE.used == 256 * 8   # rounds 2, 3, 4 on disk; memory holds the newest only
    assert st.load(0, 3)[1]["x"][0] == 3.0 and len(disk_reads) == 1   # an older one is read from disk
    truncate(st, [0], 3)
    assert st.load(0, 9)[1]["x"][0] == 3.0 and len(disk_reads) == 1   # round 4 dropped with its file
    assert CACHE.used == 256 * 8


def test_a_run_starting_drops_other_runs_states(tmp_path, disk_reads):
    old, new = StateStore(tmp_path, "run-a"), StateStore(tmp_path / "node1", "run-b")
    old.save(0, 1, {"x": np.zeros(128)})
    new.save(0, 1, {"x": np.ones(128)})
    assert CACHE.used == 2 * 128 * 8
    truncate(new, [0], 0)   # run-b's handshake on a node (here: it resumes from round 0)
    assert CACHE.used == 0 and old.load(0, 1)[1]["x"][0] == 0.0 and len(disk_reads) == 1


def test_budget_admits_while_there_is_room_and_zero_turns_it_off(tmp_path, disk_reads, monkeypatch):
    st = StateStore(tmp_path, "run")
    monkeypatch.setenv("COROLLA_STATE_CACHE_MB", str(1.5 * 8192 / (1 << 20)))   # room for one 8 KiB state
    for c in range(3):
        st.save(c, 1, {"x": np.full(1024, float(c))})
    for _ in range(2):   # a cyclic scan: the first client hits every time, nothing is evicted
        assert [st.load(c, 1)[1]["x"][0] for c in range(3)] == [0.0, 1.0, 2.0]
    assert [p.name for p in disk_reads] == ["c1.r1.npz", "c2.r1.npz"] * 2
    monkeypatch.setenv("COROLLA_STATE_CACHE_MB", "0")
    CACHE.clear()
    disk_reads.clear()
    st.save(7, 1, {"x": np.zeros(3)})
    st.load(7, 1)
    st.load(7, 1)
    assert len(disk_reads) == 2 and CACHE.used == 0


def test_objects_are_not_held(tmp_path):
    c = StateCache(budget=1 << 20)
    p = tmp_path / "s.npz"
    p.write_bytes(b"x")
    c.put(p, {"o": np.array([{"a": 1}], dtype=object)})
    assert c.used == 0 and c.get(p) is None


@pytest.mark.parametrize("bad", ["-1", "lots", "nan"])
def test_a_bad_budget_names_the_variable(monkeypatch, bad):
    monkeypatch.setenv("COROLLA_STATE_CACHE_MB", bad)
    with pytest.raises(ValueError, match="COROLLA_STATE_CACHE_MB: expected a number of megabytes >= 0"):
        budget_bytes()
    monkeypatch.setenv("COROLLA_STATE_CACHE_MB", " ")
    assert budget_bytes() == 1024 << 20
