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
from corolla.protocol import (ArraySpec, PayloadError, loads_per_client, pack, payload_size, unpack,
                              validate_payload)
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
        self._reply_evals: dict[int, ClientResult] = {}  # this round's metrics sent with training
        self.auto_nodes: set[int] = set()                # nodes with node config clients="auto"
        self.client_info: dict[int, dict[str, int]] = {}  # every logical client an auto node can host
        self._auto_assigned: tuple[int, ...] = ()
        self.data_stats: dict[str, Any] = {}             # the nodes' description of the data (partition)
        self._held: dict[int, ClientResult] = {}         # train uploads held for aggregate_phase

    # ------------------------------------------------------------------ hooks
    def setup(self) -> None:
        """*hook*: called once after the first handshake (``n_items`` and ``clients`` known)."""

    def phases(self, rnd: int) -> list[str]:
        """*hook*: the phases of round ``rnd`` before evaluation."""
        return ["train"]

    def sample(self, rnd: int, available: list[int]) -> list[int]:
        """Clients of round ``rnd``: ``clients-per-round`` of them if set, else
        ``ceil(fraction-train * |available|)``; seeded by (seed, round)."""
        f = self.cfg["fraction-train"]
        per_round = int(self.cfg.get("clients-per-round", 0) or 0)
        if per_round <= 0 and f >= 1.0 or per_round >= len(available):
            return sorted(available)
        n = per_round if per_round > 0 else max(1, math.ceil(f * len(available)))
        pick = rng(self.cfg["seed"], "sample", rnd).choice(sorted(available), size=n, replace=False)
        return sorted(int(c) for c in pick)

    def phase_targets(self, phase: str, rnd: int, sampled: list[int]) -> list[int]:
        """*hook*: the logical clients of ``phase`` (default: the round's sampled clients)."""
        return sampled

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

    def build_contents(self, phase: str, rnd: int, targets: list[int], shared, personal,
                       ev: EvalRequest | None = None) -> tuple[list[tuple[int, RecordDict]], int]:
        """Messages ``(node, content)`` for ``targets`` (and the evaluation ``ev`` carried with
        them); returns (messages, bytes down).

        A node gets one message with all its targeted logical clients, or several of at most
        ``clients-per-message`` clients each (which bounds message size and server memory).
        Evaluation arrays equal to the phase's shared arrays are sent once (``eval-shared``).
        """
        msgs: list[tuple[int, RecordDict]] = []
        down = 0
        tset = set(targets)
        eset = set(ev.targets) if ev is not None else set()
        shared_rec = to_record(shared) if shared else None
        how = "none"
        ev_rec = None
        if ev is not None and ev.shared:
            if shared and same_arrays(ev.shared, shared):
                how = "global"
            else:
                how, ev_rec = "own", to_record(ev.shared)
        cpm = int(self.cfg.get("clients-per-message", 0) or 0)
        for node, cids in sorted(self.nodes.items()):
            mine = [c for c in cids if c in tset or c in eset]
            if node in self.dead_nodes or not mine:
                continue
            chunks = [mine[i:i + cpm] for i in range(0, len(mine), cpm)] if cpm > 0 else [mine]
            for chunk in chunks:
                train = [c for c in chunk if c in tset]
                evs = [c for c in chunk if c in eset]
                conf = self._config(phase, rnd, train)
                rd = RecordDict({"config": conf})
                if shared_rec is not None and (train or (evs and how == "global")):
                    rd["global"] = shared_rec
                    down += record_bytes(shared_rec)
                mine_personal = {c: personal[c] for c in train if personal.get(c)}
                if mine_personal:
                    rd["personal"] = to_record(pack(mine_personal))
                    down += sum(payload_size(a) for a in mine_personal.values())
                if evs:
                    assert ev is not None
                    conf["eval-round"] = ev.rnd
                    conf["eval-clients"] = json.dumps(evs)
                    conf["eval-when"] = ev.when
                    conf["eval-shared"] = how
                    if ev_rec is not None:
                        rd["eval-global"] = ev_rec
                        down += record_bytes(ev_rec)
                    ev_personal = {c: ev.personal[c] for c in evs if ev.personal.get(c)}
                    if ev_personal:
                        rd["eval-personal"] = to_record(pack(ev_personal))
                        down += sum(payload_size(a) for a in ev_personal.values())
                msgs.append((node, rd))
        return msgs, down

    def accept(self, phase: str, rnd: int, cid: int, result: ClientResult) -> ClientResult:
        """*hook*: called for each validated result as its node's reply arrives.

        A strategy with large payloads folds ``result.payload`` into a running aggregate here and
        returns the result without its payload, so the server never holds all payloads at once.
        The base keeps the evaluation metrics a client sent with its training reply (methods
        whose clients evaluate their own post-training model, e.g. the one-user harness), and,
        for a strategy that sets ``hold_uploads``, every ``train`` payload until
        :meth:`take_uploads` (so ``aggregate_phase`` sees only valid uploads, in client order).
        """
        if phase not in ("evaluate", "topk"):
            mets = {k: v for k, v in result.metrics.items() if k.startswith(("valid/", "test/"))}
            if mets:
                self._reply_evals[cid] = ClientResult({}, mets)
        if self.hold_uploads and phase == "train" and result.payload:
            self._held[cid] = result
            return ClientResult({}, result.metrics)
        return result

    hold_uploads = False

    def take_uploads(self) -> dict[int, ClientResult]:
        """The ``train`` uploads held since the last call (``hold_uploads``)."""
        held, self._held = self._held, {}
        return held

    def _client_result(self, phase: str, c: int, payloads: dict, metrics: dict, errors: dict,
                       stats: PhaseStats) -> ClientResult | None:
        """The validated result of logical client ``c`` from its node's unpacked reply (None:
        excluded, with the reason in ``stats``)."""
        if c in errors:
            err = str(errors[c])
            log(WARNING, "logical client %s raised in phase %s; excluded:\n%s", c, phase, err)
            stats.excluded.append({"client": c, "reason": err.strip().splitlines()[-1][:300]})
            return None
        if c not in metrics:
            stats.excluded.append({"client": c, "reason": "no reply record"})
            return None
        payload = payloads.get(c, {})
        stats.bytes_up += payload_size(payload)
        mets = dict(metrics[c])
        try:
            if phase != "evaluate" and phase != "topk":
                validate_payload(payload, self.expected_payload(phase, c))
                n = mets.get("num-examples", 0)
                if not (isinstance(n, (int, float)) and math.isfinite(n) and n >= 0):
                    raise PayloadError(f"num-examples: expected a finite number >= 0, got {n!r}")
        except PayloadError as e:
            log(WARNING, "logical client %s: invalid payload in phase %s (%s); excluded", c, phase, e)
            stats.excluded.append({"client": c, "reason": f"invalid payload: {e}"})
            return None
        return ClientResult(payload, mets)

    @staticmethod
    def _unpack_reply(rep: RecordDict, prefix: str = "") -> tuple[dict, dict, dict]:
        """(payloads, metrics, errors) per client of a reply (``corolla.protocol``)."""
        res = rep["results"] if "results" in rep else {}
        payloads = unpack({k: v.numpy() for k, v in rep[f"{prefix}payload"].items()}) \
            if f"{prefix}payload" in rep else {}
        return (payloads, loads_per_client(res.get(f"{prefix}metrics")),
                loads_per_client(res.get(f"{prefix}errors")))

    def parse_replies(self, phase: str, sent: list[tuple[int, RecordDict]], replies, stats: PhaseStats,
                      rnd: int = 0) -> tuple[dict[int, ClientResult], dict[int, ClientResult]]:
        """Validate replies (an iterable of ``(message index, reply)``); returns the valid results
        of the phase and of the evaluation the messages carried."""
        out: dict[int, ClientResult] = {}
        evals: dict[int, ClientResult] = {}
        for idx, rep in replies:
            node, content = sent[idx]
            conf = content["config"]
            cids = json.loads(conf["clients"])
            ecids = json.loads(conf["eval-clients"]) if "eval-clients" in conf else []
            if isinstance(rep, str):
                gone = sorted(set(cids) | set(ecids))
                if rep.startswith(TIMEOUT_PREFIX):
                    # slow or gone: this phase loses its contribution; it is asked again next round
                    # unless the SuperLink has dropped it from the node list by then
                    log(WARNING, "node %s: %s in phase %s; its logical clients %s are excluded from "
                        "this phase", node, rep, phase, gone)
                else:
                    log(WARNING, "node %s failed in phase %s (%s); its logical clients %s are excluded "
                        "from this run", node, phase, rep.splitlines()[0] if rep else rep, gone)
                    self.dead_nodes.add(node)
                stats.excluded += [{"client": c, "reason": f"node failed: {rep[:200]}"} for c in gone]
                continue
            stats.replies += 1
            try:
                parts = [self._unpack_reply(rep, "eval-") if ecids else ({}, {}, {}), self._unpack_reply(rep)]
            except (PayloadError, ValueError, KeyError) as e:
                log(WARNING, "node %s: malformed reply in phase %s (%s); its logical clients %s are excluded",
                    node, phase, e, sorted(set(cids) | set(ecids)))
                stats.excluded += [{"client": c, "reason": f"malformed reply: {e}"} for c in sorted(set(cids) | set(ecids))]
                continue
            node_compute = sum(float(m.get("compute-s", 0.0)) for _, mets, _ in parts for m in mets.values())
            for c in ecids:
                res = self._client_result("evaluate", c, *parts[0], stats)
                if res is not None:
                    evals[c] = res
            for c in cids:
                res = self._client_result(phase, c, *parts[1], stats)
                if res is not None:
                    out[c] = self.accept(phase, rnd, c, res)
            stats.compute_s = max(stats.compute_s, node_compute)
        return out, evals

    def exchange(self, transport: Transport, phase: str, rnd: int, targets: list[int], shared, personal,
                 ev: EvalRequest | None = None
                 ) -> tuple[dict[int, ClientResult], PhaseStats, dict[int, ClientResult]]:
        """One phase: build the messages, exchange them, validate the replies. Returns the phase's
        results, its stats and the results of the evaluation ``ev`` it carried."""
        t0 = time.perf_counter()
        stats = PhaseStats(phase if ev is None else f"{phase}+evaluate")
        contents, stats.bytes_down = self.build_contents(phase, rnd, targets, shared, personal, ev)
        replies = transport.exchange(contents, self.message_type(phase), self.cfg["phase-timeout"]) if contents else []
        results, evals = self.parse_replies(phase, contents, replies, stats, rnd)
        stats.wall_s = time.perf_counter() - t0
        return results, stats, evals

    # ------------------------------------------------------------------ nodes
    def handshake(self, transport: Transport, node_ids: list[int]) -> None:
        """Ask ``node_ids`` which logical clients they host (``auto`` nodes: which they can host)."""
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
            if "data-stats" in info and not self.data_stats:
                self.data_stats = json.loads(info["data-stats"])
            hosted = {int(c): v for c, v in json.loads(info["hosted"]).items()}
            if bool(info.get("auto", False)):
                # the node can host any logical client: it gets a block of those no fixed node hosts
                self.auto_nodes.add(node)
                for c, v in hosted.items():
                    self.client_info.setdefault(c, v)
                self.nodes[node] = []
                log(INFO, "node %s takes logical clients assigned by the server (clients=auto)", node)
                continue
            mine = []
            for c, v in sorted(hosted.items()):
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
        nodes changes. Every client's data and randomness depend on its id alone, so where it runs
        does not change the results; its state moves with it when the nodes share ``state-dir``."""
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

    def refresh_nodes(self, transport: Transport) -> None:
        live = set(transport.node_ids())
        for node in list(self.nodes):
            if node not in live and node not in self.dead_nodes:
                log(WARNING, "node %s left; its logical clients %s are %s", node, self.nodes[node],
                    "reassigned" if node in self.auto_nodes else "excluded")
                self.dead_nodes.add(node)
        self.handshake(transport, sorted(live - set(self.nodes) - self.dead_nodes))
        self.assign_auto()

    def available(self) -> list[int]:
        return sorted(c for c, v in self.clients.items() if v["node"] not in self.dead_nodes)

    # ------------------------------------------------------------------ evaluation
    def evaluates(self, rnd: int, num_rounds: int) -> bool:
        """Round ``rnd`` is evaluated: every ``eval-every`` rounds and after the last."""
        return rnd % self.cfg["eval-every"] == 0 or rnd == num_rounds

    def eval_targets(self, rnd: int, replied: set[int]) -> list[int]:
        """*hook*: the logical clients asked to evaluate round ``rnd``; ``replied`` sent their
        metrics with their training reply already. Default: every available client that did not."""
        return [c for c in self.available() if c not in replied]

    def eval_fuses_after(self, rnd: int) -> bool:
        """*hook*: True when round ``rnd``'s evaluation may run on the clients right after the
        round's last phase, in that phase's message (its ``evaluate_download`` must not depend on
        that phase's replies). Otherwise it travels with the next round's first message."""
        return False

    def evaluated(self, rnd: int, results: dict[int, ClientResult]) -> None:
        """*hook*: called with the results of round ``rnd``'s evaluation exchange."""

    def evaluation_request(self, rnd: int, when: str) -> EvalRequest:
        targets = self.eval_targets(rnd, set(self._reply_evals))
        shared, personal = self.evaluate_download(rnd, targets) if targets else ({}, {})
        return EvalRequest(rnd, targets, shared, personal, when, set(self.available()))

    def finish_evaluation(self, ev: EvalRequest, results: dict[int, ClientResult],
                          reply_evals: dict[int, ClientResult]) -> dict[str, Any]:
        """Round ``ev.rnd``'s metrics: those sent with training replies, updated by the results
        of its evaluation exchange (over the clients available when it was requested)."""
        if ev.targets:
            self.evaluated(ev.rnd, results)
        pooled = {c: r for c, r in reply_evals.items() if c in ev.available}
        pooled.update(results)
        return self.aggregate_metrics(pooled)

    def evaluate(self, transport: Transport, rnd: int) -> tuple[dict[str, Any], PhaseStats | None]:
        """Round ``rnd``'s evaluation in an exchange of its own (None: no client had to be asked)."""
        ev = self.evaluation_request(rnd, "before")
        reply_evals, self._reply_evals = self._reply_evals, {}
        results, stats = {}, None
        if ev.targets:
            results, stats, _ = self.exchange(transport, "evaluate", rnd, ev.targets, ev.shared, ev.personal)
        return self.finish_evaluation(ev, results, reply_evals), stats

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
            if self.cfg.get("report-per-client"):
                per_client = {}
                for cid in sorted(results):
                    vals = {k[len(split) + 1:]: np.asarray(v) for k, v in results[cid].metrics.items()
                            if k.startswith(split + "/") and not k.startswith(split + "/ties:")}
                    if vals:
                        per_client[str(cid)] = {**M.aggregate(vals, self.ks)[0],
                                                "users": len(next(iter(vals.values())))}
                out[split]["per_client"] = per_client
                out[split]["unweighted_mean"] = {
                    k: float(np.mean([m[k] for m in per_client.values()]))
                    for k in mets if per_client and all(k in m for m in per_client.values())}
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
            sent.append((node, RecordDict({"config": self._config("train", server_round, self.nodes.get(node, []))})))
            reps.append((i, f"error {r.error.code}: {r.error.reason}" if r.has_error() else r.content))
        stats = PhaseStats("train")
        results, _ = self.parse_replies("train", sent, reps, stats, server_round)
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
            _, mets, _ = self._unpack_reply(r.content)
            results.update({c: ClientResult({}, m) for c, m in mets.items()})
        agg = self.aggregate_metrics(results)
        return MetricRecord({k: v for k, v in agg["test"]["metrics"].items()})

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, *, recorder=None, transport: Transport | None = None,
              start_round: int = 1, **_: Any):
        """Run the rounds (our multi-phase loop instead of Flower's one train + one evaluate).

        With ``fused-evaluation`` (the default) a round is one exchange per node and phase: an
        evaluated round's evaluation runs in its last phase's message (:meth:`eval_fuses_after`)
        or travels with the next round's first message, where the clients evaluate before they
        train; only the last round's evaluation (or one with no next phase to carry it) is an
        exchange of its own. Clients that evaluate in their training reply are not asked again.
        The evaluated models are the same as with separate evaluation messages (tested).

        ``recorder`` (``server_app.results.RunRecorder``) receives every round's record once its
        evaluation is known, writes the checkpoint, and decides early stopping.
        """
        transport = transport or GridTransport(grid)
        num_rounds = num_rounds or self.cfg["num-rounds"]
        if not self.nodes:
            self.handshake(transport, transport.node_ids())
            if not self.clients:
                raise RuntimeError("no node hosts any logical client")
            self.setup()
        self.summary()
        fuse = bool(self.cfg.get("fused-evaluation", True))
        deferred: _Deferred | None = None

        def close(rnd, phase_stats, train_metrics, evaluation, wall_s, targets) -> bool:
            if recorder is None:
                return False
            return recorder.end_round(self, rnd, phase_stats, train_metrics, evaluation, wall_s, targets)

        for rnd in range(start_round, num_rounds + 1):
            t0 = time.perf_counter()
            self.restore_round = rnd - 1   # a node that joins now drops client state newer than that
            self.refresh_nodes(transport)
            if not self.available():
                raise RuntimeError(f"round {rnd}: no node with logical clients is left")
            targets = self.sample(rnd, self.available())
            self._reply_evals = {}
            phases = self.phases(rnd)
            evaluate = self.evaluates(rnd, num_rounds)
            after = fuse and evaluate and bool(phases) and self.eval_fuses_after(rnd)
            phase_stats: list[PhaseStats] = []
            train_metrics: dict[str, Any] = {}
            after_ev, after_results = None, {}
            for i, phase in enumerate(phases):
                ptargets = self.phase_targets(phase, rnd, targets)
                shared, personal = self.configure_phase(phase, rnd, ptargets)
                ev = None
                if i == 0 and deferred is not None:
                    ev = deferred.ev
                elif i == len(phases) - 1 and after:
                    ev = after_ev = self.evaluation_request(rnd, "after")
                results, stats, evals = self.exchange(transport, phase, rnd, ptargets, shared, personal,
                                                      ev if ev is not None and ev.targets else None)
                if recorder:
                    recorder.progress(rnd, stats.name, stats, len(results), len(ptargets))
                if i == 0 and deferred is not None:
                    d, deferred = deferred, None
                    evaluation = self.finish_evaluation(d.ev, evals, d.reply_evals)
                    if close(d.rnd, d.phase_stats, d.train_metrics, evaluation, d.wall_s, d.targets):
                        # this round's training is not used: the run ends after round d.rnd
                        if recorder:
                            recorder.discard(stats)
                        log(INFO, "early stop after round %d (patience %d)", d.rnd, self.cfg["patience"])
                        return recorder
                elif ev is after_ev and ev is not None:
                    after_results = evals
                train_metrics.update(self.aggregate_phase(phase, rnd, results))
                phase_stats.append(stats)
            if deferred is not None:   # no phase this round to carry the previous evaluation
                d, deferred = deferred, None
                evaluation, stats = self._evaluate_deferred(transport, d)
                if stats is not None:
                    d.phase_stats.append(stats)
                    if recorder:
                        recorder.progress(d.rnd, "evaluate", stats, len(d.ev.targets), len(d.ev.targets))
                if close(d.rnd, d.phase_stats, d.train_metrics, evaluation, d.wall_s, d.targets):
                    log(INFO, "early stop after round %d (patience %d)", d.rnd, self.cfg["patience"])
                    return recorder
            evaluation = None
            if evaluate and after_ev is not None:
                evaluation = self.finish_evaluation(after_ev, after_results, self._reply_evals)
            elif evaluate:
                ev = self.evaluation_request(rnd, "before")
                if ev.targets and fuse and rnd < num_rounds and self.phases(rnd + 1):
                    deferred = _Deferred(rnd, ev, self._reply_evals, phase_stats, train_metrics,
                                         time.perf_counter() - t0, targets)
                    continue
                results, stats = {}, None
                if ev.targets:
                    results, stats, _ = self.exchange(transport, "evaluate", rnd, ev.targets, ev.shared, ev.personal)
                    phase_stats.append(stats)
                    if recorder:
                        recorder.progress(rnd, "evaluate", stats, len(results), len(ev.targets))
                evaluation = self.finish_evaluation(ev, results, self._reply_evals)
            if close(rnd, phase_stats, train_metrics, evaluation, time.perf_counter() - t0, targets):
                log(INFO, "early stop after round %d (patience %d)", rnd, self.cfg["patience"])
                break
        return recorder

    def _evaluate_deferred(self, transport: Transport, d: _Deferred) -> tuple[dict[str, Any], PhaseStats | None]:
        ev = d.ev
        results, stats, _ = self.exchange(transport, "evaluate", ev.rnd, ev.targets, ev.shared, ev.personal)
        return self.finish_evaluation(ev, results, d.reply_evals), stats


@dataclass
class EvalRequest:
    """The evaluation of round ``rnd`` by ``targets`` with downloads ``shared``/``personal``,
    run ``before`` or ``after`` the phase of the message that carries it (``corolla.protocol``);
    ``available``: the clients available when it was requested."""
    rnd: int
    targets: list[int]
    shared: dict[str, np.ndarray]
    personal: dict[int, dict[str, np.ndarray]]
    when: str = "before"
    available: set[int] = field(default_factory=set)


@dataclass
class _Deferred:
    """An evaluated round whose evaluation travels with the next round's first message."""
    rnd: int
    ev: EvalRequest
    reply_evals: dict[int, ClientResult]
    phase_stats: list[PhaseStats]
    train_metrics: dict[str, Any]
    wall_s: float
    targets: list[int]


def same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Whether two array dicts hold the same keys and values (so they are sent once)."""
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if x is y:
            continue
        if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y):
            return False
    return True
