"""Payload encoding shared by both sides: packing per-client arrays into stacks, their byte
counts and their validation. The message layout itself is ``corolla.messages``.

**Packing.** Flower 1.39 moves every array of a message as an object of its own (one RPC per
object at every hop), so a node's reply with one record per logical client costs thousands of
RPCs. The arrays of a node's logical clients are therefore stacked: clients whose arrays have the
same keys, dtypes and shapes (but for the first dimension) form groups ``g`` of at most 8 MB, whose
``g<g>/<key>`` holds their arrays along a new first axis (in client-id order), or, where the first
dimensions differ (the rows each client trained), concatenated along it with the lengths in
``g<g>/<key>#len``, and ``g<g>/cids`` their ids. The server unpacks them into the
same per-client payloads before validation: what crosses the network is each client's payload,
nothing summed or mixed.

**Bytes** are counted per logical client as the serialised ``.npy`` size of each of its arrays
(data plus header, :func:`npy_size`), as if it were sent alone, and shared ``global`` arrays once
per message; configs and metrics are not counted.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np


PACK_MAX_BYTES = 8 << 20   # a stack holds at most this many bytes of client arrays (or one client)


def pack(per_client: dict[int, dict[str, np.ndarray]], max_bytes: int = PACK_MAX_BYTES) -> dict[str, np.ndarray]:
    """Stack the arrays of several logical clients (see *Packing* above); clients without arrays
    are left out. A group's stack holds at most ``max_bytes`` (at least one client): small
    payloads are merged, large ones (FedCIA's M × M matrices) stay one client per stack, which
    Flower moves and frees as it goes instead of as one huge array. Arrays whose first dimension
    differs between clients (rows a client trained) are concatenated along it instead, with
    their lengths in ``g<g>/<key>#len``."""
    groups: dict[tuple, list[int]] = {}
    for cid in sorted(per_client):
        arrays = per_client[cid]
        if arrays:
            sig = tuple((k, tuple(np.shape(a)[1:]) if np.ndim(a) else None, np.asarray(a).dtype.str)
                        for k, a in sorted(arrays.items()))
            groups.setdefault(sig, []).append(int(cid))
    out: dict[str, np.ndarray] = {}
    g = 0
    for sig, cids in groups.items():
        for k, _, _ in sig:
            if "/" in k or "#" in k:
                raise ValueError(f"array name {k!r}: '/' and '#' are reserved by the packing")
        sizes = [sum(np.asarray(per_client[c][k]).nbytes for k, _, _ in sig) for c in cids]
        a = 0
        while a < len(cids):
            b, total = a + 1, sizes[a]
            while b < len(cids) and total + sizes[b] <= max_bytes:
                total += sizes[b]
                b += 1
            part = cids[a:b]
            out[f"g{g}/cids"] = np.asarray(part, np.int64)
            for k, _, _ in sig:
                arrs = [np.asarray(per_client[c][k]) for c in part]
                if len(arrs) == 1:   # one client's (large) array: a view with the stack axis, not a copy
                    out[f"g{g}/{k}"] = arrs[0][np.newaxis]
                elif all(x.shape == arrs[0].shape for x in arrs):
                    out[f"g{g}/{k}"] = np.stack(arrs)
                else:
                    out[f"g{g}/{k}"] = np.concatenate(arrs)
                    out[f"g{g}/{k}#len"] = np.asarray([len(x) for x in arrs], np.int64)
            g += 1
            a = b
    return out


def unpack(arrays: dict[str, np.ndarray]) -> dict[int, dict[str, np.ndarray]]:
    """The per-client arrays of :func:`pack`'s output; raises :class:`PayloadError` if malformed."""
    groups: dict[str, dict[str, np.ndarray]] = {}
    for name, a in arrays.items():
        g, sep, key = name.partition("/")
        if not sep or not key:
            raise PayloadError(f"packed record: unexpected array name {name!r}")
        groups.setdefault(g, {})[key] = a
    out: dict[int, dict[str, np.ndarray]] = {}
    for g, d in groups.items():
        cids = d.pop("cids", None)
        if cids is None or not isinstance(cids, np.ndarray) or cids.ndim != 1 or cids.dtype.kind not in "iu":
            raise PayloadError(f"packed record: group {g!r} has no integer client ids")
        lens = {k[:-4]: d.pop(k) for k in [k for k in d if k.endswith("#len")]}
        split: dict[str, list[np.ndarray]] = {}
        for k, n in lens.items():
            v = d.get(k)
            if (not isinstance(n, np.ndarray) or n.ndim != 1 or n.dtype.kind not in "iu" or len(n) != len(cids)
                    or (n < 0).any() or not isinstance(v, np.ndarray) or v.ndim < 1 or int(n.sum()) != len(v)):
                raise PayloadError(f"packed record: '{g}/{k}#len' does not split '{g}/{k}' into {len(cids)} arrays")
            split[k] = np.split(v, np.cumsum(n)[:-1])
        for k, v in d.items():
            if k in split:
                continue
            if not isinstance(v, np.ndarray) or v.ndim < 1 or len(v) != len(cids):
                raise PayloadError(f"packed record: '{g}/{k}' holds {len(v) if getattr(v, 'ndim', 0) else 0} "
                                   f"arrays for {len(cids)} clients")
        for j, c in enumerate(cids.tolist()):
            if int(c) in out:
                raise PayloadError(f"packed record: client {int(c)} appears twice")
            out[int(c)] = {k: (split[k][j] if k in split else v[j]) for k, v in d.items()}   # views: nothing is copied
    return out


def dumps_per_client(values: dict[int, Any]) -> str:
    """JSON of ``{cid: value}`` (metrics or error texts); numpy scalars become Python numbers."""
    return json.dumps({str(c): v for c, v in values.items()},
                      default=lambda o: o.item() if isinstance(o, np.generic) else str(o))


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise PayloadError(f"JSON: key {k!r} appears twice")
        out[k] = v
    return out


def loads_per_client(text: str | None, value: type | None = None) -> dict[int, Any]:
    """The ``{cid: value}`` of :func:`dumps_per_client`; raises :class:`PayloadError` unless
    ``text`` is a JSON object whose keys are client ids (decimal integers), each once, and whose
    values are of type ``value`` (when given)."""
    if not text:
        return {}
    if not isinstance(text, str):
        raise PayloadError(f"per-client JSON: expected a string, got {type(text).__name__}")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise PayloadError(f"per-client JSON: not JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(obj, dict):
        raise PayloadError(f"per-client JSON: expected an object, got {type(obj).__name__}")
    out: dict[int, Any] = {}
    for c, v in obj.items():
        if not c.lstrip("-").isdigit() or not c.isascii():
            raise PayloadError(f"per-client JSON: key {c[:40]!r} is not a client id")
        if value is not None and not isinstance(v, value):
            raise PayloadError(f"per-client JSON: client {c}: expected {value.__name__}, got {type(v).__name__}")
        out[int(c)] = v
    return out


def nonfinite_metric(metrics: dict[str, Any]) -> str | None:
    """The name of the first metric that is not a finite number, a string, a bool, None, or a
    list of those (None: all are)."""
    for k, v in metrics.items():
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, bool) or x is None or isinstance(x, str):
                continue
            if not isinstance(x, (int, float)) or not np.isfinite(x):
                return k
    return None


@functools.lru_cache(maxsize=256)
def _header_size(shape: tuple[int, ...], dtype: str) -> int:
    buf = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return len(buf.getvalue())


def npy_size(a: np.ndarray) -> int:
    """Bytes of ``a`` serialised alone as ``.npy`` (what a Flower ``Array`` of it holds)."""
    return int(a.nbytes) + _header_size(tuple(a.shape), a.dtype.str)


def payload_size(arrays: dict[str, np.ndarray]) -> int:
    return sum(npy_size(a) for a in arrays.values())


@dataclass(frozen=True)
class ArraySpec:
    """An expected array. A dimension given as ``-1`` may have any length up to the same
    dimension of ``max_shape`` (e.g. the rows a client trained: at most the table's rows)."""
    shape: tuple[int, ...]
    dtype: str = "float32"
    optional: bool = False    # may be absent (when present: this shape and dtype)
    max_shape: tuple[int, ...] | None = None   # bounds of the -1 dimensions

    def bound(self) -> tuple[int, ...]:
        """The largest shape it admits (what a reply's byte bound counts)."""
        if self.max_shape is None:
            return tuple(max(int(s), 0) for s in self.shape)
        return tuple(int(m) if s == -1 else int(s) for s, m in zip(self.shape, self.max_shape))

    def matches(self, shape: tuple[int, ...]) -> bool:
        if len(shape) != len(self.shape):
            return False
        return all(x == s if s != -1 else 0 <= x <= b for x, s, b in zip(shape, self.shape, self.bound()))


def row_keys(name: str) -> tuple[str, str]:
    """The payload keys of table ``name`` sent as changed rows (``item-upload = rows``): its row
    ids (int32, sorted, distinct) and those rows' values; every other row equals the download."""
    return f"{name}@rows", f"{name}@vals"


class PayloadError(ValueError):
    """A payload that does not match what the protocol expects."""


def validate_payload(arrays: dict[str, np.ndarray], expected: dict[str, ArraySpec]) -> None:
    """Raise :class:`PayloadError` unless ``arrays`` has exactly the expected keys, shapes, dtypes,
    and only finite values."""
    missing = sorted(k for k, spec in expected.items() if not spec.optional and k not in arrays)
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        raise PayloadError(f"keys: missing {missing}, unexpected {extra}")
    for k, spec in expected.items():
        if k not in arrays:
            continue
        a = arrays[k]
        if not spec.matches(tuple(a.shape)):
            want = tuple(spec.shape) if spec.max_shape is None else \
                f"{tuple(spec.shape)} (-1: at most {spec.bound()})"
            raise PayloadError(f"'{k}': expected shape {want}, got {tuple(a.shape)}")
        if str(a.dtype) != spec.dtype:
            raise PayloadError(f"'{k}': expected dtype {spec.dtype}, got {a.dtype}")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise PayloadError(f"'{k}': {int((~np.isfinite(a)).sum())} non-finite values")
