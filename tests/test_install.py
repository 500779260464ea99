"""The installed top-level names are Corolla's own: another distribution that installs a package
named like one of them (``strategies``, ``server_app``, ...), or a changed file of Corolla's record,
is found and ``corolla run`` refuses with one line (``corolla/install.py``)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from corolla import install


def _fake_site(tmp: Path, name: str, files: dict[str, str]) -> Path:
    """A site folder holding distribution ``name`` with ``files`` and their RECORD."""
    import base64
    import hashlib
    site = tmp / "site"
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = []
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={h},{len(text)}")
    (info / "RECORD").write_text("\n".join(rows + [f"{info.name}/RECORD,,"]) + "\n")
    return site


def test_another_distribution_with_a_top_level_name_is_found(tmp_path):
    site = _fake_site(tmp_path, "corolla", {"strategies/__init__.py": "", "strategies/base.py": "x = 1\n"})
    _fake_site(tmp_path / "other", "someapp", {"strategies/__init__.py": "# someone else's\n"})
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from corolla import install\n"
            "print('\\n'.join(install.collisions(top_level=('strategies',))))")
    out = subprocess.run([sys.executable, "-c", code, str(site), str(tmp_path / "other" / "site")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert "distribution 'someapp' also installs the top-level package(s) strategies" in out.stdout, out.stderr
    (site / "strategies" / "base.py").write_text("x = 2\n")   # overwritten by someone
    out = subprocess.run([sys.executable, "-c", code, str(site), str(tmp_path / "other" / "site")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert "strategies/base.py is not the file corolla installed" in out.stdout, out.stderr


def test_a_checkout_has_no_collision():
    assert install.collisions() == []
