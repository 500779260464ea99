"""Every process a run starts ends with the run: found by what it is, not by the groups the
launcher made.

Flower's processes do not stay in the process groups ``corolla run`` gives its children: the
SuperLink starts its SuperExec in a session of its own (``get_popen_detach_kwargs`` in
``flwr/supercore/utils.py``, ``start_new_session=True``), the SuperExec starts the ServerApp in that
session, and a process whose parent died is re-parented. A ServerApp whose SuperExec was stopped
is told so only by its parent monitor (``--parent-pid``: one SIGINT), and its exit handler talks to
a SuperLink that is gone; one such ``flwr-serverapp`` outlived a ``kill`` of ``corolla run`` by 20
minutes (issue 36). So the launcher:

* makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a process of the run whose
  parent dies is re-parented to ``corolla run``, not to init, so the run's processes stay its
  descendants whatever ends first (:func:`become_subreaper`);
* gives its direct children ``PR_SET_PDEATHSIG`` = SIGTERM, so they are told when ``corolla run``
  itself is killed outright (:func:`die_with_parent`);
* at the end finds the run's processes by what they are — the processes it started and their
  descendants (the parent chain), and every carrier of the run's ``FLWR_HOME`` *and* its run
  marker (``COROLLA_RUN``, unique per launch) in its environment, which each process Flower or
  Corolla starts inherits — and ends them: SIGTERM, a grace period, SIGKILL, until none is left
  (:func:`end_run_processes`), reaping the adopted ones. A shell or notebook where a user exported
  the run's ``FLWR_HOME`` (to call ``flwr ls``) carries no marker and is left alone, and so are
  this process's own ancestors, whatever they carry.

Linux ``/proc`` only; elsewhere these find nothing and change nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MARKER = "COROLLA_RUN"   # environment variable naming one launch of a run (launcher.cli.Cluster)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process the one orphans of its descendants are re-parented to (Linux)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    """For ``preexec_fn``: SIGTERM this child when its parent (``corolla run``) dies."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Proc:
    """One ``/proc`` entry: pid, parent, session, state, start time (pid reuse check), command."""

    __slots__ = ("pid", "ppid", "pgid", "sid", "state", "start", "cmd", "env_home", "env_run")

    def __init__(self, pid: int, stat: str, cmd: str, env_home: str | None, env_run: str | None = None):
        fields = stat.rsplit(")", 1)[1].split()
        self.pid = pid
        self.state, self.ppid, self.pgid, self.sid = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
        self.start = int(fields[19])
        self.cmd, self.env_home, self.env_run = cmd, env_home, env_run

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")

    def __repr__(self) -> str:
        return f"{self.pid} ({self.cmd[:120]}; parent {self.ppid}, session {self.sid}, state {self.state})"


def processes() -> dict[int, Proc]:
    """Every process this user can see (``/proc``), with its ``FLWR_HOME`` when readable."""
    out: dict[int, Proc] = {}
    me = os.getuid()
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            home = run = None
            if d.stat().st_uid == me:
                for entry in (d / "environ").read_bytes().split(b"\0"):
                    if entry.startswith(b"FLWR_HOME="):
                        home = entry[10:].decode(errors="replace")
                    elif entry.startswith(MARKER.encode() + b"="):
                        run = entry[len(MARKER) + 1:].decode(errors="replace")
            out[int(d.name)] = Proc(int(d.name), stat, cmd, home, run)
        except (OSError, ValueError, IndexError):
            continue   # gone meanwhile, or not ours to read
    return out


def descendants(root: int, table: dict[int, Proc] | None = None) -> list[Proc]:
    """Processes whose parent chain leads to ``root`` (``root`` excluded)."""
    table = processes() if table is None else table
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in table and pid != root:
            out.append(table[pid])
            todo.extend(children.get(pid, ()))
    return out


def ancestors(pid: int, table: dict[int, Proc]) -> set[int]:
    """``pid`` and the processes on its parent chain."""
    out = set()
    while pid in table and pid not in out:
        out.add(pid)
        pid = table[pid].ppid
    return out


def run_processes(flwr_home: str | Path, roots: tuple[int, ...] | list[int] = (),
                  known: list[Proc] = (), marker: str | None = None) -> list[Proc]:
    """The live processes of a run: carriers of its ``FLWR_HOME`` (and of ``marker`` as
    ``COROLLA_RUN`` when given), the ``roots`` (the processes the launcher started) and the
    ``known`` ones (an earlier look, still the same processes), with all their descendants; never
    this process or its ancestors."""
    table = processes()
    home = str(flwr_home)
    found = {p.pid: p for p in table.values()
             if p.env_home == home and (marker is None or p.env_run == marker) and p.alive}
    tops = [r for r in roots if r in table]
    tops += [k.pid for k in known if k.pid in table and table[k.pid].start == k.start]
    for r in tops:
        if table[r].alive:
            found[r] = table[r]
        found.update({p.pid: p for p in descendants(r, table) if p.alive})
    for p in list(found.values()):   # and whatever those started
        found.update({q.pid: q for q in descendants(p.pid, table) if q.alive})
    for pid in ancestors(os.getpid(), table):
        found.pop(pid, None)
    return sorted(found.values(), key=lambda p: p.pid)


def reap_adopted(keep: set[int] | frozenset[int] = frozenset()) -> None:
    """Collect the exit status of dead children of this process that nobody waits for (orphans
    re-parented to this subreaper), leaving ``keep`` (the Popen objects' own) alone."""
    me = os.getpid()
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(d.name)
        if fields[0] == "Z" and int(fields[1]) == me and pid not in keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _signal(procs: list[Proc], sig: int) -> None:
    table = processes()
    for p in procs:
        now = table.get(p.pid)
        if now is None or now.start != p.start or not now.alive:   # gone, or the pid is someone else's now
            continue
        try:
            os.kill(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_run_processes(flwr_home: str | Path, roots: tuple[int, ...] | list[int] = (), grace: float = 5.0,
                      timeout: float = 20.0, keep: set[int] = frozenset(), known: list[Proc] = (),
                      marker: str | None = None) -> list[Proc]:
    """End every process of the run (:func:`run_processes`; ``known``: a look taken before any
    of them was signalled, so that a process whose parent is gone is still found by its parent
    chain): SIGTERM, up to ``grace`` s to exit, then SIGKILL, repeated for processes started
    meanwhile, until none is left or ``timeout`` s passed; then reaps the adopted children that
    are already dead (:func:`reap_adopted`). Returns those still alive (none, normally)."""
    end = time.monotonic() + timeout
    left = run_processes(flwr_home, roots, known, marker)
    if left:
        _signal(left, signal.SIGTERM)
        soft = time.monotonic() + grace
        while left and time.monotonic() < soft:
            time.sleep(0.05)
            reap_adopted(keep)
            left = run_processes(flwr_home, roots, known, marker)
    while left and time.monotonic() < end:
        _signal(left, signal.SIGKILL)
        time.sleep(0.05)
        reap_adopted(keep)
        left = run_processes(flwr_home, roots, known, marker)
    reap_adopted(keep)   # and those that had ended by themselves: left as zombies they pass to PID 1 with us
    return left
