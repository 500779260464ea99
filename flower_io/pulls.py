"""The first wait of Flower's object pulls, made settable.

Flower (1.39 and 1.42 alike) moves every message body as objects: the receiver gets the message
first, then pulls its objects (5 MB array chunks) one request each (``pull_objects`` in
``flwr/supercore/inflatable/inflatable_utils.py``). The sender pushes those objects *after* the
message is visible, so a receiver that is quick often finds a chunk not yet there; it then waits
``PULL_INITIAL_BACKOFF`` = **1 s** (±20 % jitter) before asking again, doubling up to 10 s.
On loopback that first wait, not the transfer, sets the pace: in 8 rounds of the README's main
job through a local SuperLink it happened 57 times, in all three receivers (the SuperNode pulling
the server's message, the ClientApp pulling it from its SuperNode, the ServerApp pulling the
replies; ``docs/results.md``, "Below Flower's floor").

:func:`set_pull_backoff` checks the setting and has :func:`flower_io.compat.set_pull_backoff`
change only the keyword defaults of Flower's pull functions, so the first retry comes after
``initial`` seconds and the doubling stops at ``cap``; nothing else of Flower's changes. On a
Flower release the compat layer has not read it leaves Flower as it is (one warning per process).
"""
from __future__ import annotations

import os

from flower_io import compat

DEFAULT_PULL_BACKOFF = 0.02          # first retry; then 0.04, 0.08, ... up to the cap
DEFAULT_PULL_CAP = 1.0
ENV = "COROLLA_PULL_BACKOFF"         # how a SuperNode hands its setting to the ClientApps it starts


def check_seconds(name: str, value: float) -> float:
    """``value`` as seconds in [0.001, 60], else a ValueError that names ``name``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} expects seconds (a number), got {value!r}") from None
    if not 0.001 <= v <= 60:
        raise ValueError(f"{name} expects seconds between 0.001 and 60, got {v}")
    return v


def env_backoff() -> float:
    """``$COROLLA_PULL_BACKOFF`` in seconds, :data:`DEFAULT_PULL_BACKOFF` when unset."""
    value = os.environ.get(ENV, "").strip()
    return check_seconds(ENV, value) if value else DEFAULT_PULL_BACKOFF


def set_pull_backoff(initial: float = DEFAULT_PULL_BACKOFF, cap: float = DEFAULT_PULL_CAP) -> bool:
    """Make Flower's object pulls retry after ``initial`` s, doubling up to ``cap`` s, in this
    process. Returns False (with the compat layer's one warning) and changes nothing on a Flower
    release it has not read."""
    initial = check_seconds("the pull backoff", initial)
    cap = max(initial, check_seconds("the pull backoff cap", cap))
    return compat.set_pull_backoff(initial, cap)


def pull_backoff() -> float:
    """The first retry of this process's object pulls (Flower's 1 s when unchanged)."""
    return compat.pull_backoff()
