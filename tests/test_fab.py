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


def test_the_shipped_app_tables_are_pyprojects():
    import tomllib

    shipped = tomllib.loads(fab.APP_TOML.read_text())
    ours = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert shipped["tool"]["flwr"]["app"] == ours["tool"]["flwr"]["app"], \
        "launcher/flwr_app.toml differs from pyproject.toml's [tool.flwr.app]: copy it over"
    assert set(shipped) == {"tool"} and set(shipped["tool"]) == {"flwr"}


def test_an_installed_package_gets_an_app_folder_with_its_code_and_presets(tmp_path):
    """A folder laid out like site-packages (the packages, no pyproject.toml): the staged app has a
    pyproject.toml Flower accepts, the code and the presets, and nothing else of the folder."""
    import shutil
    import tomllib

    from corolla.config import preset_names

    site = tmp_path / "site-packages"
    for pkg in fab.PACKAGES:
        shutil.copytree(ROOT / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "other").mkdir()
    (site / "other" / "x.py").write_text("not ours\n")
    staged = fab.stage(site, tmp_path / "app")
    cfg = tomllib.loads((staged / "pyproject.toml").read_text())
    assert cfg["project"]["name"] == "corolla" and cfg["tool"]["flwr"]["app"]["components"]["serverapp"]
    assert sorted(p.stem for p in (staged / "corolla" / "presets").glob("*.toml")) == preset_names()
    assert (staged / "server_app" / "app.py").is_file() and not (staged / "other").exists()
    fab_bytes = build_fab_from_disk(staged)   # Flower validates the pyproject.toml and bundles the folder
    assert len(fab_bytes) > 100_000
