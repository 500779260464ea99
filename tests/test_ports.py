"""launcher/ports.py and the launcher's restart of a process whose port another program took
first (seen in CI: a SuperNode's runtime API port taken by an outgoing connection, the run went
on with one node of two)."""
from __future__ import annotations

import json
import random
import socket
import sys
import time
from pathlib import Path

import pytest

from launcher import ports

ROOT = Path(__file__).resolve().parents[1]


def _range_file(tmp_path, text: str) -> Path:
    f = tmp_path / "ip_local_port_range"
    f.write_text(text)
    return f


def test_free_port_is_below_the_ephemeral_range_and_bindable(tmp_path):
    rng_file = _range_file(tmp_path, "32768\t60999\n")
    got = {ports.free_port(path=rng_file) for _ in range(20)}
    assert all(ports.LOWEST <= p < 32768 for p in got)
    assert len(got) > 1   # picked at random: two runs starting at once do not pick the same ports
    for p in got:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_free_port_skips_a_port_that_is_bound(tmp_path):
    rng_file = _range_file(tmp_path, "32768 60999")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        free = ports.free_port(path=rng_file)   # one that binds now, below the range
        seq = iter([taken, free])

        class Pick(random.Random):
            def randrange(self, a, b):
                return next(seq)
        # the held port is outside [LOWEST, 32768) here; free_port only asks whether it binds
        assert ports.free_port(path=rng_file, rng=Pick()) == free


@pytest.mark.parametrize("text", ["1024 65535", "not numbers", None])
def test_free_port_falls_back_to_the_kernels_pick(tmp_path, text):
    """No room below the ephemeral range, or no range to read (not Linux): the kernel picks."""
    rng_file = _range_file(tmp_path, text) if text else tmp_path / "absent"

    class Never(random.Random):
        def randrange(self, a, b):
            raise AssertionError("free_port drew below a range that leaves no room")
    p = ports.free_port(path=rng_file, rng=Never())
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))


def test_port_taken_reads_only_what_the_last_start_wrote(tmp_path):
    log = tmp_path / "supernode0.log"
    log.write_bytes(b"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 44097): "
                    b"address already in use\n")
    mark = log.stat().st_size
    assert ports.port_taken(log) and not ports.port_taken(log, mark)
    with open(log, "ab") as fh:
        fh.write(b"RuntimeError: Failed to bind to address 127.0.0.1:25001; set GRPC_VERBOSITY=debug\n")
    assert ports.port_taken(log, mark)
    assert not ports.port_taken(tmp_path / "absent.log")
    log.write_bytes(b"ConnectionRefusedError: [Errno 111] Connection refused\n")
    assert not ports.port_taken(log)


def test_a_supernode_whose_port_was_taken_starts_again_on_another_port(tmp_path, monkeypatch):
    """A real SuperNode is handed a port that another socket holds (bound, not listening: what an
    outgoing connection looks like). It ends; the launcher's check starts it again on another
    port, once, says so, and names the new process in logs/pids.json. A node that ends for
    another reason is not started again."""
    from launcher import cli

    c = cli.Cluster(tmp_path, "local", 0, None)
    held = socket.socket()
    try:
        c.start()
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        picks = iter([taken])
        real = cli.free_port
        monkeypatch.setattr(cli, "free_port", lambda: next(picks, None) or real())
        first = c.start_node(0)
        end = time.monotonic() + 120
        again = []
        while time.monotonic() < end and not again:
            again = c.check_starts()
            time.sleep(0.2)
        assert again == [0], (tmp_path / "logs" / "supernode0.log").read_text()
        assert first.poll() not in (None, 0)
        log = (tmp_path / "logs" / "supernode0.log").read_text().lower()
        assert "address already in use" in log or "failed to bind" in log
        second = c.node_procs[0]
        port = c.starting[0][0]
        assert second is not first and port != taken
        while time.monotonic() < end and 0 in c.starting:
            assert c.check_starts() == []
            time.sleep(0.2)
        assert ports.listening(port) and second.poll() is None
        assert json.loads((tmp_path / "logs" / "pids.json").read_text())["supernodes"] == [second.pid]
        assert c.start_tries[0] == 2
        # a node that ends for another reason (here: exit code 3 before it listens) is left alone
        c.node_procs[1] = c._spawn("supernode1", [sys.executable, "-c", "raise SystemExit(3)"], node=True)
        c.starting[1], c.start_tries[1] = (real(), 0), 1
        c.node_procs[1].wait()
        assert c.check_starts() == [] and 1 not in c.starting
    finally:
        held.close()
        c.stop()
