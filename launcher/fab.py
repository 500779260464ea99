"""The app folder ``flwr run`` bundles: only the files that go into the FAB.

``flwr run APP`` builds the app bundle (FAB) by listing **every** file under ``APP``
(``collect_files`` in ``flwr/cli/utils.py`` resolves each path) and only then filtering by
``.gitignore`` and ``[tool.flwr.app] fab-include``. Run from a checkout, ``APP`` is the repository
with its virtual environment, result folders and run folders: tens of thousands of files, 3–5 s of
a 2-core machine before the run is even submitted (``docs/results.md``, "Below Flower's floor").

:func:`stage` gives ``flwr run`` a folder that holds just ``pyproject.toml``, ``.gitignore`` and
the files that ``fab-include`` matches (hard links where the file system allows, else copies),
found by a walk that does not enter folders ``.gitignore`` excludes. Flower then applies its own
rules to that folder unchanged, so the FAB is byte for byte the one ``flwr run`` builds from the
checkout (``tests/test_fab.py`` builds both and compares). Without ``fab-include`` the app folder
is used as it is.

An installed package (``pip install .``, a wheel) has no ``pyproject.toml`` beside its packages:
there :func:`stage` writes the app's ``pyproject.toml`` from the distribution's metadata
(``[project]``) and ``launcher/flwr_app.toml`` (package data: the ``[tool.flwr.app]`` tables of the
repository's ``pyproject.toml``, kept equal by a test) and takes the files ``fab-include`` matches
from the installed packages only (``tests/test_wheel.py`` runs the README job this way).
"""
from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

ALWAYS = ("pyproject.toml", ".gitignore")
PACKAGES = ("corolla", "flower_io", "server_app", "strategies", "client_app", "launcher")   # the app's code
APP_TOML = Path(__file__).with_name("flwr_app.toml")


def _patterns(text: str) -> list[str]:
    """Pattern lines as Flower reads them (``load_gitignore_patterns``): stripped, no blanks or
    comments."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def fab_files(app: Path) -> list[str] | None:
    """The relative paths (POSIX) under ``app`` that ``fab-include`` matches, outside folders that
    ``.gitignore`` excludes; None when the app names no ``fab-include``. Patterns are matched as
    Flower matches them (``pathspec``'s gitwildmatch, ``flwr/cli/utils.py`` ``build_pathspec``),
    without importing Flower's CLI (1.4 s on a busy 2-core machine)."""
    return _matching(app, tomllib.loads((app / "pyproject.toml").read_text()), [app])


def _matching(app: Path, config: dict, tops: list[Path]) -> list[str] | None:
    """The files under the folders ``tops`` (in ``app``) that ``fab-include`` of ``config`` matches."""
    import pathspec

    include = config.get("tool", {}).get("flwr", {}).get("app", {}).get("fab-include")
    if not include:
        return None
    wanted = pathspec.PathSpec.from_lines("gitwildmatch", include)
    gitignore = app / ".gitignore"
    ignored = pathspec.PathSpec.from_lines("gitwildmatch", _patterns(gitignore.read_text()) if gitignore.is_file() else [])
    out: list[str] = []
    for dirpath, dirnames, filenames in (w for top in tops for w in os.walk(top, followlinks=False)):
        rel = Path(dirpath).relative_to(app).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirnames[:] = sorted(d for d in dirnames if not ignored.match_file(f"{prefix}{d}/")
                             and not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            path = prefix + name
            if wanted.match_file(path) and not os.path.islink(os.path.join(dirpath, name)):
                out.append(path)
    return out


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:   # another file system, or links not allowed: a copy
        shutil.copy2(src, dst)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


def _toml(tables: dict[str, dict]) -> str:
    """``{"a.b": {key: scalar or list}}`` as TOML tables (what the app's pyproject.toml needs)."""
    return "\n".join(f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in t.items())
                     for name, t in tables.items())


def _installed_extras(dist) -> dict[str, str]:
    """README.md and LICENSE of the installed distribution (its long description and licence file),
    where it has them: the app's ``fab-include`` names both."""
    out = {}
    readme = dist.metadata.get_payload() if hasattr(dist.metadata, "get_payload") else None
    if readme:
        out["README.md"] = readme
    for name in ("licenses/LICENSE", "LICENSE"):
        text = dist.read_text(name)
        if text:
            out["LICENSE"] = text
            break
    return out


def installed_pyproject(dist_name: str = "corolla") -> tuple[str, dict[str, str]]:
    """The app's ``pyproject.toml`` for an installed package and the extra files it bundles:
    ``[project]`` from the distribution's metadata, ``[tool.flwr.app]`` from
    ``launcher/flwr_app.toml``; a ``fab-include`` pattern of a file the installation lacks (README.md,
    LICENSE) is left out, since Flower refuses a pattern that matches nothing."""
    from importlib import metadata

    dist = metadata.distribution(dist_name)
    md = dist.metadata
    project = {"name": md["Name"], "version": md["Version"], "description": md.get("Summary") or "",
               "license": md.get("License-Expression") or md.get("License") or "",
               "dependencies": [r for r in (md.get_all("Requires-Dist") or []) if "extra ==" not in r]}
    extras = _installed_extras(dist)
    app = dict(tomllib.loads(APP_TOML.read_text())["tool"]["flwr"]["app"])
    app["fab-include"] = [p for p in app.get("fab-include", [])
                          if p.lstrip("/") not in ("README.md", "LICENSE") or p.lstrip("/") in extras]
    tables = {"project": {k: v for k, v in project.items() if v or k == "dependencies"},
              "tool.flwr.app": {k: v for k, v in app.items() if not isinstance(v, dict)}}
    tables.update({f"tool.flwr.app.{k}": v for k, v in app.items() if isinstance(v, dict)})
    return _toml(tables), extras


def _stage_installed(app: Path, dest: Path) -> Path:
    """``stage`` for an installed package: ``app`` is the folder that holds its packages."""
    text, extras = installed_pyproject()
    files = _matching(app, tomllib.loads(text), [app / p for p in PACKAGES if (app / p).is_dir()])
    dest.mkdir(parents=True)
    (dest / "pyproject.toml").write_text(text)
    for name, body in extras.items():
        (dest / name).write_text(body)
    for rel in sorted(files or []):
        _place(app / rel, dest / rel)
    return dest


def stage(app: Path, dest: Path) -> Path:
    """A folder for ``flwr run`` that yields the same FAB as ``app``: ``dest`` filled with the FAB's
    files, or ``app`` itself when it names no ``fab-include``. ``dest`` must not exist yet. ``app``
    without a ``pyproject.toml`` is an installed package's folder (module docstring)."""
    app = Path(app).resolve()
    if not (app / "pyproject.toml").is_file():
        return _stage_installed(app, Path(dest))
    files = fab_files(app)
    if files is None:
        return app
    dest = Path(dest)
    dest.mkdir(parents=True)
    for rel in sorted(set(files) | {f for f in ALWAYS if (app / f).is_file()}):
        _place(app / rel, dest / rel)
    return dest
