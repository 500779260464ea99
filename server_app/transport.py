"""Transports: how one phase's per-node contents reach the nodes and replies come back.

:class:`GridTransport` speaks to a real SuperLink (or the simulation runtime) through Flower's
``Grid``. Instead of ``Grid.send_and_receive`` (which sleeps 3 s between polls) it pushes all
messages and polls for replies every ``poll_s`` seconds (0.05 s; every ``slow_poll_s``, 0.2 s, once
``fast_window_s`` passed without a reply) until all replied or ``timeout`` passed.

``exchange`` takes flat messages ``(node, content)`` (``corolla.messages``; a node may get several)
and yields ``(message index, flat reply)`` as replies arrive (a failed message yields an error
string), so that a strategy can fold each reply into a running aggregate and drop it: server memory then does
not grow with the number of nodes or logical clients.

``limits`` (one per message, None: no bound) bound the bytes of arrays a reply may carry (a pair
``(arrays, text)`` also bounds its text: the secure-aggregation queries, whose replies are text): a larger
reply is not decoded and yields ``"rejected: ..."`` (``REJECTED_PREFIX``) instead, so that a node
cannot make the server allocate more than a bounded multiple of what it expects. The bytes
themselves have then already been received by Flower, whose SuperLink moves a message's arrays
one object at a time and whose gRPC channels cap a single message.
"""

from __future__ import annotations

import time
from typing import Iterator, Protocol

from flwr.app import Message
from flwr.serverapp import Grid

from corolla.messages import Flat
from flower_io.records import TooLarge, from_records, to_records


TIMEOUT_PREFIX = "no reply within"
REJECTED_PREFIX = "rejected:"


def decode(rd, max_bytes: int | tuple[int, int] | None) -> Flat | str:
    """A reply's flat form, or ``"rejected: ..."`` when its arrays (and, with a pair, its text)
    exceed ``max_bytes``."""
    try:
        return from_records(rd, max_bytes)
    except TooLarge as e:
        return f"{REJECTED_PREFIX} {e}"


class Transport(Protocol):
    def node_ids(self) -> list[int]: ...

    def exchange(self, messages: list[tuple[int, Flat]], message_type: str, timeout: float,
                 limits: list[int | tuple[int, int] | None] | None = None) -> Iterator[tuple[int, Flat | str]]: ...


class GridTransport:
    def __init__(self, grid: Grid, poll_s: float = 0.05, pull_batch: int = 4, slow_poll_s: float = 0.2,
                 fast_window_s: float = 5.0):
        self.grid = grid
        self.poll_s = poll_s                  # while the phase is young or replies keep arriving
        self.slow_poll_s = slow_poll_s        # once fast_window_s passed without a reply: long phases
        self.fast_window_s = fast_window_s    # (GF-CF's upload, many nodes) do not poll 20 times a second
        self.pull_batch = pull_batch  # replies pulled per call: bounds the replies held at once

    def node_ids(self) -> list[int]:
        return sorted(int(n) for n in self.grid.get_node_ids())

    def exchange(self, messages: list[tuple[int, Flat]], message_type: str, timeout: float,
                 limits: list[int | tuple[int, int] | None] | None = None) -> Iterator[tuple[int, Flat | str]]:
        msgs = [Message(content=to_records(c), dst_node_id=n, message_type=message_type) for n, c in messages]
        ids = list(self.grid.push_messages(msgs))
        node_of = {mid: i for i, mid in enumerate(ids)}  # message id -> index in ``messages``
        pending = set(ids)
        end = time.monotonic() + timeout
        last = time.monotonic()   # the push, then the last reply
        while pending and time.monotonic() < end:
            got = False
            order = sorted(pending, key=node_of.__getitem__)
            for a in range(0, len(order), self.pull_batch):
                for rep in self.grid.pull_messages(order[a:a + self.pull_batch]):
                    mid = rep.metadata.reply_to_message_id
                    if mid not in pending:
                        continue
                    pending.discard(mid)
                    got = True
                    last = time.monotonic()
                    n = node_of[mid]
                    yield n, (f"error {rep.error.code}: {rep.error.reason}" if rep.has_error()
                              else decode(rep.content, limits[n] if limits else None))
            if pending and not got:
                quiet = time.monotonic() - last
                time.sleep(self.poll_s if quiet < self.fast_window_s else self.slow_poll_s)
        for mid in sorted(pending):
            yield node_of[mid], f"{TIMEOUT_PREFIX} {timeout:.0f} s"
