"""``corolla supernode``: Flower's SuperNode with its two fixed waits made settable (launcher/supernode.py).

The end-to-end side is covered elsewhere: ``corolla run --mode local`` starts these SuperNodes
(tests/test_e2e.py), and stock ``flower-supernode`` keeps working against the same app
(``test_submit_to_a_running_superlink_with_auto_nodes``, tests/test_deployment.py)."""
from __future__ import annotations

import inspect
import re
import time

import pytest

from launcher import supernode


def test_the_waits_read_are_still_in_flowers_supernode_loop():
    """The substitution rests on Flower 1.39's exact code: ``time.sleep(3)`` after an empty pull and
    ``time.sleep(0.5)`` twice while waiting for a reply, and no other sleep in that module."""
    from flwr.supernode import start_client_internal as sci
    src = inspect.getsource(sci)
    assert re.findall(r"time\.sleep\(([^)]*)\)", src) == ["3", "0.5", "0.5"]
    assert "run_id is None" in inspect.getsource(sci.start_client_internal)


def test_waits_map_only_flowers_two_constants():
    w = supernode.Waits(0.05, 0.01)
    assert w.map(3) == 0.05 and w.map(3.0) == 0.05
    assert w.map(0.5) == 0.01
    assert w.map(0.1) == 0.1 and w.map(2) == 2
    assert w.monotonic is time.monotonic and w.time is time.time   # the rest is the time module


def test_install_waits_patches_only_that_module_and_restores(monkeypatch):
    from flwr.supernode import start_client_internal as sci
    monkeypatch.setattr(sci, "time", time)
    assert supernode.install_waits(0.05, 0.02)
    assert isinstance(sci.time, supernode.Waits) and (sci.time.idle, sci.time.reply) == (0.05, 0.02)
    assert time.sleep is not sci.time.sleep   # the global time module is untouched


def test_other_flower_version_runs_stock_with_a_warning(monkeypatch):
    import flwr
    from flwr.supernode import start_client_internal as sci
    monkeypatch.setattr(sci, "time", time)
    monkeypatch.setattr(flwr, "__version__", "1.40.0", raising=False)
    with pytest.warns(UserWarning, match="1.40.0 is not 1.39.0.*stock SuperNode"):
        assert not supernode.install_waits(0.05, 0.05)
    assert sci.time is time


def test_flags_are_split_from_flowers():
    ours, rest = supernode.split_args(["--idle-poll", "0.1", "--insecure", "--superlink", "h:9092",
                                       "--node-config", 'clients="auto"'])
    assert ours.idle_poll == 0.1 and ours.reply_poll == supernode.DEFAULT_REPLY_POLL
    assert rest == ["--insecure", "--superlink", "h:9092", "--node-config", 'clients="auto"']
    with pytest.raises(SystemExit):
        supernode.split_args(["--idle-poll", "0"])
    with pytest.raises(SystemExit):
        supernode.split_args(["--reply-poll", "soon"])


def test_help_names_both_flags(capsys):
    from launcher.cli import main
    assert main(["supernode", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--idle-poll" in out and "--reply-poll" in out and "flower-supernode --help" in out


# ------------------------------------------------------------------ warm ClientApp processes (launcher/warm.py)
def test_forked_clientapp_gets_exactly_the_arguments_flowers_executor_gives(monkeypatch):
    from flwr.supercore.constant import TaskType
    from flwr.supercore.superexec.executor import subprocess_executor as se
    from flwr.supercore.superexec.executor.types import ExecutionSpec

    from launcher import warm
    seen = []
    monkeypatch.setattr(se.subprocess, "Popen", lambda args, **kw: seen.append(args))
    for insecure, certs, pid in ((True, None, 7), (False, "/c/ca.crt", None)):
        spec = ExecutionSpec(task_type=TaskType.CLIENT_APP, runtime_api_address="127.0.0.1:9094", token="tok",
                             insecure=insecure, root_certificates_path=certs, runtime_dependency_install=False,
                             parent_pid=pid, suppress_output=False, task_id=1)
        se.SubprocessExecutor().launch(spec)
        assert seen[-1] == ["flwr-clientapp", *warm.clientapp_argv(spec)]


def test_fork_server_runs_each_task_in_its_own_child_and_ends_with_its_input(tmp_path):
    """A task line becomes one forked child of the server running the entry with that argv; the
    child's exit code does not stop the server; closing stdin ends it."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    code = ("import os, sys\nfrom launcher import warm\n"
            "def entry(argv):\n"
            "    open(argv[0], 'w').write(f'{os.getppid()} {os.getpid()}')\n"
            "    sys.exit(int(argv[1]))\n"
            "warm.serve(preload=('json',), entry=entry)\n")
    root = Path(__file__).resolve().parents[1]
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=root)
    files = [tmp_path / f"t{i}" for i in range(3)]
    for i, f in enumerate(files):
        p.stdin.write(json.dumps({"argv": [str(f), str(i)], "quiet": False}) + "\n")
    p.stdin.close()
    assert p.wait(30) == 0
    err = p.stderr.read()
    deadline = time.monotonic() + 20
    while not all(f.exists() and f.read_text() for f in files) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [tuple(map(int, f.read_text().split())) for f in files]
    assert all(parent == p.pid for parent, _ in pids)          # forked from the server
    assert len({child for _, child in pids}) == 3               # one process per task
    assert err.count("corolla warm: ClientApp process") == 3


def test_supernode_starts_the_warm_superexec_instead_of_flowers(monkeypatch):
    import subprocess
    import sys

    from launcher import warm
    seen = []
    monkeypatch.setattr(subprocess, "Popen", lambda args, *a, **kw: seen.append(args))
    cmd = warm.SuperExecCommand()
    cmd.Popen(["flower-superexec", "--insecure", "--runtime-api-address", "127.0.0.1:9094"])
    cmd.Popen(["something-else", "-x"])
    assert seen == [[sys.executable, "-m", "launcher.warm", "superexec", "--insecure", "--runtime-api-address",
                     "127.0.0.1:9094"], ["something-else", "-x"]]
    assert cmd.PIPE is subprocess.PIPE
