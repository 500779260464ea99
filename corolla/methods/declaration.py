"""A method's declaration (:class:`Method`) and a harness's (:class:`Harness`): the entries of the
method table (``corolla.methods``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corolla.keys import Key


@dataclass(frozen=True)
class Harness:
    """How the logical clients of a method train and what the server may assume of them."""
    name: str
    summary: str
    keys: dict[str, Key] = field(default_factory=dict)
    check: Callable[[dict[str, Any], "Method"], None] | None = None
    evaluates_in_reply: bool = False   # clients send their own post-training metrics with the upload


@dataclass(frozen=True, eq=False)
class Method:
    """One method on one harness."""
    name: str
    harness: str
    models: tuple[str, ...]
    strategy: str          # "module:Class" of the server side (``strategies/``)
    client: str            # "module:Class" of the client side (``client_app/``)
    summary: str
    paper: str = ""        # the paper (and spec section) it implements
    keys: dict[str, Key] = field(default_factory=dict)      # its own config keys
    check: Callable[[dict[str, Any]], None] | None = None   # its own cross-key checks
    key_owners: tuple[str, ...] = ()  # other modules whose keys it reads (e.g. gpfedrec: ufgraphfr's graph keys)
    strategy_options: dict[str, Any] = field(default_factory=dict)  # class attributes of the strategy for this method
    client_options: dict[str, Any] = field(default_factory=dict)    # class attributes of the client for this method
    heterogeneous: bool = False   # clients may train different models (``client-models``)
    requires: dict[str, Any] = field(default_factory=dict)  # core keys it trains with (a tuple: any of them)
    secure_phase: str = ""     # the phase whose aggregate is a (weighted) sum: secagg = "secaggplus" sums it
    row_upload: bool = False   # one-user clients start each round from the global item table: item-upload = rows is lossless

    @property
    def secure_sum(self) -> bool:
        """Secure aggregation (``secagg``) is supported: the method sums one phase's uploads."""
        return bool(self.secure_phase)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.harness}, {'/'.join(self.models)})"
