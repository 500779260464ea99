"""The strategy of a run: the class its method-table entry names (``corolla.methods``), with the
entry's ``strategy_options`` as class attributes."""

from __future__ import annotations

from typing import Any

from corolla import methods
from corolla.util import import_class


def strategy_class(cfg: dict[str, Any]):
    """The strategy class of ``cfg``'s method on its harness with its model."""
    m = methods.lookup(cfg)
    return import_class(m.strategy, tuple(sorted(m.strategy_options.items())), m.name)
