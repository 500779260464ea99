"""Whether Corolla's installed top-level packages are its own.

Corolla installs six top-level packages: ``corolla`` and the app layers ``flower_io``,
``server_app``, ``client_app``, ``strategies`` and ``launcher`` (the repository's layout, which a
Flower App Bundle loads by these names: ``docs/architecture.md``, "Installed names"). Other Flower
apps use some of the same generic names; pip would let a second distribution overwrite or mix
files into them without a word. :func:`collisions` finds it: another installed distribution that
records files under one of these names, or a file of Corolla's own record whose content changed.
``corolla run`` refuses to start on a collision, with one line naming the distribution and the fix.
"""
from __future__ import annotations

import base64
import hashlib
from importlib import metadata

TOP_LEVEL = ("corolla", "flower_io", "server_app", "client_app", "strategies", "launcher")


def _hash_ok(f) -> bool:
    if f.hash is None:
        return True
    try:
        data = f.locate().read_bytes()
    except OSError:
        return False
    digest = hashlib.new(f.hash.mode, data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == f.hash.value


def collisions(dist: str = "corolla", top_level: tuple[str, ...] = TOP_LEVEL) -> list[str]:
    """One line per problem: another distribution with files under Corolla's top-level names, or a
    recorded file of Corolla's that is missing or changed. Empty for a checkout (an editable install
    records no module files) and when Corolla is not installed."""
    try:
        own = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return []
    out = []
    for d in metadata.distributions():
        name = d.metadata.get("Name") or "?"
        if name.lower() == dist.lower():
            continue
        hit = sorted({f.parts[0] for f in (d.files or []) if len(f.parts) > 1 and f.parts[0] in top_level})
        if hit:
            out.append(f"distribution '{name}' also installs the top-level package(s) {', '.join(hit)}")
    for f in own.files or []:
        if f.parts and f.parts[0] in top_level and f.suffix == ".py" and not _hash_ok(f):
            out.append(f"{'/'.join(f.parts)} is not the file corolla installed (overwritten or removed)")
    return out


def check(dist: str = "corolla") -> None:
    """Raise ``ConfigError`` (one line) when :func:`collisions` finds any."""
    from corolla.keys import ConfigError

    found = collisions(dist)
    if found:
        raise ConfigError(f"Corolla's installed packages collide with another's: {found[0]}"
                          + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
                          + "; install Corolla into its own virtual environment")
