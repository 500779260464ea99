"""Base of every Corolla strategy: phases over logical clients multiplexed onto nodes.

A round is a list of *phases* (``configure -> send/receive -> validate -> aggregate``), then an
evaluation phase. The strategy reasons in logical clients; :meth:`CorollaStrategy.exchange`
groups them per node: one message per node carries the shared arrays once and the personalised
arrays of each hosted logical client, and the reply carries one record per logical client.

To add a method, subclass :class:`CorollaStrategy` and override the hooks marked *hook*:
``phases``, ``configure_phase``, ``expected_payload``, ``aggregate_phase``, ``evaluate_download``,
``state_dict``/``load_state_dict`` and ``summary``. Aggregation kernels stay pure functions.

Every reply payload is validated (keys, shape, dtype, finite values) before aggregation; an
invalid payload, or a logical client that raised, is logged with its id and excluded.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from corolla import metrics as M
from corolla.config import int_list
from corolla.protocol import ArraySpec, PayloadError, client_key, error_key, metric_key, validate_payload
from corolla.util import rng
from strategies.transport import TIMEOUT_PREFIX, GridTransport, Transport


def record_bytes(rec: ArrayRecord) -> int:
    """Bytes of an ArrayRecord's serialised arrays (``.npy`` data, header included)."""
    return sum(len(a.data) for a in rec.values())


def to_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


@dataclass
class PhaseStats:
    name: str
    bytes_up: int = 0
    bytes_down: int = 0
    wall_s: float = 0.0
    replies: int = 0
    compute_s: float = 0.0  # the largest per-node sum of the clients' own phase time
    excluded: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "wall_s": round(self.wall_s, 4), "compute_s": round(self.compute_s, 4),
                "replies": self.replies, "excluded": self.excluded}


@dataclass
class ClientResult:
    payload: dict[str, np.ndarray]
    metrics: dict[str, Any]


class CorollaStrategy(Strategy):
    """Base strategy. ``cfg`` is the resolved run configuration (see ``corolla.config``)."""

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.ks = int_list(cfg, "topk")
        self.n_items: int = 0
        self.clients: dict[int, dict[str, int]] = {}   # cid -> {"users", "train", "node"}
        self.nodes: dict[int, list[int]] = {}          # node id -> hosted cids
        self.dead_nodes: set[int] = set()
        self.restore_round = 0
        self.run_info: dict[str, Any] = {}              # run-key, state-dir, data-dir, cfg JSON

    # ------------------------------------------------------------------ hooks
    def setup(self) -> None:
        """*hook*: called once after the first handshake (``n_items`` and ``clients`` known)."""

    def phases(self, rnd: int) -> list[str]:
        """*hook*: the phases of round ``rnd`` before evaluation."""
        return ["train"]

    def sample(self, rnd: int, available: list[int]) -> list[int]:
        """Clients of round ``rnd``: ``ceil(fraction-train * |available|)``, seeded by (seed, round)."""
        f = self.cfg["fraction-train"]
        if f >= 1.0:
            return sorted(available)
        n = max(1, math.ceil(f * len(available)))
        pick = rng(self.cfg["seed"], "sample", rnd).choice(sorted(available), size=n, replace=False)
        return sorted(int(c) for c in pick)

    def configure_phase(self, phase: str, rnd: int, targets: list[int]
                        ) -> tuple[dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
        """*hook*: (shared arrays, personalised arrays per client) sent in ``phase``."""
        return {}, {}

    def expected_payload(self, phase: str, cid: int) -> dict[str, ArraySpec]:
        """*hook*: the arrays a logical client must upload in ``phase`` (empty: none)."""
        return {}

    def aggregate_phase(self, phase: str, rnd: int, results: dict[int, ClientResult]) -> dict[str, float]:
        """*hook*: aggregate the validated results; returns metrics to log."""
        return {}

    def evaluate_download(self, rnd: int, targets: list[int]
                          ) -> tuple[dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
        """*hook*: what the clients need to evaluate their personalised models."""
        return {}, {}

    def state_dict(self) -> dict[str, np.ndarray]:
        """*hook*: server state to checkpoint."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """*hook*: restore :meth:`state_dict`."""

    def summary(self) -> None:
        log(INFO, "%s: %s", type(self).__name__,
            {k: self.cfg[k] for k in ("method", "model", "num-rounds", "fraction-train", "dim", "lr")})

    # ------------------------------------------------------------------ transport
    @staticmethod
    def message_type(phase: str) -> str:
        """Flower message type of a phase: every training phase is a ``train`` message (the phase
        name travels in the config), evaluation ``evaluate``, handshake/top-K ``query.<name>``."""
        if phase == "evaluate":
            return "evaluate"
        if phase in ("handshake", "topk"):
            return f"query.{phase}"
        return "train"

    def _config(self, phase: str, rnd: int, cids: list[int]) -> ConfigRecord:
        return ConfigRecord({"phase": phase, "round": rnd, "clients": json.dumps(cids),
                             "restore-round": self.restore_round, **self.run_info})

    def build_contents(self, phase: str, rnd: int, targets: list[int], shared, personal
                       ) -> tuple[list[tuple[int, RecordDict]], int]:
        """Messages ``(node, content)`` for ``targets``; returns (messages, bytes down).

        A node gets one message with all its targeted logical clients, or several of at most
        ``clients-per-message`` clients each (which bounds message size and server memory).
        """
        msgs: list[tuple[int, RecordDict]] = []
        down = 0
        tset = set(targets)
        shared_rec = to_record(shared) if shared else None
        cpm = int(self.cfg.get("clients-per-message", 0) or 0)
        for node, cids in sorted(self.nodes.items()):
            mine = [c for c in cids if c in tset]
            if node in self.dead_nodes or not mine:
                continue
            chunks = [mine[i:i + cpm] for i in range(0, len(mine), cpm)] if cpm > 0 else [mine]
            for chunk in chunks:
                rd = RecordDict({"config": self._config(phase, rnd, chunk)})
                if shared_rec is not None:
                    rd["global"] = shared_rec
                    down += record_bytes(shared_rec)
                for c in chunk:
                    if c in personal:
                        rec = to_record(personal[c])
                        rd[client_key(c)] = rec
                        down += record_bytes(rec)
                msgs.append((node, rd))
        return msgs, down

    def accept(self, phase: str, rnd: int, cid: int, result: ClientResult) -> ClientResult:
        """*hook*: called for each validated result as its node's reply arrives.

        A strategy with large payloads folds ``result.payload`` into a running aggregate here and
        returns the result without its payload, so the server never holds all payloads at once.
        """
        return result

    def parse_replies(self, phase: str, sent: list[tuple[int, RecordDict]], replies, stats: PhaseStats,
                      rnd: int = 0) -> dict[int, ClientResult]:
        """Validate replies (an iterable of ``(message index, reply)``); returns the valid results."""
        out: dict[int, ClientResult] = {}
        for idx, rep in replies:
            node, content = sent[idx]
            cids = json.loads(content["config"]["clients"])
            if isinstance(rep, str):
                if rep.startswith(TIMEOUT_PREFIX):
                    # slow or gone: this phase loses its contribution; it is asked again next round
                    # unless the SuperLink has dropped it from the node list by then
                    log(WARNING, "node %s: %s in phase %s; its logical clients %s are excluded from "
                        "this phase", node, rep, phase, cids)
                else:
                    log(WARNING, "node %s failed in phase %s (%s); its logical clients %s are excluded "
                        "from this run", node, phase, rep.splitlines()[0] if rep else rep, cids)
                    self.dead_nodes.add(node)
                stats.excluded += [{"client": c, "reason": f"node failed: {rep[:200]}"} for c in cids]
                continue
            stats.replies += 1
            node_compute = 0.0
            for c in cids:
                if metric_key(c) in rep:
                    node_compute += float(rep[metric_key(c)].get("compute-s", 0.0))
                if error_key(c) in rep:
                    err = str(rep[error_key(c)]["error"])
                    log(WARNING, "logical client %s raised in phase %s; excluded:\n%s", c, phase, err)
                    stats.excluded.append({"client": c, "reason": err.strip().splitlines()[-1][:300]})
                    continue
                if metric_key(c) not in rep:
                    stats.excluded.append({"client": c, "reason": "no reply record"})
                    continue
                payload = {}
                if client_key(c) in rep:
                    rec = rep[client_key(c)]
                    stats.bytes_up += record_bytes(rec)
                    payload = {k: v.numpy() for k, v in rec.items()}
                mets = dict(rep[metric_key(c)])
                try:
                    if phase != "evaluate" and phase != "topk":
                        validate_payload(payload, self.expected_payload(phase, c))
                        n = mets.get("num-examples", 0)
                        if not (isinstance(n, (int, float)) and math.isfinite(n) and n >= 0):
                            raise PayloadError(f"num-examples: expected a finite number >= 0, got {n!r}")
                except PayloadError as e:
                    log(WARNING, "logical client %s: invalid payload in phase %s (%s); excluded", c, phase, e)
                    stats.excluded.append({"client": c, "reason": f"invalid payload: {e}"})
                    continue
                out[c] = self.accept(phase, rnd, c, ClientResult(payload, mets))
            stats.compute_s = max(stats.compute_s, node_compute)
        return out

    def exchange(self, transport: Transport, phase: str, rnd: int, targets: list[int], shared, personal
                 ) -> tuple[dict[int, ClientResult], PhaseStats]:
        t0 = time.perf_counter()
        stats = PhaseStats(phase)
        contents, stats.bytes_down = self.build_contents(phase, rnd, targets, shared, personal)
        replies = transport.exchange(contents, self.message_type(phase), self.cfg["phase-timeout"]) if contents else []
        results = self.parse_replies(phase, contents, replies, stats, rnd)
        stats.wall_s = time.perf_counter() - t0
        return results, stats

    # ------------------------------------------------------------------ nodes
    def handshake(self, transport: Transport, node_ids: list[int]) -> None:
        """Ask ``node_ids`` which logical clients they host."""
        if not node_ids:
            return
        msgs = [(n, RecordDict({"config": self._config("handshake", 0, [])})) for n in node_ids]
        replies = dict(transport.exchange(msgs, self.message_type("handshake"), self.cfg["phase-timeout"]))
        for idx, node in enumerate(node_ids):
            rep = replies.get(idx, "no reply")
            if isinstance(rep, str):
                log(WARNING, "node %s failed the handshake (%s); ignored", node, rep.strip().splitlines()[-1][:300])
                self.dead_nodes.add(node)
                continue
            info = rep["node"]
            n_items = int(info["n-items"])
            if self.n_items and n_items != self.n_items:
                log(WARNING, "node %s reports %d items, the run has %d; ignored", node, n_items, self.n_items)
                self.dead_nodes.add(node)
                continue
            self.n_items = n_items
            hosted = {int(c): v for c, v in json.loads(info["hosted"]).items()}
            mine = []
            for c, v in sorted(hosted.items()):
                if c in self.clients and self.clients[c]["node"] not in self.dead_nodes:
                    log(WARNING, "logical client %s is hosted by nodes %s and %s; keeping the first",
                        c, self.clients[c]["node"], node)
                    continue
                self.clients[c] = {**v, "node": node}
                mine.append(c)
            self.nodes[node] = mine
            log(INFO, "node %s hosts %d logical clients", node, len(mine))

    def refresh_nodes(self, transport: Transport) -> None:
        live = set(transport.node_ids())
        for node in list(self.nodes):
            if node not in live and node not in self.dead_nodes:
                log(WARNING, "node %s left; its logical clients %s are excluded", node, self.nodes[node])
                self.dead_nodes.add(node)
        self.handshake(transport, sorted(live - set(self.nodes) - self.dead_nodes))

    def available(self) -> list[int]:
        return sorted(c for c, v in self.clients.items() if v["node"] not in self.dead_nodes)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, transport: Transport, rnd: int) -> tuple[dict[str, Any], PhaseStats]:
        targets = self.available()
        shared, personal = self.evaluate_download(rnd, targets)
        results, stats = self.exchange(transport, "evaluate", rnd, targets, shared, personal)
        return self.aggregate_metrics(results), stats

    def aggregate_metrics(self, results: dict[int, ClientResult]) -> dict[str, Any]:
        """Pool per-user values over logical clients (in id order) into protocol metrics."""
        out: dict[str, Any] = {}
        for split in ("valid", "test"):
            per_user: dict[str, list[float]] = {}
            for cid in sorted(results):
                for k, v in results[cid].metrics.items():
                    if k.startswith(split + "/"):
                        per_user.setdefault(k[len(split) + 1:], []).extend(v)
            plain = {k: np.asarray(v) for k, v in per_user.items() if not k.startswith("ties:")}
            mets, compat = M.aggregate(plain, self.ks)
            ties = {k[len("ties:"):]: float(np.mean(v)) for k, v in per_user.items() if k.startswith("ties:")}
            users = len(next(iter(plain.values()))) if plain else 0
            out[split] = {"metrics": mets, "compat": compat or ties, "users": users}
        return out

    # ------------------------------------------------------------------ Flower Strategy API
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid):
        """Flower API: the ``train`` phase messages (the logical clients sampled this round)."""
        targets = self.sample(server_round, self.available())
        shared, personal = self.configure_phase("train", server_round, targets)
        msgs, _ = self.build_contents("train", server_round, targets, shared, personal)
        return [Message(content=c, dst_node_id=n, message_type="train") for n, c in msgs]

    def aggregate_train(self, server_round: int, replies):
        """Flower API: validate and aggregate ``train`` replies; returns the shared arrays."""
        sent: list[tuple[int, RecordDict]] = []
        reps: list[tuple[int, RecordDict | str]] = []
        for i, r in enumerate(replies):
            node = r.metadata.src_node_id
            cids = [c for c in self.nodes.get(node, []) if r.has_error() or metric_key(c) in r.content
                    or error_key(c) in r.content]
            sent.append((node, RecordDict({"config": self._config("train", server_round, cids)})))
            reps.append((i, f"error {r.error.code}: {r.error.reason}" if r.has_error() else r.content))
        stats = PhaseStats("train")
        results = self.parse_replies("train", sent, reps, stats, server_round)
        mets = self.aggregate_phase("train", server_round, results)
        shared, _ = self.evaluate_download(server_round, self.available())
        return (to_record(shared) if shared else None), MetricRecord({k: float(v) for k, v in mets.items()})

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        """Flower API: the ``evaluate`` phase messages (every available logical client)."""
        targets = self.available()
        shared, personal = self.evaluate_download(server_round, targets)
        msgs, _ = self.build_contents("evaluate", server_round, targets, shared, personal)
        return [Message(content=c, dst_node_id=n, message_type="evaluate") for n, c in msgs]

    def aggregate_evaluate(self, server_round: int, replies):
        """Flower API: pooled test metrics of the ``evaluate`` replies."""
        results: dict[int, ClientResult] = {}
        for r in replies:
            if r.has_error():
                continue
            for key in r.content.keys():
                if key.startswith("m"):
                    results[int(key[1:])] = ClientResult({}, dict(r.content[key]))
        agg = self.aggregate_metrics(results)
        return MetricRecord({k: v for k, v in agg["test"]["metrics"].items()})

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, *, recorder=None, transport: Transport | None = None,
              start_round: int = 1, **_: Any):
        """Run the rounds (our multi-phase loop instead of Flower's one train + one evaluate).

        ``recorder`` (``server_app.results.RunRecorder``) receives every round's record, writes
        the checkpoint, and decides early stopping.
        """
        transport = transport or GridTransport(grid)
        num_rounds = num_rounds or self.cfg["num-rounds"]
        if not self.nodes:
            self.handshake(transport, transport.node_ids())
            if not self.clients:
                raise RuntimeError("no node hosts any logical client")
            self.setup()
        self.summary()
        for rnd in range(start_round, num_rounds + 1):
            t0 = time.perf_counter()
            self.refresh_nodes(transport)
            if not self.available():
                raise RuntimeError(f"round {rnd}: no node with logical clients is left")
            targets = self.sample(rnd, self.available())
            phase_stats, train_metrics = [], {}
            for phase in self.phases(rnd):
                shared, personal = self.configure_phase(phase, rnd, targets)
                results, stats = self.exchange(transport, phase, rnd, targets, shared, personal)
                train_metrics.update(self.aggregate_phase(phase, rnd, results))
                phase_stats.append(stats)
                if recorder:
                    recorder.progress(rnd, phase, stats, len(results), len(targets))
            evaluation = None
            if rnd % self.cfg["eval-every"] == 0 or rnd == num_rounds:
                evaluation, stats = self.evaluate(transport, rnd)
                phase_stats.append(stats)
                if recorder:
                    recorder.progress(rnd, "evaluate", stats, len(self.available()), len(self.available()))
            if recorder:
                stop = recorder.end_round(self, rnd, phase_stats, train_metrics, evaluation,
                                          time.perf_counter() - t0, targets)
                if stop:
                    log(INFO, "early stop after round %d (patience %d)", rnd, self.cfg["patience"])
                    break
        return recorder
