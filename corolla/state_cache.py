"""A process-wide read cache of logical clients' state files (``corolla/state.py``).

The files stay the truth: every client state is still written to disk (atomically) and made durable
before the node replies; this cache only saves reading a file back that this process has just
written or read. A cached copy is returned only while the file on disk is the one it was taken from:
the same inode, size and modification and change times (``os.stat``, one system call). A state is
saved by an atomic rename, so a file another process wrote since (a node sharing the state
directory, a resumed run) has another inode, and the cache reads the disk instead. Each hit returns
fresh copies of the arrays, so a client that changes its loaded state in place cannot change what a
later load returns.

Why: a round of 943 one-user clients loads every client's state twice (its evaluation and its
training, in the same message) and saves it once; reading the ``.npz`` back (27 arrays of one NCF
client, 6 ms) was a third of such a round in process (``docs/results.md``, "Client state read
back from memory"). Where each message starts a new ClientApp process (a deployed SuperNode) the
cache is empty at every message and the disk is read as before.

Budget: ``COROLLA_STATE_CACHE_MB`` (default 1024; 0 turns the cache off), for the whole process
(in process, every node of a run shares it). When it is full, new files are not admitted (nothing
is evicted): a round reads its clients in the same order every time, so keeping the first ones that
fit hits on them every round, where evicting the oldest would hit on none. A client's older versions
leave when it saves a newer one, and another run's states when a run starts or resumes on a node
(:meth:`StateCache.retain_run`, from the node's handshake).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

DEFAULT_MB = 1024


def budget_bytes() -> int:
    """``COROLLA_STATE_CACHE_MB`` in bytes (default :data:`DEFAULT_MB`); a bad value is an error
    naming the variable."""
    raw = os.environ.get("COROLLA_STATE_CACHE_MB", "").strip()
    if not raw:
        return DEFAULT_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise ValueError(f"COROLLA_STATE_CACHE_MB: expected a number of megabytes >= 0 (0 turns the client "
                         f"state cache off), got {raw!r}")
    return int(mb * (1 << 20))


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _as_saved(v) -> np.ndarray | None:
    """The array ``np.savez`` stores for ``v`` and ``np.load`` gives back (its memory order
    included), as a private copy; None for what the cache does not hold (objects, subclasses)."""
    a = np.asanyarray(v)
    if type(a) is not np.ndarray or a.dtype.hasobject:
        return None
    return np.array(a, order="F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C", copy=True)


class StateCache:
    """Arrays of state files by path, each with the stamp of the file it came from."""

    def __init__(self, budget: int | None = None):
        self._budget = budget
        self._entries: dict[Path, tuple[tuple[int, int, int, int], dict[str, np.ndarray], int]] = {}
        self._used = 0
        self._lock = threading.Lock()   # nodes of an in-process run may reply from threads
        self.hits = 0
        self.misses = 0

    @property
    def budget(self) -> int:
        return budget_bytes() if self._budget is None else self._budget

    def get(self, path: Path) -> dict[str, np.ndarray] | None:
        """Copies of the arrays of ``path`` if the cache holds the file now on disk, else None."""
        with self._lock:
            e = self._entries.get(path)
        if e is None or _stamp(path) != e[0]:
            if e is not None:
                self.drop(path)
            self.misses += 1
            return None
        self.hits += 1
        return {k: v.copy(order="K") for k, v in e[1].items()}

    def put(self, path: Path, arrays: dict[str, np.ndarray]) -> None:
        """Hold ``arrays`` as the contents of ``path`` (just written or read) if they fit."""
        self.drop(path)
        budget = self.budget
        if budget <= 0:
            return
        held = {}
        for k, v in arrays.items():
            a = _as_saved(v)
            if a is None:
                return
            held[k] = a
        size = sum(a.nbytes for a in held.values())
        stamp = _stamp(path)
        if stamp is None:
            return
        with self._lock:
            if self._used + size > budget:
                return
            self._entries[path] = (stamp, held, size)
            self._used += size

    def drop(self, path: Path) -> None:
        with self._lock:
            e = self._entries.pop(path, None)
            if e is not None:
                self._used -= e[2]

    def retain_run(self, run_key: str) -> None:
        """Drop every entry of another run (a state file's folder is its run's key): called when a
        run starts or resumes on a node, so that a process that ran an earlier run (a test session,
        a notebook) does not keep that run's states in its budget."""
        with self._lock:
            for path in [p for p in self._entries if p.parent.name != run_key]:
                self._used -= self._entries.pop(path)[2]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0

    @property
    def used(self) -> int:
        return self._used


CACHE = StateCache()
