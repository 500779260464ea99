"""The folder ``flwr run`` bundles holds only the FAB's files, and the FAB is the same
(launcher/fab.py)."""
from __future__ import annotations

import os
from pathlib import Path

from flwr.cli.build import build_fab_from_disk

from launcher import fab

ROOT = Path(__file__).resolve().parents[1]


def test_the_staged_checkout_gives_flowers_fab_byte_for_byte(tmp_path):
    staged = fab.stage(ROOT, tmp_path / "app")
    assert staged == tmp_path / "app"
    assert build_fab_from_disk(staged) == build_fab_from_disk(ROOT)
    assert not (staged / ".venv").exists() and not (staged / "tests").exists()
    from corolla.config import preset_names   # the ServerApp resolves its preset from inside the FAB

    assert sorted(p.stem for p in (staged / "corolla" / "presets").glob("*.toml")) == preset_names()


def _app(root: Path, include: str | None) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "m.py").write_text("x = 1\n")
    (root / "pkg" / "notes.txt").write_text("not in the FAB\n")
    (root / "venv" / "lib").mkdir(parents=True)
    (root / "venv" / "lib" / "big.py").write_text("ignored by .gitignore\n")
    (root / "README.md").write_text("# app\n")
    (root / "docs").mkdir()
    (root / "docs" / "README.md").write_text("matched anywhere by 'README.md'\n")
    os.symlink(root / "pkg" / "sub" / "m.py", root / "pkg" / "link.py")
    (root / ".gitignore").write_text("# comment\n/venv/\n*.pyc\n")
    (root / "pkg" / "sub" / "cache.pyc").write_bytes(b"\0")
    inc = f"fab-include = {include}\n" if include else ""
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "app"\nversion = "1.0.0"\ndependencies = []\n\n'
        f'[tool.flwr.app]\npublisher = "corolla"\n{inc}\n'
        '[tool.flwr.app.components]\nserverapp = "pkg.sub.m:x"\nclientapp = "pkg.sub.m:x"\n\n'
        '[tool.flwr.app.config]\n')
    return root


def test_a_small_app_with_ignored_folders_links_and_unanchored_patterns(tmp_path):
    app = _app(tmp_path / "src", '["pkg/**/*.py", "README.md"]')
    staged = fab.stage(app, tmp_path / "app")
    files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert files == [".gitignore", "README.md", "docs/README.md", "pkg/__init__.py", "pkg/sub/m.py",
                     "pyproject.toml"]
    assert build_fab_from_disk(staged) == build_fab_from_disk(app)


def test_without_fab_include_flwr_run_gets_the_app_folder_itself(tmp_path):
    app = _app(tmp_path / "src", None)
    assert fab.stage(app, tmp_path / "app") == app.resolve()
    assert not (tmp_path / "app").exists()
