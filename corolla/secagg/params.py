"""The parameters of one SecAgg+ aggregation and its masking graph (Bell et al., CCS 2020, §3.1:
each node masks with ``k`` neighbours on a random graph; a secret is shared among a node's
neighbourhood with threshold ``t``).

Both sides derive the parameters from the run config (``secagg-threshold``, ``-clip``, ``-bits``,
``-neighbours``) and the number of participants ``n``; a node does so once, at the round's
setup, and never takes them from a later message. A node refuses a threshold below 2 or not
above half its neighbourhood: with ``t ≤ |N(u) ∪ {u}| / 2`` two disjoint groups of neighbours
could each reconstruct one of ``u``'s two secrets.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from corolla.secagg.primitives import MOD, SecAggError


def hood_size(n: int, k: int) -> int:
    """Nodes in a neighbourhood (a node and its neighbours): ``n`` for plain SecAgg (``k`` <= 0
    or >= n - 1), else ``2·max(1, k//2) + 1``."""
    return n if k <= 0 or k >= n - 1 else 2 * max(1, k // 2) + 1


@dataclass(frozen=True)
class Params:
    n: int                  # participants (SecAgg ids 1..n)
    threshold: int          # t: shares needed to reconstruct a secret
    clip: float             # c: values are clipped to [-c, c] before quantisation
    bits: int               # 2^bits quantisation levels over [-c, c]
    neighbours: int         # k: SecAgg+ neighbours per node (0 or >= n-1: every other node)

    @property
    def hood(self) -> int:
        return hood_size(self.n, self.neighbours)

    def check(self) -> "Params":
        """The parameters, or :class:`SecAggError` naming the one that cannot hold."""
        if not isinstance(self.n, int) or self.n < 2:
            raise SecAggError(f"secure aggregation needs at least 2 nodes, got {self.n}")
        if not 1 <= self.bits <= 24:
            raise SecAggError(f"secagg-bits: expected 1..24, got {self.bits}")
        if self.n * (1 << self.bits) >= MOD:
            raise SecAggError(f"secagg-bits {self.bits} with {self.n} nodes overflows the 2^32 field")
        if not self.clip > 0:
            raise SecAggError(f"secagg-clip: expected > 0, got {self.clip}")
        if self.threshold < 2:
            raise SecAggError(f"secagg-threshold: expected >= 2, got {self.threshold}")
        if 2 * self.threshold <= self.hood:
            raise SecAggError(f"secagg-threshold {self.threshold}: must be more than half of the {self.hood} nodes of "
                              "a neighbourhood (else two groups of neighbours could each rebuild one of a node's "
                              "secrets)")
        if self.threshold > self.hood:
            raise SecAggError(f"secagg-threshold {self.threshold} exceeds the {self.hood} nodes of a neighbourhood "
                              f"({self.n} nodes take part): lower it or add nodes")
        return self

    @classmethod
    def from_config(cls, cfg: dict[str, Any], n: int) -> "Params":
        """The parameters of an aggregation over ``n`` nodes under run config ``cfg``, checked."""
        k = int(cfg["secagg-neighbours"])
        t = int(cfg["secagg-threshold"]) or max(2, hood_size(n, k) // 2 + 1)
        return cls(int(n), t, float(cfg["secagg-clip"]), int(cfg["secagg-bits"]), k).check()


def neighbour_graph(ids: list[int], k: int, seed: int) -> dict[int, set[int]]:
    """SecAgg+'s graph: ``ids`` shuffled (``seed``: fresh randomness of the server, per round) on a
    ring, each node with the ``k`` nearest (``k//2`` on each side; ``k`` <= 0 or >= n-1: all
    others). Returns ``{u: N(u)}`` without ``u``."""
    n = len(ids)
    if k <= 0 or k >= n - 1:
        return {u: set(ids) - {u} for u in ids}
    ring = sorted(ids)
    random.Random(seed).shuffle(ring)
    half = max(1, k // 2)
    return {u: {ring[(i + o) % n] for o in range(-half, half + 1) if o} for i, u in enumerate(ring)}
