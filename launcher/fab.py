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
"""
from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

ALWAYS = ("pyproject.toml", ".gitignore")


def _patterns(text: str) -> list[str]:
    """Pattern lines as Flower reads them (``load_gitignore_patterns``): stripped, no blanks or
    comments."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def fab_files(app: Path) -> list[str] | None:
    """The relative paths (POSIX) under ``app`` that ``fab-include`` matches, outside folders that
    ``.gitignore`` excludes; None when the app names no ``fab-include``. Patterns are matched as
    Flower matches them (``pathspec``'s gitwildmatch, ``flwr/cli/utils.py`` ``build_pathspec``),
    without importing Flower's CLI (1.4 s on a busy 2-core machine)."""
    import pathspec

    config = tomllib.loads((app / "pyproject.toml").read_text())
    include = config.get("tool", {}).get("flwr", {}).get("app", {}).get("fab-include")
    if not include:
        return None
    wanted = pathspec.PathSpec.from_lines("gitwildmatch", include)
    gitignore = app / ".gitignore"
    ignored = pathspec.PathSpec.from_lines("gitwildmatch", _patterns(gitignore.read_text()) if gitignore.is_file() else [])
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(app, followlinks=False):
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


def stage(app: Path, dest: Path) -> Path:
    """A folder for ``flwr run`` that yields the same FAB as ``app``: ``dest`` filled with the FAB's
    files, or ``app`` itself when it names no ``fab-include``. ``dest`` must not exist yet."""
    app = Path(app).resolve()
    files = fab_files(app)
    if files is None:
        return app
    dest = Path(dest)
    dest.mkdir(parents=True)
    for rel in sorted(set(files) | {f for f in ALWAYS if (app / f).is_file()}):
        _place(app / rel, dest / rel)
    return dest
