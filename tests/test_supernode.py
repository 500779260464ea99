"""``corolla supernode``: Flower's SuperNode with its two fixed waits made settable (launcher/supernode.py).
Flower's internals it relies on are pinned per line in tests/test_compat.py.

The end-to-end side is covered elsewhere: ``corolla run --mode local`` starts these SuperNodes
(tests/test_e2e.py), and stock ``flower-supernode`` keeps working against the same app
(``test_submit_to_a_running_superlink_with_auto_nodes``, tests/test_deployment.py)."""
from __future__ import annotations

import time

import pytest

from launcher import supernode


def test_install_waits_goes_through_the_compat_layer(monkeypatch):
    """The per-line pins of Flower's waits are tests/test_compat.py; here: the wrapper hands its
    flags to the compat layer unchanged."""
    from flower_io import compat
    seen = []
    monkeypatch.setattr(compat, "install_waits", lambda idle, reply: seen.append((idle, reply)) or True)
    assert supernode.install_waits(0.05, 0.02) and seen == [(0.05, 0.02)]


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


def test_supernode_hands_its_fork_server_pipe_to_the_superexec(monkeypatch):
    """With a fork server started by the SuperNode, the SuperExec inherits the write end of its
    task pipe (pass_fds) and learns its number from $COROLLA_FORK_SERVER_FD."""
    import subprocess
    import sys

    from launcher import warm
    seen = []
    monkeypatch.setattr(subprocess, "Popen", lambda args, *a, **kw: seen.append((args, kw)))

    class Server:
        class stdin:   # noqa: N801 - stands in for a pipe
            @staticmethod
            def fileno():
                return 17

        @staticmethod
        def poll():
            return None

    cmd = warm.SuperExecCommand(Server())
    cmd.Popen(["flower-superexec", "--insecure"])
    args, kw = seen[-1]
    assert args == [sys.executable, "-m", "launcher.warm", "superexec", "--insecure"]
    assert kw["pass_fds"] == (17,) and kw["env"][warm.FD_ENV] == "17"
    cmd.Popen(["something-else"])
    assert "pass_fds" not in seen[-1][1]


def test_fork_server_serves_a_waiting_task_before_its_preload_is_done(tmp_path):
    """A task that is already waiting is forked before the next preload import (the child then
    lacks that module); a task sent once the preload is done finds it imported."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    (tmp_path / "slowmod.py").write_text(
        "import time, pathlib\ntime.sleep(2)\n"
        f"pathlib.Path({str(tmp_path / 'loaded')!r}).write_text('yes')\n")
    code = ("import sys\nfrom launcher import warm\n"
            "def entry(argv):\n"
            "    open(argv[0], 'w').write(str('slowmod' in sys.modules))\n"
            "warm.serve(preload=('slowmod',), entry=entry)\n")
    root = Path(__file__).resolve().parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{root}"}
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=root, env=env)
    first, second = tmp_path / "first", tmp_path / "second"
    p.stdin.write(json.dumps({"argv": [str(first)], "quiet": False}) + "\n")
    p.stdin.flush()
    deadline = time.monotonic() + 30
    while not (first.exists() and first.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.read_text() == "False"                 # forked before the slow import
    assert not (tmp_path / "loaded").exists() or first.stat().st_mtime <= (tmp_path / "loaded").stat().st_mtime
    while not (tmp_path / "loaded").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    p.stdin.write(json.dumps({"argv": [str(second)], "quiet": False}) + "\n")
    p.stdin.close()
    assert p.wait(30) == 0
    while not (second.exists() and second.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert second.read_text() == "True"                 # preloaded by the server, inherited by the fork


def test_fork_server_forked_from_the_supernode_keeps_its_imports_and_ends_with_its_pipe(tmp_path):
    """fork_server imports what it is given, forks the server from this (single-threaded) process,
    so a task's child already has those modules without importing them, and the server ends once
    the task pipe's last writer closes it."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    out = tmp_path / "child"
    code = ("import json, os, sys\nfrom launcher import warm\n"
            "def entry(argv):\n"
            "    open(argv[0], 'w').write(json.dumps([os.getppid(), 'colorsys' in sys.modules]))\n"
            "warm.serve.__defaults__ = (('json',), None, entry)\n"
            "s = warm.fork_server(('colorsys',))\n"
            "assert isinstance(s, warm.ForkedServer) and s.poll() is None\n"
            f"s.stdin.write(json.dumps({{'argv': [{str(out)!r}], 'quiet': False}}) + '\\n'); s.stdin.flush()\n"
            "import time; t = time.monotonic()\n"
            f"while not (os.path.exists({str(out)!r}) and open({str(out)!r}).read()) and time.monotonic() < t + 30: time.sleep(0.02)\n"
            "s.stdin.close()   # only once the child has written: closing ends the server, and a later child would see init\n"
            "while s.poll() is None and time.monotonic() < t + 30: time.sleep(0.02)\n"
            "print(json.dumps([s.pid, s.returncode]))\n")
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert p.returncode == 0, p.stderr
    server_pid, rc = json.loads(p.stdout.strip().splitlines()[-1])
    assert rc == 0
    deadline = time.monotonic() + 20
    while not (out.exists() and out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    parent, had = json.loads(out.read_text())
    assert parent == server_pid and had is True   # forked from the forked server, with its imports


def test_fork_server_starts_a_fresh_server_when_threads_run(monkeypatch):
    import threading

    from launcher import warm
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    monkeypatch.setattr(warm, "start_server", lambda: "fresh")
    assert warm.fork_server(("json",)) == "fresh"


def test_pull_backoff_flag_is_split_and_checked():
    ours, rest = supernode.split_args(["--pull-backoff", "0.1", "--insecure"])
    assert ours.pull_backoff == 0.1 and rest == ["--insecure"]
    assert supernode.split_args([])[0].pull_backoff == 0.02
    with pytest.raises(SystemExit):
        supernode.split_args(["--pull-backoff", "never"])


@pytest.mark.parametrize("extra_nodes, nice", [(0, 0), (1, 10)])
def test_local_supernodes_share_the_commands_session_and_yield_when_crowded(tmp_path, extra_nodes, nice):
    """corolla run's SuperNodes: own process group (stopped as one), this command's session (one
    CPU share with scheduler autogroups, not one each), and nice 10 once they outnumber the cores,
    so that the SuperLink and the ServerApp they wait for keep their CPU."""
    import os

    from launcher.cli import NODE_NICE, Cluster
    cores = os.cpu_count() or 1
    c = Cluster(tmp_path, "local", cores + extra_nodes, None)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    p = c._spawn("n", ["sleep", "30"], node=True)
    link = c._spawn("l", ["sleep", "30"])
    try:
        assert os.getpgid(p.pid) == p.pid and os.getsid(p.pid) == os.getsid(0)
        assert os.getpriority(os.PRIO_PROCESS, p.pid) == min(19, base + (NODE_NICE if nice else 0))
        assert os.getsid(link.pid) == link.pid and os.getpriority(os.PRIO_PROCESS, link.pid) == base
    finally:
        c.stop()


def test_fleet_probe_reads_the_route_with_a_get_that_leaves_no_error_in_the_superlinks_log(tmp_path):
    """``corolla supernode`` asks the SuperLink, before Flower's SuperNode starts, which Fleet
    transport it speaks. On an HTTP line the register route answers the probe's GET with 405 (the
    route is there, POST only) and the SuperLink logs no error for it (an empty POST logged
    ``ApiError:1002 Unsupported Content-Type`` twice per node start); an HTTP server without the
    route answers 404, which names the mismatch."""
    import http.server
    import os
    import subprocess
    import threading

    from flower_io import compat
    from launcher.cli import flower_bin, wait_port
    from launcher.ports import free_port

    if compat.fleet_transport() != "http":
        pytest.skip("the HTTP Fleet API is Flower 1.40+'s; this line speaks gRPC")
    port = free_port()
    log = tmp_path / "superlink.log"
    link = subprocess.Popen([flower_bin("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                             "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, env={**os.environ, "FLWR_HOME": str(tmp_path)})
    try:
        wait_port(port, link)
        assert supernode._probe("127.0.0.1", port, False, None, 5.0) == ("http", 405)
        assert supernode.fleet_mismatch(["--insecure", "--superlink", f"127.0.0.1:{port}"]) is None
        time.sleep(1.0)
        text = log.read_text()
        assert "ApiError" not in text and "ERROR" not in text, text[-2000:]
    finally:
        link.terminate()
        link.wait(30)

    class NoFleet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *a):
            pass
    srv = http.server.HTTPServer(("127.0.0.1", 0), NoFleet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        addr = f"127.0.0.1:{srv.server_address[1]}"
        assert supernode._probe("127.0.0.1", srv.server_address[1], False, None, 5.0) == ("http", 404)
        msg = supernode.fleet_mismatch(["--insecure", "--superlink", addr])
        assert msg and msg.startswith(f"--superlink {addr} has no HTTP Fleet API (404"), msg
    finally:
        srv.shutdown()
