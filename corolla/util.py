"""Small helpers shared by both sides: atomic writes, stable seeds, JSON."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def stable_seed(*parts: Any) -> int:
    """Return a 63-bit seed derived from ``parts`` with SHA-256.

    Python's ``hash()`` is salted per process; this is not, so two processes (two nodes,
    or a run and its resumption) derive the same random streams from the same parts.
    """
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 1


def id_ranges(ids) -> str:
    """``"0-9,12,20-21"`` for the ids (sorted first): a log line or record, not a list of thousands."""
    ids = sorted(ids)
    parts, a = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            parts.append(str(ids[a]) if a == i - 1 else f"{ids[a]}-{ids[i - 1]}")
            a = i
    return ",".join(parts)


def rng(*parts: Any) -> np.random.Generator:
    """A NumPy generator seeded by :func:`stable_seed` of ``parts``."""
    return np.random.default_rng(stable_seed(*parts))


def atomic_write_bytes(path: str | os.PathLike, data: bytes, private: bool = False, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder + rename); a
    ``private`` file is readable by its owner only (0600). ``durable``: fsync the data before the
    rename; without it the caller makes a batch of files durable at once (:func:`sync_files`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if not private:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def atomic_save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray], private: bool = False,
                    durable: bool = True) -> None:
    """Save ``arrays`` as an uncompressed ``.npz`` atomically (``private``: mode 0600; ``durable``:
    as :func:`atomic_write_bytes`)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue(), private, durable)


@functools.lru_cache(maxsize=1)
def _syncfs():
    """Linux's ``syncfs(2)`` (flush one filesystem), or None where the C library has none."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def sync_files(directory: str | os.PathLike, paths) -> None:
    """Make files written with ``durable=False`` in ``directory`` durable, and their renames: one
    ``syncfs`` of the directory's filesystem where the OS has it (one flush for a batch of files:
    943 client states took 7 ms an fsync each, 6.6 s a round, 2026-11-27), else an fsync per
    file and of the directory. Raises ``OSError`` when the data could not be written."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fn = _syncfs()
        if fn is not None:
            if fn(fd) != 0:
                import ctypes

                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            return
        for p in paths:
            f = os.open(p, os.O_RDONLY)
            try:
                os.fsync(f)
            finally:
                os.close(f)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line and fsync (``rounds.jsonl``)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line.rstrip("\n") + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=_json_default)


@functools.lru_cache(maxsize=None)
def import_class(path: str, options: tuple[tuple[str, Any], ...] = (), label: str = ""):
    """The class ``"module:Class"`` names (imported by the caller's request: the method table names
    strategy and client classes without importing them), subclassed with ``options`` as class
    attributes when there are any (cached: one class per path and options)."""
    import importlib

    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return type(f"{cls.__name__}[{label}]", (cls,), dict(options)) if options else cls
