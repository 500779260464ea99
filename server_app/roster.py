"""The roster: which node hosts which logical clients, handshakes, auto-assignment, churn.

A node answers the ``handshake`` with the logical clients it hosts (``corolla.messages.NodeInfo``);
nodes with node config ``clients = "auto"`` can host any, and the roster gives them contiguous
blocks of the clients no fixed node hosts, reassigned only when that set of nodes changes. Every
client's data and randomness depend on its id alone, so where it runs does not change the
results; its state moves with it when the nodes share ``state-dir``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.messages import NodeInfo
from corolla.secagg.identity import fingerprint, handshake_statement, verify
from corolla.secagg.primitives import SecAggError
from corolla.util import id_ranges
from server_app.transport import TIMEOUT_PREFIX, Transport


class Roster:
    def __init__(self) -> None:
        self.n_items = 0
        self.clients: dict[int, dict[str, int]] = {}   # cid -> {"users", "train"[, "items"], "node"}
        self.nodes: dict[int, list[int]] = {}          # node id -> hosted cids
        self.dead_nodes: set[int] = set()
        self.auto_nodes: set[int] = set()              # nodes with node config clients="auto"
        self.client_info: dict[int, dict[str, int]] = {}  # every logical client an auto node can host
        self.data_stats: dict[str, Any] = {}           # the nodes' description of the data (partition)
        self.failures: dict[int, str] = {}             # node -> why its handshake failed
        self.flags: dict[int, list[str]] = {}          # node -> what it sent that it should not have
        self.keys: dict[int, str] = {}                 # node -> fingerprint of the key it proved holding
        self._auto_assigned: tuple[int, ...] = ()

    def flag(self, node: int, reason: str) -> None:
        """Record that ``node`` sent something a well-behaved node does not (kept: its first 20)."""
        seen = self.flags.setdefault(int(node), [])
        if len(seen) < 20 and reason not in seen:
            seen.append(reason)

    def record(self) -> dict[str, dict[str, Any]]:
        """Each node the run has seen: the logical clients assigned to it (id ranges), the key it
        reported (SuperNode authentication on), whether it left or failed, and its flags."""
        out: dict[str, dict[str, Any]] = {}
        for node in sorted(set(self.nodes) | set(self.failures) | set(self.flags)):
            rec: dict[str, Any] = {"clients": id_ranges(self.nodes.get(node, []))}
            if node in self.keys:
                rec["key"] = self.keys[node]
            if node in self.dead_nodes:
                rec["left-or-failed"] = True
            if node in self.failures:
                rec["failure"] = self.failures[node]
            if node in self.flags:
                rec["flags"] = list(self.flags[node])
            out[str(node)] = rec
        return out

    def available(self) -> list[int]:
        return sorted(c for c, v in self.clients.items() if v["node"] not in self.dead_nodes)

    def handshake(self, transport: Transport, node_ids: list[int], request: Callable[[], dict],
                  timeout: float) -> None:
        """Ask ``node_ids`` which logical clients they host (``auto`` nodes: which they can host);
        ``request()`` is the handshake message (it carries the run config)."""
        if not node_ids:
            return
        msgs = [(n, request()) for n in node_ids]
        replies = dict(transport.exchange(msgs, "query.handshake", timeout))
        for idx, node in enumerate(node_ids):
            rep = replies.get(idx, "no reply")
            if isinstance(rep, str):
                why = rep.strip().splitlines()[-1][:600] if rep.strip() else "no reply"
                if why.startswith(TIMEOUT_PREFIX):   # say which bound a slow start ran into
                    why += " to its handshake (handshake-timeout)"
                log(WARNING, "node %s failed the handshake (%s); ignored", node, why)
                self.failures[node] = why
                self.dead_nodes.add(node)
                continue
            try:
                info = NodeInfo.decode(rep)
            except Exception as e:  # noqa: BLE001 - a malformed handshake costs that node only
                why = f"malformed handshake reply ({type(e).__name__}: {str(e)[:200]})"
                log(WARNING, "node %s: %s; ignored", node, why)
                self.failures[node] = why
                self.flag(node, why)
                self.dead_nodes.add(node)
                continue
            if info.key:   # the node proves the key it reports: its signature of the run and our nonce
                try:
                    conf = msgs[idx][1]["config"]
                    verify(info.key, handshake_statement(str(conf["run-key"]), str(conf.get("nonce", ""))),
                           base64.b64decode(info.key_sig.encode(), validate=True), "its handshake key")
                except (SecAggError, ValueError, KeyError) as e:
                    why = f"its key proof does not hold ({e})"
                    log(WARNING, "node %s: %s; ignored", node, why)
                    self.failures[node] = why
                    self.flag(node, why)
                    self.dead_nodes.add(node)
                    continue
                self.keys[node] = fingerprint(info.key)
            if self.n_items and info.n_items != self.n_items:
                log(WARNING, "node %s reports %d items, the run has %d; ignored", node, info.n_items, self.n_items)
                self.dead_nodes.add(node)
                continue
            self.n_items = info.n_items
            if info.data_stats and not self.data_stats:
                self.data_stats = info.data_stats
            if info.auto:
                self.auto_nodes.add(node)
                for c, v in info.hosted.items():
                    self.client_info.setdefault(c, v)
                self.nodes[node] = []
                log(INFO, "node %s takes logical clients assigned by the server (clients=auto)", node)
                continue
            mine = []
            for c, v in sorted(info.hosted.items()):
                if c in self.clients and self.clients[c]["node"] not in self.dead_nodes \
                        and self.clients[c]["node"] not in self.auto_nodes:
                    log(WARNING, "logical client %s is hosted by nodes %s and %s; keeping the first",
                        c, self.clients[c]["node"], node)
                    continue
                self.clients[c] = {**v, "node": node}
                mine.append(c)
            self.nodes[node] = mine
            log(INFO, "node %s hosts %d logical clients", node, len(mine))
        self.assign_auto()

    def assign_auto(self) -> None:
        """Give the logical clients that no live fixed node hosts to the live ``auto`` nodes, in
        contiguous blocks of client ids (nodes in id order); reassigned only when that set of
        nodes changes."""
        live = sorted(n for n in self.auto_nodes if n not in self.dead_nodes)
        if tuple(live) == self._auto_assigned:
            return
        self._auto_assigned = tuple(live)
        fixed = {c for c, v in self.clients.items()
                 if v["node"] not in self.auto_nodes and v["node"] not in self.dead_nodes}
        pool = sorted(c for c in self.client_info if c not in fixed)
        if not live:
            return
        for n in live:
            self.nodes[n] = []
        for node, block in zip(live, np.array_split(np.asarray(pool, np.int64), len(live))):
            cids = [int(c) for c in block]
            self.nodes[node] = cids
            for c in cids:
                self.clients[c] = {**self.client_info[c], "node": node}
            log(INFO, "node %s is assigned logical clients %s", node,
                f"{cids[0]}-{cids[-1]} ({len(cids)})" if cids else "none")

    def refresh(self, transport: Transport, request: Callable[[], dict], timeout: float) -> None:
        """Nodes that left are dead (their clients reassigned or excluded); new ones are asked."""
        live = set(transport.node_ids())
        for node in list(self.nodes):
            if node not in live and node not in self.dead_nodes:
                log(WARNING, "node %s left; its logical clients %s are %s", node, self.nodes[node],
                    "reassigned" if node in self.auto_nodes else "excluded")
                self.dead_nodes.add(node)
        self.handshake(transport, sorted(live - set(self.nodes) - self.dead_nodes), request, timeout)
        self.assign_auto()
