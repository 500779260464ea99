"""What produced a result: the code (git commit and whether the tree had uncommitted changes, or
the package version outside a checkout), the library versions, the machine, the command line and
the resolved config's hash. Written into every ``summary.json`` (``provenance``)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGES = ("flwr", "torch", "numpy", "scipy")


def _git(app_dir: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(app_dir), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def code(app_dir: Path) -> dict[str, Any]:
    """``{"commit", "dirty"}`` in a git checkout, else ``{"version"}`` of the installed package."""
    commit = _git(app_dir, "rev-parse", "HEAD")
    if commit:
        status = _git(app_dir, "status", "--porcelain", "--untracked-files=no")
        return {"commit": commit, "dirty": bool(status)}
    try:
        return {"version": importlib.metadata.version("corolla")}
    except importlib.metadata.PackageNotFoundError:
        return {"version": "unknown"}


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()}
    gpu = _gpu()
    if gpu:
        out["gpu"] = gpu
    return out


def _gpu() -> str | None:
    """The first GPU's name: from torch when this process has already imported it, else from the
    NVIDIA driver's ``/proc`` entries (importing torch only to ask costs about a second)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        except Exception:  # noqa: BLE001 - a broken driver: no GPU to report
            return None
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None


def collect(app_dir: Path, command: list[str] | None = None) -> dict[str, Any]:
    """Everything but the run's own facts (mode, nodes, config hash), which the server adds."""
    return {"code": code(app_dir), "versions": versions(), "machine": machine(),
            "command": " ".join(command if command is not None else sys.argv)}
