"""The package stands on its own: a wheel built from this checkout, installed into a fresh virtual
environment outside it, lists the presets, runs the README job (in process, and through a real
SuperLink and SuperNode) and writes the report, from a folder that is not the checkout.

How the fresh environment gets the dependencies without downloading them: it is made with
``python -m venv --without-pip`` (no ``--system-site-packages``), and one ``.pth`` file in its
site-packages names the site-packages of the interpreter running this test (Flower, torch, numpy,
...: ``pip install torch==2.13.0`` plus the project's dependencies would fetch gigabytes, and this
machine only reaches PyPI). A ``.pth`` line only appends that folder to ``sys.path`` — the ``.pth``
files inside it are not run — so an editable install of the checkout there (``pip install -e .``,
``__editable__.corolla*.pth``) stays inactive, and the fresh site-packages comes first: the test
checks that ``corolla``, ``launcher``, ``server_app``, ``client_app``, ``strategies`` and
``flower_io`` are imported from the installed wheel and that no folder of the checkout is on
``sys.path``. The wheel itself is installed with ``pip --python FRESH/bin/python install --no-deps
--no-index``. Flower's commands (``flwr``, ``flower-superlink``, ...) are written into the fresh
``bin/`` from Flower's entry points, as pip writes them, so the SuperLink, SuperNodes, ServerApp and
ClientApps of the local run are the fresh interpreter too; the running environment's ``bin/`` is not
on their PATH.

The wheel is built from a copy of the checkout's files (``git ls-files -co --exclude-standard``:
what is committed or would be) with ``pip wheel --no-deps --no-build-isolation`` (setuptools of the
running environment; nothing is downloaded), so the build writes nothing into the checkout.
Takes about three minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("corolla", "launcher", "server_app", "client_app", "strategies", "flower_io")
pytestmark = pytest.mark.e2e


def _copy_checkout(dest: Path) -> None:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, timeout=60)
    if listed.returncode != 0:   # not a git checkout (an unpacked archive): everything but the usual clutter
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "build", "dist",
                                                                  "*.egg-info", "__pycache__"))
        return
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _flower_commands(bin_dir: Path, python: Path) -> None:
    """Flower's console scripts in the fresh ``bin/``, running the fresh interpreter."""
    for ep in metadata.distribution("flwr").entry_points:
        if ep.group != "console_scripts":
            continue
        mod, _, attr = ep.value.partition(":")
        script = bin_dir / ep.name
        script.write_text(f"#!{python}\nimport sys\nfrom {mod} import {attr.split('.')[0]}\n"
                          f"sys.exit({attr}())\n")
        script.chmod(0o755)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _show(p: subprocess.CompletedProcess) -> str:
    return f"rc {p.returncode}\nstdout: {p.stdout[-3000:]}\nstderr: {p.stderr[-3000:]}"


def test_a_wheel_installed_elsewhere_runs_the_readme_job_and_the_report(tmp_path, data_dir):
    from corolla.config import list_presets

    expected = sorted(p.name for p in list_presets())   # the checkout's presets
    src, wheels, venv, work = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    _copy_checkout(src)
    build = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                  str(src)], tmp_path, dict(os.environ))
    assert build.returncode == 0, _show(build)
    (wheel,) = wheels.glob("corolla-*.whl")

    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, dict(os.environ)).returncode == 0
    py = venv / "bin" / "python"
    fresh_site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           tmp_path, dict(os.environ)).stdout.strip())
    (fresh_site / "_corolla_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    inst = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                 str(wheel)], tmp_path, dict(os.environ))
    assert inst.returncode == 0, _show(inst)
    _flower_commands(venv / "bin", py)

    running_bin = str(Path(sys.executable).parent)
    path = [str(venv / "bin")] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != running_bin]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=os.pathsep.join(path), VIRTUAL_ENV=str(venv), COROLLA_OFFLINE="1")
    corolla = str(venv / "bin" / "corolla")
    assert Path(corolla).is_file(), "the wheel installed no 'corolla' command"

    # the code comes from the installed wheel, and no folder of the checkout is importable
    probe = _run([str(py), "-c", "import json, sys, importlib; print(json.dumps({'sys.path': sys.path, **{m: "
                  "importlib.import_module(m).__file__ for m in %r}}))" % (PACKAGES,)], work, env)
    assert probe.returncode == 0, _show(probe)
    where = json.loads(probe.stdout)
    for m in PACKAGES:
        assert Path(where[m]).is_relative_to(fresh_site), f"{m} imported from {where[m]}, not the installed wheel"
    deps = [Path(d).resolve() for d in site.getsitepackages()]   # the .pth line (a venv inside the checkout)
    assert not [p for p in where["sys.path"] if p and Path(p).resolve().is_relative_to(ROOT)
                and Path(p).resolve() not in deps], where["sys.path"]

    # corolla presets: every preset of the checkout, from the installed package
    p = _run([corolla, "presets"], work, env)
    listed = sorted(line.split()[0] for line in p.stdout.splitlines() if line.strip())
    assert p.returncode == 0 and listed == expected, f"presets missing from the installed package\n{_show(p)}"

    # the README's smoke job, in process
    run = work / "run-inproc"
    p = _run([corolla, "run", "--preset", "fedavg-mf-ml100k", "--mode", "inproc", "--set", "num-rounds=2",
              "--data-dir", data_dir, "--out", str(run), "--quiet"], work, env)
    assert p.returncode == 0, _show(p)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["metrics"], summary

    # the report: without a results folder the flag is named; with one (a copy of the checkout's
    # results, nothing else of docs/) every row and the run's page
    p = _run([corolla, "report"], work, env)
    assert p.returncode == 2 and "--results" in p.stderr, _show(p)
    shutil.copytree(ROOT / "docs" / "results", work / "results")
    p = _run([corolla, "report", str(run), "--results", "results", "--out", "site"], work, env)
    assert p.returncode == 0, _show(p)
    assert len(json.loads((work / "site" / "rows.json").read_text())) == 303
    assert (work / "site" / "runs" / "run-inproc.html").is_file() and (work / "site" / "index.html").is_file()

    # the README's main job through a real SuperLink and SuperNode: the FAB comes from the installed package
    run = work / "run-local"
    p = _run([corolla, "run", "--preset", "fedavg-mf-ml100k", "--nodes", "1", "--set", "num-rounds=1",
              "--data-dir", data_dir, "--out", str(run), "--quiet"], work, env)
    assert p.returncode == 0, _show(p)
    assert json.loads((run / "summary.json").read_text())["rounds_completed"] == 1
