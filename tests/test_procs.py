"""Every process a run starts ends with it (launcher/procs.py, ``Cluster.stop``), whatever
session or process group it put itself in and whether or not its parent is still there: the
shapes Flower's processes take (the SuperLink's SuperExec and ServerApp in a session of their
own; a ServerApp that ignores the signal its parent monitor sends)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from launcher import procs

ROOT = Path(__file__).resolve().parents[1]

# a "SuperLink" that starts a "ServerApp" in a new session; the ServerApp ignores SIGTERM and SIGINT
# and starts a grandchild of its own that drops FLWR_HOME from its environment (found only by its
# parent chain); the SuperLink exits on SIGTERM at once, leaving them orphans
LINK = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    app = '''
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = {k: v for k, v in os.environ.items() if k != "FLWR_HOME"}
    g = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"], env=env)
    open(sys.argv[1], "w").write(f"{os.getpid()} {g.pid}")
    time.sleep(300)
    '''
    subprocess.Popen([sys.executable, "-c", app, sys.argv[1]], start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    time.sleep(300)
""")

SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from launcher.cli import Cluster
    from launcher import procs
    out = Path(sys.argv[1])
    c = Cluster(out, "local", 1, None)
    c.subreaper = procs.become_subreaper() and sys.argv[3] == "subreaper"   # as Cluster.start() does
    c._spawn("superlink", [sys.executable, "-c", sys.argv[2], str(out / "app.pids")])
    c._spawn("supernode0", [sys.executable, "-c", "import time; time.sleep(300)"], node=True)
    while not (out / "app.pids").is_file() or not (out / "app.pids").read_text():
        time.sleep(0.05)
    t0 = time.monotonic()
    c.stop()
    print(json.dumps({"stop_s": time.monotonic() - t0}))
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _stop_tree(tmp_path, how):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), LINK, how], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stdout + p.stderr
    app, grandchild = map(int, (tmp_path / "app.pids").read_text().split())
    return app, grandchild, json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_stop_ends_orphans_in_other_sessions_that_ignore_sigterm(tmp_path):
    app, grandchild, info, _ = _stop_tree(tmp_path, "subreaper")
    try:
        assert not _alive(app) and not _alive(grandchild)
        assert info["stop_s"] < 30
    finally:
        for pid in (app, grandchild):
            if _alive(pid):
                os.kill(pid, 9)


def test_without_the_parent_chain_flwr_home_still_finds_the_serverapp(tmp_path):
    """Not a subreaper (e.g. an old kernel): the orphaned ServerApp is found by its FLWR_HOME; its
    grandchild without FLWR_HOME is found while the ServerApp is still its parent."""
    app, grandchild, _, err = _stop_tree(tmp_path, "plain")
    try:
        assert not _alive(app) and not _alive(grandchild), err
    finally:
        for pid in (app, grandchild):
            if _alive(pid):
                os.kill(pid, 9)


def test_run_processes_are_found_by_flwr_home_and_parent_chain(tmp_path):
    home = tmp_path / "flwr"
    env = dict(os.environ, FLWR_HOME=str(home))
    a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])   # no FLWR_HOME: a root
    c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])   # neither
    try:
        time.sleep(0.3)
        found = {q.pid for q in procs.run_processes(home, [b.pid])}
        assert a.pid in found and b.pid in found and c.pid not in found and os.getpid() not in found
        assert procs.end_run_processes(home, [b.pid], grace=1.0) == []
        assert a.wait(10) is not None and b.wait(10) is not None and c.poll() is None
    finally:
        for q in (a, b, c):
            q.kill()
            q.wait()


def test_a_process_with_the_runs_flwr_home_but_not_its_marker_is_left_alone(tmp_path):
    """A user's shell or notebook that exported the run's FLWR_HOME (to call ``flwr ls``) is not the
    run's: with the launch's marker, only carriers of both are ended; never this process's ancestors."""
    home = tmp_path / "flwr"
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env=dict(os.environ, FLWR_HOME=str(home), **{procs.MARKER: "run-1"}), start_new_session=True)
    users = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, FLWR_HOME=str(home)), start_new_session=True)
    try:
        time.sleep(0.3)
        found = {q.pid for q in procs.run_processes(home, marker="run-1")}
        assert mine.pid in found and users.pid not in found
        assert not ({os.getpid(), os.getppid()} & found)
        assert procs.end_run_processes(home, grace=1.0, marker="run-1") == []
        assert mine.wait(10) is not None and users.poll() is None
    finally:
        for q in (mine, users):
            q.kill()
            q.wait()


def test_this_processs_ancestors_are_never_the_runs(tmp_path, monkeypatch):
    """``corolla run`` started from a shell that carries the run's FLWR_HOME (a resume from the
    shell of the hint it printed) does not end that shell."""
    home = tmp_path / "flwr"
    table = procs.processes()
    me = table[os.getpid()]
    parent = table.get(me.ppid)
    if parent is None:
        import pytest
        pytest.skip("this process's parent is not visible in /proc")
    parent.env_home = str(home)
    monkeypatch.setattr(procs, "processes", lambda: table)
    assert me.ppid not in {q.pid for q in procs.run_processes(home)}


# a "SuperLink" whose "ServerApp" (in a session of its own) ends by itself and is never waited for:
# a zombie the SuperLink leaves behind, adopted by the launcher (a subreaper) when the SuperLink ends
LINK_ZOMBIE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    a = subprocess.Popen([sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid()))",
                          sys.argv[1]], start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    time.sleep(300)
""")

SCRIPT_ZOMBIE = SCRIPT.replace(
    'print(json.dumps({"stop_s": time.monotonic() - t0}))',
    'me = str(os.getpid())\n'
    'z = [d.name for d in Path("/proc").glob("[0-9]*") if (d / "stat").is_file()\n'
    '     and (d / "stat").read_text().rsplit(")", 1)[1].split()[:2] == ["Z", me]]\n'
    'print(json.dumps({"stop_s": time.monotonic() - t0, "zombies": z}))').replace("import json, sys, time",
                                                                                  "import json, os, sys, time")


def test_stop_reaps_the_children_that_ended_on_their_own(tmp_path):
    """A process of the run that ended by itself and was adopted by the launcher is reaped by
    ``stop``: left a zombie, it would pass to PID 1 when the launcher exits, and an init that does
    not reap (a container's or a micro-VM's) keeps it for good."""
    p = subprocess.run([sys.executable, "-c", SCRIPT_ZOMBIE, str(tmp_path), LINK_ZOMBIE, "subreaper"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stdout + p.stderr
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert info["zombies"] == [], info
