"""Flat messages (``corolla.messages``: record name -> dict of scalars or of numpy arrays) to
Flower's ``RecordDict`` and back."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict


def to_records(flat: dict[str, dict[str, Any]]) -> RecordDict:
    """A dict of arrays becomes an ``ArrayRecord`` (``.npy`` per array, Flower's ``Array``), a dict
    of scalars a ``ConfigRecord``."""
    rd = RecordDict()
    for name, rec in flat.items():
        if rec and all(isinstance(v, np.ndarray) for v in rec.values()):
            rd[name] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in rec.items()})
        else:
            rd[name] = ConfigRecord(dict(rec))
    return rd


class TooLarge(ValueError):
    """A message whose arrays exceed the bound its receiver expects."""


def check_size(rd: RecordDict, max_bytes: int | tuple[int, int] | None) -> None:
    """Raise :class:`TooLarge` when the arrays of ``rd`` hold more than ``max_bytes`` serialised
    bytes (a pair ``(arrays, text)`` also bounds the bytes of its text and scalar values): counted
    from the bytes Flower already holds, before any array is decoded, so that a hostile reply
    costs no allocation beyond what arrived."""
    if max_bytes is None:
        return
    arrays, text = max_bytes if isinstance(max_bytes, tuple) else (max_bytes, None)
    n = record_bytes(rd)
    if n > arrays:
        raise TooLarge(f"reply carries {n} bytes of arrays, at most {arrays} expected")
    if text is not None:
        t = record_text_bytes(rd)
        if t > text:
            raise TooLarge(f"reply carries {t} bytes of text, at most {text} expected")


def from_records(rd: RecordDict, max_bytes: int | tuple[int, int] | None = None) -> dict[str, dict[str, Any]]:
    """The flat message of ``rd`` (:class:`TooLarge` above ``max_bytes`` bytes of arrays)."""
    check_size(rd, max_bytes)
    out: dict[str, dict[str, Any]] = {}
    for name, rec in rd.items():
        if isinstance(rec, ArrayRecord):
            out[name] = {k: v.numpy() for k, v in rec.items()}
        else:
            out[name] = dict(rec)
    return out


def record_text_bytes(rd: RecordDict) -> int:
    """Bytes of every text, bytes and scalar value in a message's config and metric records."""
    def size(v) -> int:
        if isinstance(v, (str, bytes)):
            return len(v)
        if isinstance(v, list):
            return sum(size(x) for x in v)
        return 8
    return sum(len(k) + size(v) for rec in rd.values() if not isinstance(rec, ArrayRecord) for k, v in rec.items())


def record_bytes(rd: RecordDict) -> int:
    """Bytes of every array a message's records carry (serialised ``.npy``, header included)."""
    return sum(len(a.data) for rec in rd.values() if isinstance(rec, ArrayRecord) for a in rec.values())
