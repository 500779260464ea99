"""The wire protocol between the strategy and the nodes, independent of Flower.

One message per node and phase. Its ``RecordDict`` holds

* ``config``  (ConfigRecord): ``phase``, ``round``, ``run-key``, ``cfg`` (the resolved run config as
  JSON), ``clients`` (JSON list of the targeted logical client ids), ``state-dir``, ``data-dir``,
  ``restore-round``;
* ``global``  (ArrayRecord, optional): arrays every targeted logical client receives (sent once per node);
* ``c<cid>``  (ArrayRecord, optional): arrays for one logical client only (personalised downloads).

The reply holds, per hosted targeted logical client, ``c<cid>`` (its payload, ArrayRecord),
``m<cid>`` (MetricRecord: ``num-examples`` and per-user metric lists) and, if the logical client
failed, ``e<cid>`` (ConfigRecord ``error``). The handshake reply holds ``node`` (ConfigRecord
``hosted``: JSON ``{cid: {"users": n, "train": n}}``, ``n-items``).

**Fused evaluation.** A phase message may also carry the evaluation of a round, so that a round
costs one exchange per node: config ``eval-round`` (the round whose models are evaluated),
``eval-clients`` (JSON list), ``eval-when`` (``before``: evaluate first, then run the phase, the
previous round's evaluation travelling with the next round's message; ``after``: run the phase,
then evaluate its result) and ``eval-shared`` (``own``: the arrays are in ``eval-global``;
``global``: the evaluation uses the phase's own ``global`` arrays, sent once; ``none``).
Per-client evaluation downloads are ``vc<cid>``; the reply carries ``vm<cid>`` (the metrics) or
``ve<cid>`` (the error) per evaluated client, beside the phase's own records.

Bytes are counted as the serialised array data (``len(Array.data)``: the ``.npy`` bytes, header
included) of every ArrayRecord in a message: shared ``global`` arrays once per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def client_key(cid: int) -> str:
    return f"c{cid}"


def metric_key(cid: int) -> str:
    return f"m{cid}"


def error_key(cid: int) -> str:
    return f"e{cid}"


def eval_client_key(cid: int) -> str:
    return f"vc{cid}"


def eval_metric_key(cid: int) -> str:
    return f"vm{cid}"


def eval_error_key(cid: int) -> str:
    return f"ve{cid}"


@dataclass(frozen=True)
class ArraySpec:
    shape: tuple[int, ...]
    dtype: str = "float32"


class PayloadError(ValueError):
    """A payload that does not match what the protocol expects."""


def validate_payload(arrays: dict[str, np.ndarray], expected: dict[str, ArraySpec]) -> None:
    """Raise :class:`PayloadError` unless ``arrays`` has exactly the expected keys, shapes, dtypes,
    and only finite values."""
    missing = sorted(set(expected) - set(arrays))
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        raise PayloadError(f"keys: missing {missing}, unexpected {extra}")
    for k, spec in expected.items():
        a = arrays[k]
        if tuple(a.shape) != tuple(spec.shape):
            raise PayloadError(f"'{k}': expected shape {tuple(spec.shape)}, got {tuple(a.shape)}")
        if str(a.dtype) != spec.dtype:
            raise PayloadError(f"'{k}': expected dtype {spec.dtype}, got {a.dtype}")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise PayloadError(f"'{k}': {int((~np.isfinite(a)).sum())} non-finite values")
