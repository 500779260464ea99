"""The Flower compat layer (flower_io/compat.py): the supported lines, their Fleet flags, and, per
line, every Flower internal Corolla relies on, pinned against the installed wheel.

The per-line tests run in the venv of their line: ``.ci/run`` runs this file under both (the
full suite on the default line, this file with the end-to-end and deployment tests on the other),
so each line's pins are checked on every CI run; in a venv of the other line they skip, naming it.
"""
from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import time
import tomllib
import warnings
from importlib.metadata import PackageNotFoundError, version as dist_version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from flower_io import compat

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = compat.flower_version()


def test_the_installed_flower_is_a_supported_line():
    """CI's venvs hold one of the lines; any other Flower would run stock (tested below)."""
    assert compat.line() is not None, f"Flower {INSTALLED} is neither line {sorted(compat.LINES)}"
    assert compat.internals(warn=False) is not None, f"Flower {INSTALLED}: its internals were not read"


def _on_line(name: str) -> compat.Internals:
    ln = compat.LINES[name]
    if compat.major_minor(INSTALLED) != name:
        pytest.skip(f"Flower {INSTALLED} is installed; line {name}'s internals are checked in its own venv "
                    f"(.ci/run, {ln.constraints})")
    assert INSTALLED == ln.version, f"line {name} was read on Flower {ln.version}, this is {INSTALLED}"
    return compat.INTERNALS[ln.version]


LINE_NAMES = sorted(compat.LINES)


# ----------------------------------------------------------------------------- per-line pins

@pytest.mark.parametrize("name", LINE_NAMES)
def test_supernode_waits_are_the_ones_read(name):
    """install_waits rests on this code: ``time.sleep(3)`` after an empty pull and
    ``time.sleep(0.5)`` twice while waiting for a reply, no other sleep, the module's ``time``
    and ``subprocess`` names bound to the modules, and the SuperExec started by name."""
    got = _on_line(name)
    import importlib
    sci = importlib.import_module(got.supernode_module)
    src = inspect.getsource(sci)
    assert tuple(re.findall(r"time\.sleep\(([^)]*)\)", src)) == got.supernode_sleeps
    assert "run_id is None" in inspect.getsource(sci.start_client_internal)   # the idle branch
    assert sci.time is time and sci.subprocess is subprocess
    assert f'command = ["{got.superexec_command}"]' in src and "subprocess.Popen(command)" in src


@pytest.mark.parametrize("name", LINE_NAMES)
def test_pull_backoff_defaults_are_the_ones_read(name):
    """set_pull_backoff rests on this code: both pull functions take ``initial_backoff`` and
    ``backoff_cap`` as keyword-only defaults equal to Flower's constants, and no caller elsewhere in
    Flower passes its own."""
    got = _on_line(name)
    from flwr.supercore import constant
    assert (constant.PULL_INITIAL_BACKOFF, constant.PULL_BACKOFF_CAP) == (got.pull_initial_s, got.pull_cap_s)
    for f in compat._pull_functions(got):
        sig = inspect.signature(f)
        for key, stock in (("initial_backoff", got.pull_initial_s), ("backoff_cap", got.pull_cap_s)):
            assert sig.parameters[key].kind is inspect.Parameter.KEYWORD_ONLY, (f.__name__, key)
            assert f.__kwdefaults__[key] == stock, (f.__name__, key)
    import flwr
    root = Path(flwr.__file__).parent
    callers = [p for p in root.rglob("*.py") if p.name != "inflatable_utils.py"
               and any(f"{n}(" in p.read_text() for n in got.pull_functions)]
    assert len(callers) >= 3    # the ServerApp's grid, the SuperNode, the ClientApp
    for p in callers:
        assert "initial_backoff" not in p.read_text(), p


@pytest.mark.parametrize("name", LINE_NAMES)
def test_executor_internals_are_the_ones_read(name, monkeypatch):
    """The fork executor rests on this code: SubprocessExecutor.launch starts
    ``flwr-clientapp`` with exactly :func:`compat.clientapp_argv`, run_superexec picks its
    executor through the module's ``get_executor``, and the entry points exist."""
    got = _on_line(name)
    import importlib

    from flwr.supercore.constant import ExecutorType, TaskType
    from flwr.supercore.superexec.executor.types import ExecutionSpec, LaunchResult
    se = importlib.import_module(got.executor_module)
    rs = importlib.import_module(got.superexec_module)
    seen = []
    monkeypatch.setattr(se.subprocess, "Popen", lambda args, **kw: seen.append(args))
    for insecure, certs, pid in ((True, None, 7), (False, "/c/ca.crt", None)):
        spec = ExecutionSpec(task_type=TaskType.CLIENT_APP, runtime_api_address="127.0.0.1:9094", token="tok",
                             insecure=insecure, root_certificates_path=certs, runtime_dependency_install=False,
                             parent_pid=pid, suppress_output=False, task_id=1)
        assert se.SubprocessExecutor().launch(spec) == LaunchResult.accepted()
        assert seen[-1] == ["flwr-clientapp", *compat.clientapp_argv(spec)]
    assert "get_executor(" in inspect.getsource(rs.run_superexec) and callable(rs.get_executor)
    assert ExecutorType.SUBPROCESS in ExecutorType
    assert callable(importlib.import_module(got.clientapp_module).flwr_clientapp)
    from flwr.supercore.cli.flower_superexec import flower_superexec
    from flwr.supernode.cli import flower_supernode
    assert callable(flower_superexec) and callable(flower_supernode)


@pytest.mark.parametrize("name", LINE_NAMES)
def test_clientapp_fab_install_is_the_one_read(name):
    """reuse_installed_fab rests on this code: the ClientApp calls the module's ``install_from_fab``
    name with the FAB's bytes and ``skip_prompt=True`` for every message, and Flower installs to
    ``$FLWR_HOME/apps/<publisher>.<name>.<version>.<sha256[:8]>``, returning that folder unchanged
    when it exists."""
    got = _on_line(name)
    import importlib

    from flwr.cli import install
    rc = importlib.import_module(got.clientapp_runtime_module)
    assert rc.install_from_fab is install.install_from_fab or getattr(rc.install_from_fab, "corolla_reuses_installed", False)
    assert "install_from_fab(fab.content, skip_prompt=True)" in inspect.getsource(rc.run_clientapp)
    src = inspect.getsource(install.validate_and_install)
    assert 'f"{publisher}.{project_name}.{version}.{fab_hash[:FAB_HASH_TRUNCATION]}"' in src
    assert "if install_path.exists():\n        if skip_prompt:\n            return install_path" in src
    assert "fab_hash = hashlib.sha256(fab_file).hexdigest()" in inspect.getsource(install.install_from_fab)
    assert (install.APP_DIR, install.FAB_HASH_TRUNCATION) == ("apps", 8)


@pytest.mark.parametrize("name", LINE_NAMES)
def test_fleet_transport_is_the_one_read(name):
    """1.39: the SuperNode speaks gRPC (``--grpc-rere``, the default) to ``--fleet-api-address``;
    1.42: no gRPC transport in the SuperNode, the SuperLink serves Fleet over HTTP on --host/--port and
    its gRPC Fleet API only behind an internal switch."""
    _on_line(name)
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode
    flags = {s for a in _parse_args_run_supernode()._actions for s in a.option_strings}
    import importlib
    fs = importlib.import_module("flwr.superlink.cli.flower_superlink")
    src = inspect.getsource(fs)
    if compat.LINES[name].fleet == "grpc":
        assert "--grpc-rere" in flags and "--grpc-adapter" in flags
        assert "self._start_fleet_api()" in src and "FLWR_INTERNAL_GRPC_FLEET_API" not in src
        assert not (Path(fs.__file__).parents[1] / "routers" / "fleet").exists()
    else:
        assert "--grpc-rere" not in flags and "--grpc-adapter" not in flags
        assert 'if os.getenv(FLWR_INTERNAL_GRPC_FLEET_API) == "1":' in src
        assert (Path(fs.__file__).parents[1] / "routers" / "fleet" / "router.py").is_file()
    assert {"--superlink", "--insecure", "--root-certificates", "--auth-supernode-private-key", "--node-config",
            "--host", "--port", "--isolation"} <= flags


@pytest.mark.parametrize("name", LINE_NAMES)
def test_secure_aggregation_primitives_used_are_there(name):
    """flower_io/secagg.py (outside this layer for now) uses Flower's SecAgg+ primitives; they are
    the same functions on both lines."""
    _on_line(name)
    from flwr.common.secure_aggregation.crypto import shamir, symmetric_encryption
    from flwr.common.secure_aggregation import quantization, secaggplus_utils
    from flwr.supercore.primitives import asymmetric
    for mod, names in ((shamir, ("combine_shares", "create_shares")),
                       (symmetric_encryption, ("decrypt", "encrypt", "generate_shared_key")),
                       (quantization, ("quantize",)), (secaggplus_utils, ("share_keys_plaintext_concat",)),
                       (asymmetric, ("bytes_to_private_key", "bytes_to_public_key", "generate_key_pairs"))):
        for n in names:
            assert callable(getattr(mod, n)), f"{mod.__name__}.{n}"


# ------------------------------------------------------------------ behaviour on the installed line

@pytest.fixture
def restore_flower():
    """Undo what the compat layer changes in this process."""
    import importlib
    got = compat.internals(warn=False)
    sci = importlib.import_module(got.supernode_module)
    saved_mod = (sci.time, sci.subprocess)
    funcs = compat._pull_functions(got)
    saved_kw = [dict(f.__kwdefaults__) for f in funcs]
    rc = importlib.import_module(got.clientapp_runtime_module)
    saved_install = rc.install_from_fab
    yield got
    sci.time, sci.subprocess = saved_mod
    rc.install_from_fab = saved_install
    for f, kw in zip(funcs, saved_kw):
        f.__kwdefaults__.clear()
        f.__kwdefaults__.update(kw)


def test_install_waits_patches_only_that_module(restore_flower):
    import importlib
    sci = importlib.import_module(restore_flower.supernode_module)
    assert compat.install_waits(0.05, 0.02)
    assert isinstance(sci.time, compat.Waits) and (sci.time.idle, sci.time.reply) == (0.05, 0.02)
    assert time.sleep is not sci.time.sleep and sci.time.monotonic is time.monotonic
    w = compat.Waits(0.05, 0.01)
    assert (w.map(3), w.map(3.0), w.map(0.5), w.map(0.1), w.map(2)) == (0.05, 0.05, 0.01, 0.1, 2)


def test_set_pull_backoff_changes_both_functions_and_nothing_else(restore_flower):
    funcs = compat._pull_functions(restore_flower)
    before = [dict(f.__kwdefaults__) for f in funcs]
    assert compat.set_pull_backoff(0.02, 1.0)
    for f, b in zip(funcs, before):
        assert f.__kwdefaults__["initial_backoff"] == 0.02 and f.__kwdefaults__["backoff_cap"] == 1.0
        rest = lambda d: {k: v for k, v in d.items() if k not in ("initial_backoff", "backoff_cap")}  # noqa: E731
        assert rest(f.__kwdefaults__) == rest(b)
    assert compat.pull_backoff() == 0.02


def test_an_installed_fab_is_not_extracted_again(restore_flower, tmp_path, monkeypatch):
    """The first message installs the FAB with Flower's own code; later ones get the same folder
    without extracting the bundle; another bundle (new hash) is installed by Flower again."""
    import importlib

    from flwr.cli import archive_utils, install
    from flwr.cli.build import build_fab_from_disk

    from launcher import fab as fabmod
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    content = build_fab_from_disk(fabmod.stage(ROOT, tmp_path / "app"))
    rc = importlib.import_module(restore_flower.clientapp_runtime_module)
    assert compat.reuse_installed_fab() and compat.reuse_installed_fab()   # the second call changes nothing
    assert rc.install_from_fab.corolla_reuses_installed
    extracted = []
    stock_extract = archive_utils.safe_extract_zip
    monkeypatch.setattr(install, "safe_extract_zip", lambda *a: (extracted.append(1), stock_extract(*a))[1])
    first = rc.install_from_fab(content, skip_prompt=True)
    assert extracted == [1] and first == compat.installed_fab_path(content) and (first / "pyproject.toml").is_file()
    assert first.name.endswith("." + __import__("hashlib").sha256(content).hexdigest()[:8])
    assert rc.install_from_fab(content, skip_prompt=True) == first and extracted == [1]
    app2 = fabmod.stage(ROOT, tmp_path / "app2")
    readme = app2 / "README.md"
    text = readme.read_text()
    readme.unlink()   # a hard link to the checkout's file: replace it, never write through it
    readme.write_text(text + "\n")
    other = build_fab_from_disk(app2)
    second = rc.install_from_fab(other, skip_prompt=True)
    assert extracted == [1, 1] and second != first and second == compat.installed_fab_path(other)
    with pytest.raises(Exception):   # not a FAB: Flower's own code says why
        rc.install_from_fab(b"not a zip", skip_prompt=True)


def test_another_flower_runs_stock_with_one_warning(restore_flower, monkeypatch):
    """On a release not read (here 1.43.0 stands in) nothing of Flower's changes and the process
    warns once, however many patches are asked for."""
    import importlib

    import flwr
    sci = importlib.import_module(restore_flower.supernode_module)
    monkeypatch.setattr(flwr, "__version__", "1.43.0", raising=False)
    monkeypatch.setattr(compat, "flower_version", lambda: "1.43.0")
    monkeypatch.setattr(compat, "_warned", False)
    funcs = compat._pull_functions(restore_flower)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not compat.install_waits(0.05, 0.05)
        assert not compat.set_pull_backoff(0.02, 1.0)
        assert not compat.replace_superexec_command(object())
        assert not compat.reuse_installed_fab()
        assert not compat.forking_supported()
    assert len(caught) == 1 and "Flower 1.43.0 is not a release whose internals Corolla has read" in str(caught[0].message)
    assert sci.time is time and sci.subprocess is subprocess
    assert all(f.__kwdefaults__["initial_backoff"] == restore_flower.pull_initial_s for f in funcs)


def test_fleet_flags_per_line():
    assert [compat.fleet_transport(v) for v in ("1.38.0", "1.39.0", "1.40.0", "1.42.0", "1.43.1", "2.0")] == \
        ["grpc", "grpc", "http", "http", "http", "http"]
    assert compat.superlink_fleet_args("127.0.0.1", 9092, "1.39.0") == ["--fleet-api-address", "127.0.0.1:9092"]
    assert compat.superlink_fleet_args("127.0.0.1", 9092, "1.42.0") == []
    assert compat.fleet_address("h", 8000, 9092, "1.39.0") == "h:9092"
    assert compat.fleet_address("h", 8000, 9092, "1.42.0") == "h:8000"
    with pytest.raises(ValueError, match="Flower version 'x.y'"):
        compat.fleet_transport("x.y")


# ---------------------------------------------------------------------- versions and constraints

def _requirements() -> dict[str, Requirement]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {Requirement(d).name: Requirement(d) for d in deps}


def test_pyproject_admits_exactly_the_two_lines_and_the_certifi_floor():
    req = _requirements()
    flwr = req["flwr"]
    assert "simulation" in flwr.extras
    for v in ("1.39.0", "1.42.0"):
        assert flwr.specifier.contains(v), v
    for v in ("1.38.0", "1.40.0", "1.41.0", "1.43.0"):
        assert not flwr.specifier.contains(v), v
    assert {ln.version for ln in compat.LINES.values()} == set(compat.INTERNALS)
    assert compat.DEFAULT_LINE in compat.LINES
    # the floor, on both lines (1.39 itself does not ask for it)
    assert req["certifi"].specifier.contains(compat.CERTIFI_FLOOR)
    assert not req["certifi"].specifier.contains("2026.10.18")
    assert Version(dist_version("certifi")) >= Version(compat.CERTIFI_FLOOR)


def _constraints(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / compat.LINES[name].constraints).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            n, _, v = line.partition("==")
            assert v, f"{compat.LINES[name].constraints}: {line!r} is not NAME==VERSION"
            pins[n.lower().replace("_", "-")] = v
    return pins


@pytest.mark.parametrize("name", LINE_NAMES)
def test_constraints_file_pins_its_line(name):
    pins = _constraints(name)
    assert pins["flwr"] == compat.LINES[name].version
    assert Version(pins["certifi"]) >= Version(compat.CERTIFI_FLOOR)
    assert _requirements()["flwr"].specifier.contains(pins["flwr"])
    assert "corolla" not in pins


def test_this_venv_is_its_lines_constraints_file():
    """The tests run on exactly the set the line's constraints file pins (CI installs with it)."""
    name = compat.major_minor(INSTALLED)
    if name not in compat.LINES:
        pytest.fail(f"Flower {INSTALLED} is not a supported line")
    wrong = []
    for n, v in _constraints(name).items():
        try:
            have = dist_version(n)
        except PackageNotFoundError:
            continue   # an optional extra this venv does not have
        if Version(have.split("+")[0]) != Version(v):
            wrong.append(f"{n} {have} (pinned {v})")
    assert not wrong, f"this venv differs from {compat.LINES[name].constraints}: {', '.join(wrong)}"


def test_installing_corolla_here_keeps_this_line(tmp_path):
    """pip, offline, would install nothing but Corolla into this venv: its Flower line (and
    everything else) satisfies pyproject as it is."""
    report = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation",
                        "-q", "--report", str(report), "-e", f"{ROOT}[all,test]"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    would = [(i["metadata"]["name"], i["metadata"]["version"]) for i in json.loads(report.read_text())["install"]]
    assert would == [("corolla", dist_version("corolla"))], would
