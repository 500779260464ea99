"""Loopback ports for the processes ``corolla run`` starts, and how to tell that one was taken.

The launcher picks a port, then hands it to a child (the SuperLink, a SuperNode's runtime API)
that binds it seconds later, once it has imported Flower. A port found free by binding port 0
comes from the kernel's *ephemeral* range (``/proc/sys/net/ipv4/ip_local_port_range``,
32768–60999 by default) — the range every outgoing connection on the machine takes its local port
from. In that window another socket can take the port, and the child exits with "address
already in use" (seen in CI on 2026-12-07: a SuperNode's runtime API port, 127.0.0.1:44097, in the
ephemeral range, was in use when the node bound it; the run went on with one node of two).

So :func:`free_port` picks below the ephemeral range, where the kernel never assigns a port by
itself (only a program that names the port can take it), and falls back to port 0 where the
range leaves no room below it or cannot be read (not Linux). What another program still takes in
between is caught by :func:`port_taken` in the child's log; ``launcher.cli.Cluster`` starts that
child again on another port.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20000     # below this: well-known services' ports (and the Flower defaults 8000, 9091–9094)
MIN_SPAN = 1000    # fewer free ports than this below the ephemeral range: use port 0 instead
TRIES = 50
#: a bind that failed, as the children log it: EADDRINUSE's text, which uvicorn (the SuperNode's
#: runtime API on both lines, the SuperLink's HTTP APIs on 1.42) and gRPC's C core (the 1.39
#: SuperLink's Fleet API) log, and the error Python's gRPC raises then (the SuperNode's case
#: checked on both lines, gRPC's in the 1.39 venv)
TAKEN = (b"address already in use", b"failed to bind to address")


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (first, last), or None where it cannot be read."""
    try:
        first, last = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return None
    return first, last


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", path: Path = EPHEMERAL_RANGE_FILE, rng: random.Random | None = None) -> int:
    """A TCP port on ``host`` that nothing has bound, below the kernel's ephemeral range when
    there is room (:data:`MIN_SPAN` ports from :data:`LOWEST` up), else one the kernel picks."""
    span = ephemeral_range(path)
    if span and span[0] - LOWEST >= MIN_SPAN:
        rng = rng or random.SystemRandom()
        for _ in range(TRIES):
            port = rng.randrange(LOWEST, span[0])
            if _bindable(port, host):
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port."""
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def port_taken(log: Path, since: int = 0) -> bool:
    """Whether the part of ``log`` after byte ``since`` says a bind failed because the address
    was in use (the child's whole output goes to that log)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(since)
            text = fh.read().lower()
    except OSError:
        return False
    return any(t in text for t in TAKEN)
