"""The one place where Corolla depends on which Flower is installed.

Corolla supports two Flower lines (``docs/deployment.md``, "Flower lines"):

* **1.42** (the default): the Fleet API (SuperNode <-> SuperLink) is HTTP on the SuperLink's
  ``--host/--port`` (default 8000, shared with the Control API and the ServerApp's runtime API);
  the SuperLink gets no Fleet flag and the SuperNodes' ``--superlink`` is that port;
* **1.39**: the Fleet API is a gRPC server (``grpc-rere``) of its own, placed with
  ``--fleet-api-address HOST:PORT`` (default 9092), where the SuperNodes connect.

Everything else Corolla uses from Flower is its public API (``flwr.app``, ``flwr.serverapp``,
``flwr.clientapp``, the ``flwr`` / ``flower-*`` commands), identical on both lines. The speed
work, though, reaches into Flower's internals in four places, and they all live here, keyed by
the exact Flower version whose wheel was read (:data:`INTERNALS`):

* the SuperNode's fixed waits (``flwr/supernode/start_client_internal.py``: ``time.sleep(3)``
  after an empty pull, ``time.sleep(0.5)`` twice while a ClientApp's reply is awaited):
  :func:`install_waits` replaces the ``time`` name inside that module;
* the first retry of Flower's object pulls (``flwr/supercore/inflatable/inflatable_utils.py``:
  ``pull_objects`` and ``pull_and_inflate_object_from_tree``, keyword defaults
  ``initial_backoff=1``, ``backoff_cap=10``): :func:`set_pull_backoff` changes those defaults;
* the ClientApp's FAB installation (``flwr/supernode/runtime/run_clientapp.py`` calls
  ``install_from_fab`` for every message, extracting the whole bundle even when it is installed):
  :func:`reuse_installed_fab` returns the installed folder first, in forked ClientApps;
* the SuperExec's executor (``flwr/supercore/superexec/executor/subprocess_executor.py``,
  ``run_superexec.get_executor``) and the SuperNode's ``subprocess.Popen(["flower-superexec",
  ...])``: :func:`fork_executor_class`, :func:`superexec_main`, :func:`replace_superexec_command`
  let ``launcher.warm`` fork ClientApps from a warm process.

On a Flower whose exact version is not in :data:`INTERNALS` none of them is applied: the
process runs Flower's stock code and warns once (:func:`internals`). ``tests/test_compat.py``
pins, per line, every internal listed here against the installed wheel.

This module imports Flower lazily (only the functions that patch it do), so the launcher can ask
which line is installed without paying for Flower's import.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

# ----------------------------------------------------------------------------------- the lines

CERTIFI_FLOOR = "2026.10.19"   # what Flower 1.42 requires after the 2026 CA incident; both lines get it


@dataclass(frozen=True)
class Line:
    """A Flower line Corolla supports: how its SuperNodes reach the SuperLink."""
    name: str          # "1.39", "1.42"
    version: str       # the exact release whose wheel was read and tested
    fleet: str         # "grpc" (grpc-rere on its own port) or "http" (on the shared --host/--port)
    fleet_port: int    # the SuperLink's default Fleet port

    @property
    def constraints(self) -> str:
        """The tested constraints file of this line, relative to the repository."""
        return f"constraints/flwr-{self.name}.txt"


LINES = {"1.39": Line("1.39", "1.39.0", "grpc", 9092), "1.42": Line("1.42", "1.42.0", "http", 8000)}
DEFAULT_LINE = "1.42"     # what `pip install` picks from pyproject's range, the image and CI's full suite use
CONTROL_PORT = 8000       # the SuperLink's --port default: Control API and runtime API (and, on HTTP lines, Fleet)


def flower_version() -> str:
    """The installed Flower's version, from its metadata (Flower itself is not imported)."""
    from importlib.metadata import version
    return version("flwr")


def major_minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def _tuple(version: str) -> tuple[int, int]:
    parts = major_minor(version).split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ValueError(f"Flower version {version!r}: expected MAJOR.MINOR[.PATCH]") from None


def fleet_transport(version: str | None = None) -> str:
    """``grpc`` up to Flower 1.39 (the SuperNode's only transport there), ``http`` from 1.40 on
    (the SuperNode no longer has a gRPC transport)."""
    return "grpc" if _tuple(version or flower_version()) < (1, 40) else "http"


def line(version: str | None = None) -> Line | None:
    """The supported line of ``version`` (default: the installed Flower), None outside them."""
    return LINES.get(major_minor(version or flower_version()))


def superlink_fleet_args(host: str, fleet_port: int, version: str | None = None) -> list[str]:
    """The ``flower-superlink`` arguments that place its Fleet API: ``--fleet-api-address`` on a
    gRPC line; nothing on an HTTP line (Fleet shares ``--host/--port``; Flower 1.40+ warns that
    ``--fleet-api-address`` is deprecated and serves gRPC Fleet only behind an internal switch)."""
    return ["--fleet-api-address", f"{host}:{fleet_port}"] if fleet_transport(version) == "grpc" else []


def fleet_address(host: str, control_port: int, fleet_port: int, version: str | None = None) -> str:
    """Where a SuperNode's ``--superlink`` points: the gRPC Fleet port on a gRPC line, the
    SuperLink's shared HTTP port on an HTTP line."""
    return f"{host}:{fleet_port if fleet_transport(version) == 'grpc' else control_port}"


# ------------------------------------------------------------------------- internals per version

@dataclass(frozen=True)
class Internals:
    """What Corolla relies on inside one exact Flower release (pinned by tests/test_compat.py)."""
    version: str
    supernode_module: str = "flwr.supernode.start_client_internal"
    supernode_sleeps: tuple[str, ...] = ("3", "0.5", "0.5")   # every time.sleep(...) in that module, in order
    idle_s: float = 3.0
    reply_s: float = 0.5
    superexec_command: str = "flower-superexec"               # what that module's subprocess.Popen starts
    pull_module: str = "flwr.supercore.inflatable.inflatable_utils"
    pull_functions: tuple[str, ...] = ("pull_objects", "pull_and_inflate_object_from_tree")
    pull_initial_s: float = 1
    pull_cap_s: float = 10
    executor_module: str = "flwr.supercore.superexec.executor.subprocess_executor"
    superexec_module: str = "flwr.supercore.superexec.run_superexec"
    clientapp_module: str = "flwr.supernode.cli.flwr_clientapp"
    clientapp_runtime_module: str = "flwr.supernode.runtime.run_clientapp"   # installs the FAB for every message


INTERNALS = {v: Internals(v) for v in ("1.39.0", "1.42.0")}   # read the same in both wheels
_warned = False


def internals(version: str | None = None, *, warn: bool = True) -> Internals | None:
    """The internals of the installed Flower (or ``version``), None (with one warning per process)
    when Corolla has not read that release: then everything runs as stock Flower."""
    global _warned
    v = version or flower_version()
    found = INTERNALS.get(v)
    if found is None and warn and not _warned:
        _warned = True
        known = ", ".join(sorted(INTERNALS))
        warnings.warn(f"Flower {v} is not a release whose internals Corolla has read ({known}): running Flower's "
                      "stock SuperNode waits (3 s idle poll, 0.5 s reply poll), object-pull backoff (1 s) and "
                      "ClientApp start (a fresh process per message)", stacklevel=3)
    return found


def _running_version() -> str:
    """The version of the Flower this process imported (a test may stand in another)."""
    import flwr
    return getattr(flwr, "__version__", None) or flower_version()


# ------------------------------------------------------------------------------ SuperNode waits

class Waits:
    """Stands in for the ``time`` module inside Flower's SuperNode loop: its ``sleep`` maps
    Flower's two fixed waits to the chosen ones; everything else is ``time``."""

    def __init__(self, idle: float, reply: float, stock_idle: float = 3.0, stock_reply: float = 0.5):
        self.idle, self.reply = idle, reply
        self.stock_idle, self.stock_reply = stock_idle, stock_reply

    def map(self, seconds: float) -> float:
        if seconds == self.stock_idle:
            return self.idle
        if seconds == self.stock_reply:
            return self.reply
        return seconds

    def sleep(self, seconds: float) -> None:
        time.sleep(self.map(seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def install_waits(idle: float, reply: float) -> bool:
    """Put :class:`Waits` into Flower's SuperNode loop of this process; False (and the one
    warning) on a Flower whose SuperNode was not read, in which case nothing changes."""
    import importlib
    got = internals(_running_version())
    if got is None:
        return False
    sci = importlib.import_module(got.supernode_module)
    if getattr(sci, "time", None) is not time:
        warnings.warn(f"{got.supernode_module}.time is not the time module: its waits stay Flower's", stacklevel=2)
        return False
    sci.time = Waits(idle, reply, got.idle_s, got.reply_s)
    return True


# ------------------------------------------------------------------------------ object pulls

def _pull_functions(got: Internals) -> list[Callable]:
    import importlib
    mod = importlib.import_module(got.pull_module)
    return [getattr(mod, name) for name in got.pull_functions]


def set_pull_backoff(initial: float, cap: float) -> bool:
    """Make Flower's object pulls in this process retry after ``initial`` s, doubling up to ``cap``
    s (the keyword defaults of ``pull_objects`` and of ``pull_and_inflate_object_from_tree``, which
    passes its own down). Returns False and changes nothing on a Flower not read."""
    got = internals(_running_version())
    if got is None:
        return False
    funcs = _pull_functions(got)
    for f in funcs:
        d = getattr(f, "__kwdefaults__", None) or {}
        if "initial_backoff" not in d or "backoff_cap" not in d:
            warnings.warn(f"{got.pull_module}.{f.__name__} has no initial_backoff/backoff_cap keyword defaults: "
                          "Flower's object-pull backoff stays as it is", stacklevel=2)
            return False
    for f in funcs:
        f.__kwdefaults__["initial_backoff"] = initial
        f.__kwdefaults__["backoff_cap"] = cap
    return True


def pull_backoff() -> float:
    """The first retry of this process's object pulls (Flower's 1 s when unchanged)."""
    from flwr.supercore.inflatable import inflatable_utils as iu
    return float((iu.pull_objects.__kwdefaults__ or {}).get("initial_backoff", 1))


# ------------------------------------------------------------------- SuperExec and ClientApps

def forking_supported() -> bool:
    """Whether this Flower's SuperExec and SuperNode were read (else ClientApps start Flower's
    way), decided from the metadata without importing Flower; warns once when not."""
    return internals() is not None


def clientapp_modules() -> tuple[str, ...]:
    """Flower modules a warm parent may import for its forked ClientApps."""
    got = internals(warn=False) or Internals("")
    return (got.clientapp_module,)


def run_clientapp(argv: list[str]) -> None:
    """Flower's ``flwr-clientapp`` entry point with ``argv``, in this process."""
    from flwr.supernode.cli.flwr_clientapp import flwr_clientapp
    sys.argv = ["flwr-clientapp", *argv]
    flwr_clientapp()


def installed_fab_path(content: bytes):
    """Where Flower installs the FAB ``content``: ``$FLWR_HOME/apps/<publisher>.<name>.<version>.<first
    8 hex of its sha256>`` (``flwr/cli/install.py``, ``validate_and_install``), read from the bundle's
    ``pyproject.toml`` without extracting the rest."""
    import hashlib
    import io
    import tomllib
    import zipfile

    from flwr.cli.install import APP_DIR, FAB_HASH_TRUNCATION, get_flwr_home, get_metadata_from_config
    with zipfile.ZipFile(io.BytesIO(content)) as z:
        config = tomllib.loads(z.read("pyproject.toml").decode())
    fab_id, version = get_metadata_from_config(config)
    publisher, name = fab_id.split("/")
    digest = hashlib.sha256(content).hexdigest()[:FAB_HASH_TRUNCATION]
    return get_flwr_home() / APP_DIR / f"{publisher}.{name}.{version}.{digest}"


def reuse_installed_fab() -> bool:
    """Make this process's ClientApp skip the FAB's extraction when Flower installed it already.

    Flower's ClientApp calls ``install_from_fab(fab.content, skip_prompt=True)`` for every message
    (``run_clientapp.py``): it unzips the whole bundle into a temporary folder and checks every
    file's hash, then returns the installed folder unchanged when it exists (0.09 s idle, about
    0.3 s per message while the other node computes, for Corolla's 240-file bundle). Here that
    folder is looked up first (:func:`installed_fab_path`) and returned as Flower would return it;
    a bundle not installed yet, or one that cannot be read, goes to Flower's function. The bytes
    of an already installed bundle are not re-checked: Flower does not use them either. False on
    a Flower not read."""
    import importlib
    got = internals(_running_version())
    if got is None:
        return False
    rc = importlib.import_module(got.clientapp_runtime_module)
    stock = rc.install_from_fab
    if getattr(stock, "corolla_reuses_installed", False):
        return True

    def install_from_fab(fab_file, install_dir=None, skip_prompt=False):
        if isinstance(fab_file, bytes) and install_dir is None and skip_prompt:
            try:
                path = installed_fab_path(fab_file)
            except Exception:  # noqa: BLE001 - not a readable FAB: Flower's own code says why
                path = None
            if path is not None and (path / "pyproject.toml").is_file():
                return path
        return stock(fab_file, install_dir, skip_prompt)

    install_from_fab.corolla_reuses_installed = True
    rc.install_from_fab = install_from_fab
    return True


def clientapp_argv(spec) -> list[str]:
    """The arguments Flower's SubprocessExecutor gives ``flwr-clientapp`` for ``spec``."""
    from flwr.supercore.constant import TASK_TYPE_TO_APPIO_API_ADDRESS_ARG
    args = [TASK_TYPE_TO_APPIO_API_ADDRESS_ARG[spec.task_type], spec.runtime_api_address, "--token", spec.token]
    if spec.insecure:
        args.append("--insecure")
    elif spec.root_certificates_path is not None:
        args.extend(["--root-certificates", spec.root_certificates_path])
    if spec.parent_pid is not None:
        args.extend(["--parent-pid", str(spec.parent_pid)])
    if spec.runtime_dependency_install:
        args.append("--allow-runtime-dependency-installation")
    return args


def fork_executor_class(tasks_for: Callable[[], Any], hand_off: Callable[[Any, list[str], bool], bool],
                        close: Callable[[Any], None]):
    """A subclass of Flower's ``SubprocessExecutor`` whose ClientApp tasks go to ``hand_off(tasks,
    argv, quiet)`` (``tasks`` from ``tasks_for()`` at construction); a task it refuses (False), any
    other task type and a task that installs dependencies at run time start Flower's way."""
    from flwr.supercore.constant import TaskType
    from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
    from flwr.supercore.superexec.executor.types import LaunchResult

    class ForkExecutor(SubprocessExecutor):
        def __init__(self):
            self.tasks = tasks_for()

        def launch(self, spec) -> LaunchResult:
            if (spec.task_type == TaskType.CLIENT_APP and not spec.runtime_dependency_install
                    and hand_off(self.tasks, clientapp_argv(spec), bool(spec.suppress_output))):
                return LaunchResult.accepted()
            return super().launch(spec)

        def close(self) -> None:
            close(self.tasks)
            super().close()

    return ForkExecutor


def superexec_main(executor_factory: Callable[[], Any], argv: list[str]) -> None:
    """``flower-superexec argv`` whose subprocess executor is ``executor_factory()``."""
    from flwr.supercore.constant import ExecutorType
    from flwr.supercore.superexec import run_superexec as rs
    stock = rs.get_executor

    def get_executor(executor_type, *args: Any, **kwargs: Any):
        if executor_type == ExecutorType.SUBPROCESS:
            return executor_factory()
        return stock(executor_type, *args, **kwargs)

    rs.get_executor = get_executor
    from flwr.supercore.cli.flower_superexec import flower_superexec
    sys.argv = ["flower-superexec", *argv]
    flower_superexec()


def replace_superexec_command(subprocess_stand_in: Any) -> bool:
    """Make this process's SuperNode start its SuperExec through ``subprocess_stand_in`` (its
    ``Popen`` sees ``["flower-superexec", ...]``); False on a Flower not read."""
    import importlib
    got = internals(_running_version())
    if got is None:
        return False
    sci = importlib.import_module(got.supernode_module)
    sci.subprocess = subprocess_stand_in
    return True


def run_flower_supernode(argv: list[str]) -> None:
    """Flower's ``flower-supernode`` entry point with ``argv``, in this process."""
    from flwr.supernode.cli import flower_supernode
    sys.argv = ["flower-supernode", *argv]
    flower_supernode()
