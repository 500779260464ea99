"""Warm ClientApp processes: Flower's SuperExec launches each ClientApp by forking a parent that
has already imported Flower, torch, numpy and scipy, instead of starting a fresh interpreter.

Flower (1.39 and 1.42 alike) starts a new ``flwr-clientapp`` process for **every** message a SuperNode receives
(``SubprocessExecutor.launch`` in ``flwr/supercore/superexec/executor/subprocess_executor.py``);
on these cores importing Flower and torch in it costs about a second per message and node
(``docs/results.md``, "One ClientApp process"). Nothing about the task changes here: the forked
child runs Flower's own ``flwr-clientapp`` entry point with the exact arguments the stock executor
would pass, pulls its message, FAB and context through the SuperNode's runtime API, loads the
app from the FAB and exits, as before.

Pieces, each as narrow as Flower allows (every touch of Flower's internals is in
:mod:`flower_io.compat`, keyed by Flower version; on a Flower it has not read, ClientApps start
Flower's way):

* :func:`fork_executor_class` — a ``SubprocessExecutor`` whose ``launch`` hands ClientApp tasks to
  the fork server (other task types go the stock way);
* :func:`serve` — the fork server: a single-threaded process that imports only third-party
  modules (never the app: the FAB's code must be the one that runs), then forks one child per
  task line read from its task pipe. The SuperNode process forks it first thing, once Flower's
  SuperNode package is imported (:func:`install`, :func:`fork_server`; ``python -m launcher.warm
  serve`` where it cannot fork), and its SuperExec inherits the task pipe, so the imports overlap
  the SuperNode's own start;
* :func:`superexec_main` — ``flower-superexec`` with ``get_executor`` answering the fork executor
  for the subprocess executor type;
* :class:`SuperExecCommand` — stands in for ``subprocess`` inside
  ``flwr.supernode.start_client_internal`` so the SuperNode starts ``python -m launcher.warm
  superexec`` where it would start ``flower-superexec``.

Why forking is safe here: the fork server runs no Python thread and never a numerical operation
(a native BLAS pool started when numpy loads handles fork itself: OpenBLAS shuts its workers down
and restarts them around ``fork`` by ``pthread_atfork``), and it holds no sockets or locks of
Flower's.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from typing import Any

from flower_io import compat
from flower_io.pulls import ENV as PULL_BACKOFF_ENV, env_backoff, set_pull_backoff

FD_ENV = "COROLLA_FORK_SERVER_FD"   # the fork server's task pipe, inherited by the SuperExec

#: What the fork server imports while no task waits. ``torch._dynamo`` is the costly one: torch imports
#: it lazily on the first optimizer a process builds (``Optimizer.__init__`` is wrapped by
#: ``torch._disable_dynamo``), 1.4-1.5 s per forked ClientApp on these cores, against 0.002 s once it is
#: preloaded. ``httpx`` is the client of Flower's runtime API (0.1 s per child); it imports its transport,
#: ``httpcore`` (and with it ``trio`` where installed), only when the first client is made: 0.18 s per
#: child on Flower 1.42, whose ClientApp talks HTTP to its SuperNode.
PRELOAD = (*compat.clientapp_modules(), "numpy", "scipy.sparse", "torch", "torch._dynamo", "httpx", "httpcore")


# ----------------------------------------------------------------------------------- fork server
def run_clientapp(argv: list[str]) -> None:
    """Flower's ``flwr-clientapp`` entry point with ``argv``, in this (forked) process, reusing the
    installed FAB instead of extracting it again (:func:`flower_io.compat.reuse_installed_fab`)."""
    compat.reuse_installed_fab()
    compat.run_clientapp(argv)


class TaskPipe:
    """Task lines from a pipe's file descriptor, with a non-blocking :meth:`waiting` (a line, or
    the end, is there to read), so that the server can keep importing while nothing is asked."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = b""
        self.eof = False

    def waiting(self) -> bool:
        if b"\n" in self.buf or self.eof:
            return True
        return bool(select.select([self.fd], [], [], 0)[0])

    def readline(self) -> str | None:
        """The next line (blocking), None at the end."""
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.eof = True
                line, self.buf = self.buf, b""
                return line.decode() if line else None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()


def _child(entry, argv: list[str], fd: int) -> None:
    """A forked child (a ClientApp, or the fork server itself from :func:`fork_server`): close the
    parent's pipe end ``fd``, run ``entry(argv)`` and leave with its exit code; never return."""
    code = 0
    try:
        os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if os.environ.get(PULL_BACKOFF_ENV):   # the SuperNode's --pull-backoff, for this ClientApp's pulls
            set_pull_backoff(env_backoff())
        entry(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must never return into the loop
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(preload=PRELOAD, stdin=None, entry=run_clientapp) -> None:
    """Fork one child per line of ``stdin`` (JSON: ``{"argv": the argv of flwr-clientapp, "quiet":
    no output}``) that runs ``entry(argv)``, and import ``preload`` one module at a time while no
    task is waiting: the first task does not wait for all of them (a child forked early imports
    what it needs itself, as a fresh process would). Children are reaped by the kernel (SIGCHLD
    ignored); the server ends when ``stdin`` closes (the SuperNode and its SuperExec ended)."""
    import importlib
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    tasks = TaskPipe((stdin or sys.stdin).fileno())
    pending = list(preload)
    while True:
        if pending and not tasks.waiting():
            try:
                importlib.import_module(pending.pop(0))
            except ImportError:
                pass   # a lean install without torch still forks; the child imports what it needs
            continue
        line = tasks.readline()
        if line is None:
            break
        if not line.strip():
            continue
        task = json.loads(line)
        pid = os.fork()
        if pid == 0:
            if task.get("quiet"):   # as SubprocessExecutor's suppress_output: no output from the task
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
            _child(entry, task["argv"], tasks.fd)
        print(f"corolla warm: ClientApp process {pid} forked", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------- executor
def _tasks_for():
    """The fork server's task pipe for a SuperExec: the one the SuperNode handed down
    (``$COROLLA_FORK_SERVER_FD``), else a fork server of this SuperExec's own. Returns
    ``(server or None, pipe)``."""
    fd = os.environ.get(FD_ENV)
    if fd:   # the SuperNode started the fork server already (install()): write to its pipe
        try:
            return None, os.fdopen(int(fd), "w")
        except (OSError, ValueError):
            pass
    server = start_server()
    return server, server.stdin


def _hand_off(tasks, argv: list[str], quiet: bool) -> bool:
    """Give the fork server one ClientApp task; False when it is gone (the task then starts the
    stock way)."""
    server, pipe = tasks
    if server is not None and server.poll() is not None:
        return False
    try:
        pipe.write(json.dumps({"argv": argv, "quiet": quiet}) + "\n")
        pipe.flush()
    except (OSError, ValueError):
        return False
    return True


def _close(tasks) -> None:
    server, pipe = tasks
    try:
        pipe.close()
    except OSError:
        pass
    if server is not None and server.poll() is None:
        server.terminate()


def fork_executor_class():
    """Flower's SubprocessExecutor whose ClientApp tasks fork from the warm server (a dependency
    install per run, ``--allow-runtime-dependency-installation``, needs a fresh interpreter, so
    those tasks and any other task type start as Flower starts them): :mod:`flower_io.compat`."""
    return compat.fork_executor_class(_tasks_for, _hand_off, _close)


def superexec_main() -> None:
    """``flower-superexec`` whose subprocess executor is the fork executor."""
    compat.superexec_main(fork_executor_class(), sys.argv[2:])


def start_server() -> subprocess.Popen:
    """The fork server, as a child of this process; tasks go to its stdin."""
    return subprocess.Popen([sys.executable, "-m", "launcher.warm", "serve"], stdin=subprocess.PIPE, text=True,
                            start_new_session=False)


class ForkedServer:
    """The fork server as a fork of this process (what :func:`fork_server` returns): the parts of
    ``subprocess.Popen`` that the SuperNode side uses (``pid``, ``stdin``, ``poll``, ``terminate``)."""

    def __init__(self, pid: int, stdin):
        self.pid, self.stdin, self.returncode = pid, stdin, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def fork_server(preimport: tuple[str, ...] = ()):
    """The fork server forked from this process once it has imported ``preimport`` (the modules
    this process imports next anyway: a SuperNode imports Flower's SuperNode package, which the
    ClientApp's entry point needs too), so the server does not import them a second time (1.3 s of
    a core per node on Flower 1.42, while every process of a run starts at once). Forked only while
    this process runs no other Python thread (a fork may inherit a lock another thread holds; the
    BLAS pool numpy starts handles fork itself); otherwise, or where ``fork`` is missing,
    :func:`start_server`."""
    import importlib
    import threading
    for name in preimport:
        importlib.import_module(name)
    if threading.active_count() > 1 or not hasattr(os, "fork"):
        return start_server()
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:   # the server: reads tasks from r until every writer has closed w; never returns
        _child(lambda _argv: serve(stdin=os.fdopen(r, "r")), [], w)
    os.close(r)
    return ForkedServer(pid, os.fdopen(w, "w"))


class SuperExecCommand:
    """Stands in for ``subprocess`` inside ``flwr.supernode.start_client_internal``: the SuperNode's
    ``Popen(["flower-superexec", ...])`` becomes ``python -m launcher.warm superexec ...``, which
    inherits the write end of ``server``'s task pipe (its number in ``$COROLLA_FORK_SERVER_FD``)."""

    def __init__(self, server: subprocess.Popen | None = None):
        self.server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def Popen(self, args, *rest: Any, **kwargs: Any):  # noqa: N802 - the name it replaces
        if isinstance(args, list) and args[:1] == ["flower-superexec"]:
            args = [sys.executable, "-m", "launcher.warm", "superexec", *args[1:]]
            if self.server is not None and self.server.poll() is None:
                fd = self.server.stdin.fileno()
                kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), fd)
                kwargs["env"] = {**(kwargs.get("env") or os.environ), FD_ENV: str(fd)}
        return subprocess.Popen(args, *rest, **kwargs)


def install() -> None:
    """Make this process's SuperNode start the warm SuperExec (call before Flower's entry point).

    The fork server starts here, at once, so that its imports (torch above all: seconds on a busy
    2-core machine) run while the SuperNode starts and connects, not when the first message is
    already waiting; it is forked from this process after Flower's SuperNode package is imported
    (:func:`fork_server`), and lives as long as this process (its task pipe closes with it)."""
    server = fork_server(compat.clientapp_modules())
    compat.replace_superexec_command(SuperExecCommand(server))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["superexec"]:
        superexec_main()
    else:
        sys.exit("usage: python -m launcher.warm serve|superexec [flower-superexec args]")
