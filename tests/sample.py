"""Which presets the per-preset tests run (``tests/test_golden.py``, ``tests/test_fused.py``).

:func:`group` is one preset per (method, harness, model, split) of the resolved config: every code
path a preset can take, once (48 golden lines, 905 s on 2 cores on 2026-11-28). The golden test
samples by :func:`method_group` instead, one preset per (method, harness): 22 lines in 424 s, what
the CI's time allows (docs/results.md, "CI time (2026-11-28, second cut)"). Those 22 hold every
model of the golden file but SGL (a central reference, ``tests/test_central.py``), not every
pairing of a method with a model or split.
Presets that differ in model, split, dataset or sizes run with
``COROLLA_ALL_PRESETS=1`` (what a change that touches a model, a dataset or the golden file runs;
the golden test about 25 minutes more on 2 cores). The choice prefers the README's preset, then the ML-100K preset
of a group, then the shortest name, so it is stable as presets are added. ``tests/test_fused.py``,
which checks how a round's messages carry the evaluation, samples by :func:`message_group`
instead (the shape of the messages, not every code path: 27 presets instead of 49).
"""
from __future__ import annotations

import os

from corolla.config import resolve

README_PRESET = "fedavg-mf-ml100k"


def group(name: str) -> tuple:
    cfg = resolve(name)
    return cfg["method"], cfg["harness"], cfg["model"], cfg["split"], bool(cfg["client-models"])


def method_group(name: str) -> tuple:
    """One preset per (method, harness): what ``tests/test_golden.py`` runs in the README's test command."""
    cfg = resolve(name)
    return cfg["method"], cfg["harness"]


def message_group(name: str) -> tuple:
    """What decides the shape of a round's messages (``tests/test_fused.py``): the method's strategy,
    the harness, the evaluation protocol, and whether the model is trained at all (GF-CF is one-shot:
    its round is followed by one without phases). The model otherwise and the split change the
    numbers inside the messages, not which messages carry them."""
    cfg = resolve(name)
    return cfg["method"], cfg["harness"], cfg["protocol"], cfg["model"] == "gfcf"


def sample(names: list[str], key=group) -> list[str]:
    if os.environ.get("COROLLA_ALL_PRESETS", "") not in ("", "0"):
        return sorted(names)
    chosen: dict[tuple, str] = {}
    for n in sorted(names, key=lambda n: (n != README_PRESET, "ml100k" not in n, len(n), n)):
        chosen.setdefault(key(n), n)
    return sorted(chosen.values())
