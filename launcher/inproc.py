"""In-process transport: the ServerApp's run loop against the ClientApp's handler, no network.

``corolla run --mode inproc`` and the fast tests use it. Messages are passed through Flower's
record types (RecordDict, ArrayRecord, ...) exactly as the real transports pass them, minus the
Message envelope and the SuperLink (each node keeps its ``context.state`` here), and every node is handled in this process one message after
another. The numbers equal those of a run through a SuperLink (``tests/test_e2e.py`` checks
it); it is for sweeps and reproductions on one machine, not a deployment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flwr.app import RecordDict

from client_app.app import handle
from flower_io.records import to_records
from server_app.transport import decode


class InProcessTransport:
    def __init__(self, node_configs: list[dict[str, Any]],
                 tamper: Callable[[int, str, RecordDict], RecordDict] | None = None):
        # node ids mimic Flower's random 64-bit ids; order must not matter
        self.nodes = {1000 + 7919 * (i + 1): dict(nc) for i, nc in enumerate(node_configs)}
        self.tamper = tamper
        self.dead: set[int] = set()
        self.run_states: dict[int, dict[str, Any]] = {}   # each node's context.state (the run config)

    def node_ids(self) -> list[int]:
        return sorted(n for n in self.nodes if n not in self.dead)

    def exchange(self, messages, message_type, timeout, limits=None):
        dead = set(self.dead)  # decided when the messages are pushed
        return self._replies(list(messages), message_type, dead, limits)

    def _replies(self, messages, message_type, dead, limits=None):
        for idx, (node, content) in enumerate(messages):
            if node in dead:
                yield idx, "error: Node Unavailable"
                continue
            try:
                rep = handle(to_records(content), self.nodes[node], self.run_states.setdefault(node, {}))
            except Exception as e:  # noqa: BLE001
                yield idx, f"error 2: {e}"
                continue
            if self.tamper is not None:
                rep = self.tamper(node, message_type, rep)
            yield idx, decode(rep, limits[idx] if limits else None)


def partitions(n: int, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{"partition-id": i, "num-partitions": n, **(extra or {})} for i in range(n)]
