"""Per-logical-client state on a node: one ``.npz`` per client and round, written atomically and
made durable once per phase (:meth:`StateStore.sync`, before the node replies: one ``syncfs`` of
the state directory's filesystem instead of an fsync per client). A node killed before that flush
has not replied, so the server knows none of those versions, and a resumed run truncates them.

Layout: ``<state-dir>/<run-key>/c<cid>.r<round>.npz``. The state after round r is tagged r. A
resumed run restores, for every client, the newest version with round <= the resumed round.
A client keeps the two newest versions below the round it saves (older ones are deleted): with
fused evaluation the server's last checkpoint is the round *before* the one whose replies it has
(round r is checkpointed once its evaluation, carried by round r+1's message, is back), so a run
killed while round r+2 is in flight resumes from r, and every client must still have its state
of r. (Keeping one version lost it: a SuperLink restart under compose resumed with fresh client
state, docker/faults.sh drill B.)

Files are the node's user's only (0600 in a 0700 run folder): a client's model is its user's
data. State never lives in module globals: in deployment every message may start a new ClientApp
process, and the directory is what persists across them. The versions on disk are listed once
per phase (:meth:`StateStore.refresh`, one directory scan) and kept up to date by this store's
own saves: finding a client's versions by a listing per client costs O(clients²) per round
(about 165 s of a 15,000-client node's round at Gowalla's scale). A state this process has just
written or read is read back from memory while the file on disk is unchanged
(``corolla/state_cache.py``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from corolla.state_cache import CACHE
from corolla.util import atomic_save_npz, load_npz, sync_files

_PAT = re.compile(r"^c(-?\d+)\.r(\d+)\.npz$")
KEEP_BELOW = 2   # versions kept below the round being saved (see the module docstring)


class StateDirError(OSError):
    """The node's state directory cannot be written: one line naming it, the reason and the fix."""

    def __init__(self, path: Path, what: str, err: OSError):
        super().__init__(err.errno, f"node state directory {path}: {what} ({err.strerror or err}); free space "
                         "there or give the node a writable one (node config 'state-dir')")


class StateStore:
    def __init__(self, root: str | os.PathLike, run_key: str):
        if not run_key or "/" in run_key:
            raise ValueError(f"run-key: expected a non-empty name without '/', got {run_key!r}")
        self.dir = Path(root) / run_key
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self.dir.stat().st_uid == os.getuid() and self.dir.stat().st_mode & 0o077:
                self.dir.chmod(0o700)   # a client's model is its user's data: the node's own user only
        except OSError as e:
            raise StateDirError(self.dir, "cannot create it", e) from None

        self._index: dict[int, list[int]] | None = None
        self._pending: list[Path] = []   # saved since the last :meth:`sync`

    def refresh(self) -> None:
        """List the directory once: every client's versions on disk (call at the start of a
        phase; another node sharing the directory may have written since)."""
        index: dict[int, list[int]] = {}
        with os.scandir(self.dir) as it:
            for e in it:
                m = _PAT.match(e.name)
                if m:
                    index.setdefault(int(m.group(1)), []).append(int(m.group(2)))
        self._index = {c: sorted(v) for c, v in index.items()}

    def _versions(self, cid: int) -> list[int]:
        if self._index is None:
            self.refresh()
        assert self._index is not None
        return list(self._index.get(cid, []))

    def load(self, cid: int, max_round: int) -> tuple[int, dict[str, np.ndarray]] | None:
        """The newest state with round <= ``max_round`` as ``(round, arrays)``, or None."""
        vs = [v for v in self._versions(cid) if v <= max_round]
        if not vs:
            return None
        path = self.dir / f"c{cid}.r{vs[-1]}.npz"
        arrays = CACHE.get(path)
        if arrays is None:
            arrays = load_npz(path)
            CACHE.put(path, arrays)
        return vs[-1], arrays

    def save(self, cid: int, rnd: int, arrays: dict[str, np.ndarray]) -> None:
        """Write client ``cid``'s state after round ``rnd`` (atomic: a failed write leaves the
        previous versions as they were); a full disk or an unwritable directory raises
        :class:`StateDirError`, which fails this client's phase, not the node or the run."""
        path = self.dir / f"c{cid}.r{rnd}.npz"
        try:
            atomic_save_npz(path, arrays, private=True, durable=False)
        except OSError as e:
            raise StateDirError(self.dir, f"cannot write logical client {cid}'s state of round {rnd}", e) from None
        CACHE.put(path, arrays)
        vs = sorted(set(self._versions(cid)) | {rnd})
        below = [v for v in vs if v < rnd]
        keep_from = below[-KEEP_BELOW:][0] if below else rnd
        for v in vs:
            if v < keep_from or v > rnd:  # versions beyond rnd belong to an abandoned future
                (self.dir / f"c{cid}.r{v}.npz").unlink(missing_ok=True)
            if v != rnd:   # memory holds a client's newest state only (older ones are read from disk)
                CACHE.drop(self.dir / f"c{cid}.r{v}.npz")
        assert self._index is not None
        self._index[cid] = [v for v in vs if keep_from <= v <= rnd]
        self._pending.append(path)

    def sync(self) -> None:
        """Make every state saved since the last call durable (the phase's end, before the reply);
        a failure raises :class:`StateDirError` (those clients' states may be lost)."""
        if not self._pending:
            return
        pending, self._pending = [p for p in self._pending if p.exists()], []
        try:
            sync_files(self.dir, pending)
        except OSError as e:
            raise StateDirError(self.dir, f"cannot make {len(pending)} client states durable", e) from None


def truncate(store: StateStore, cids: list[int], max_round: int) -> None:
    """Delete the versions of ``cids`` newer than ``max_round`` (left by a run that was killed
    mid-round), in one listing of the directory (the node's handshake: the run starts or resumes
    here, so the process's cache lets go of other runs' states)."""
    CACHE.retain_run(store.dir.name)
    keep = set(cids)
    for p in store.dir.iterdir():
        m = _PAT.match(p.name)
        if m and int(m.group(1)) in keep and int(m.group(2)) > max_round:
            p.unlink(missing_ok=True)
            CACHE.drop(p)
    store.refresh()
