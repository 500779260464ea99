"""The client class of a run: the class its method-table entry names (``corolla.methods``), with
the entry's ``client_options`` as class attributes."""

from __future__ import annotations

from typing import Any

from corolla import methods
from corolla.util import import_class


def client_class(cfg: dict[str, Any]):
    """The client class of ``cfg``'s method on its harness with its model."""
    m = methods.lookup(cfg)
    return import_class(m.client, tuple(sorted(m.client_options.items())), m.name)
