"""One phase over the nodes: a strategy's ``Download`` (``corolla.round``) grouped into one message
per node (``corolla.messages``), exchanged through a transport, every reply validated per logical
client.

A node gets one message with all its targeted logical clients, or several of at most
``clients-per-message`` clients each (which bounds message size and server memory); the shared
arrays travel once per message, an evaluation carried by the message (fused evaluation) reuses
them when they are the same arrays (``eval-shared = global``). Every reply payload is validated
(keys, shape, dtype, finite values; ``corolla.protocol.validate_payload``) against the strategy's
``expected_payload`` before the strategy sees it; an invalid payload, or a logical client that
raised, is logged with its id and excluded, never crashes the run.

A reply passes these checks in order, each a small method of :class:`Exchanger`:
:meth:`~Exchanger.transport_error` (an error text instead of a reply), :meth:`~Exchanger.decode`
(a malformed reply), :meth:`~Exchanger.strangers` (clients the node was not asked for),
:meth:`~Exchanger.evaluations` (the evaluation the message carried), :meth:`~Exchanger.secure_reply`
(one masked vector instead of uploads), then per client :meth:`~Exchanger.client_result`
(errors, payload, metrics, ``num-examples``), :meth:`~Exchanger.reply_evaluation` (metrics a
client sends with its training reply), :meth:`~Exchanger.state_check` (did it start from its
last round's state) and the strategy's own ``accept``. :meth:`~Exchanger.exchange` returns a
:class:`PhaseOutcome`.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass, field
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.messages import PROTOCOL_VERSION, ClientOut, EvalPart, PhaseReply, PhaseRequest, RunInfo
from corolla.protocol import PayloadError, nonfinite_metric, payload_size, validate_payload
from corolla.round import DEFAULT_CONTROL, Download, Phase, SecAggStep
from server_app.roster import Roster
from server_app.transport import REJECTED_PREFIX, TIMEOUT_PREFIX, Transport
from strategies.base import ClientResult, CorollaStrategy


def versions() -> dict[str, str]:
    """What a node must match (``corolla.messages.version_mismatch``)."""
    from importlib.metadata import version

    import corolla
    return {"protocol": str(PROTOCOL_VERSION), "corolla": corolla.__version__, "flwr": version("flwr")}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def message_type(phase: str) -> str:
    """Flower message type of a phase: every training phase is a ``train`` message (the phase
    name travels in the config), evaluation ``evaluate``, handshake/top-K ``query.<name>``,
    secure aggregation ``query.secagg``."""
    if phase == Phase.EVALUATE:
        return "evaluate"
    if phase in (Phase.HANDSHAKE, Phase.TOPK):
        return f"query.{phase}"
    if phase in tuple(SecAggStep):
        return "query.secagg"
    return "train"


@dataclass
class PhaseStats:
    name: str
    bytes_up: int = 0
    bytes_down: int = 0
    wall_s: float = 0.0
    replies: int = 0
    compute_s: float = 0.0  # the largest per-node sum of the clients' own phase time
    excluded: list[dict[str, Any]] = field(default_factory=list)
    state_lost: list[int] = field(default_factory=list)   # clients that trained from an older state
    raised: set[int] = field(default_factory=set)   # clients whose own code raised (not their node's transport)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "wall_s": round(self.wall_s, 4), "compute_s": round(self.compute_s, 4),
                "replies": self.replies, "excluded": self.excluded,
                **({"state_lost": self.state_lost} if self.state_lost else {})}


@dataclass
class EvalRequest:
    """The evaluation of round ``rnd`` by ``targets`` with ``download``, run ``before`` or ``after``
    the phase of the message that carries it; ``available``: the clients available when it was
    requested."""
    rnd: int
    targets: list[int]
    download: Download
    when: str = "before"
    available: set[int] = field(default_factory=set)


@dataclass
class PhaseOutcome:
    """What one exchange gave: the phase's valid results, its stats, the valid results of the
    evaluation its messages carried, and the metrics clients sent with their training replies
    (the one-user harness evaluates its post-training model there)."""
    results: dict[int, ClientResult]
    stats: PhaseStats
    evals: dict[int, ClientResult] = field(default_factory=dict)
    reply_evals: dict[int, ClientResult] = field(default_factory=dict)


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


class Exchanger:
    """Builds, sends and validates the messages of a run's phases."""

    def __init__(self, strategy: CorollaStrategy, roster: Roster, transport: Transport, run: RunInfo,
                 cfg: dict[str, Any]):
        self.strategy, self.roster, self.transport, self.run, self.cfg = strategy, roster, transport, run, cfg
        self.restore_round = 0        # a node that joins drops client state newer than this round
        self.trained: dict[int, int] = {}   # client -> the last round its ``train`` result was accepted
        self._bound: float | None = None    # this phase's bound on num-examples

    # ------------------------------------------------------------------ requests
    def handshake_request(self) -> dict:
        """The handshake message: the only one that carries the run config."""
        return PhaseRequest(Phase.HANDSHAKE, 0, [], self.run, restore_round=self.restore_round, cfg=self.cfg,
                            versions=versions(), nonce=secrets.token_hex(16)).encode()

    def handshake_timeout(self) -> float:
        """How long a node's first contact may take: ``handshake-timeout`` (a ClientApp's start and
        data load), never less than ``phase-timeout``. A run resumed from a ``config.json`` written
        before the key existed has none and keeps the bound it started with, ``phase-timeout``."""
        phase = float(self.cfg["phase-timeout"])
        return max(float(self.cfg.get("handshake-timeout", phase)), phase)

    def handshake(self, node_ids: list[int]) -> None:
        self.roster.handshake(self.transport, node_ids, self.handshake_request, self.handshake_timeout())

    def refresh(self) -> None:
        self.roster.refresh(self.transport, self.handshake_request, self.handshake_timeout())

    def build(self, phase: Phase, rnd: int, targets: list[int], download: Download,
              ev: EvalRequest | None = None, secure=None
              ) -> tuple[list[tuple[int, PhaseRequest]], int, list[dict[str, Any]]]:
        """Requests ``(node, request)`` for ``targets`` (and the evaluation ``ev`` carried with
        them); returns (requests, bytes down, the targets not sent with the reason)."""
        out: list[tuple[int, PhaseRequest]] = []
        left_out: list[dict[str, Any]] = []
        tset = set(targets)
        eset = set(ev.targets) if ev is not None else set()
        how = "none"
        if ev is not None and ev.download.shared:
            how = "global" if download.shared and same_arrays(ev.download.shared, download.shared) else "own"
        cpm = int(self.cfg.get("clients-per-message", 0) or 0)
        personal = download.personal
        for node, cids in sorted(self.roster.nodes.items()):
            mine = [c for c in cids if c in tset or c in eset]
            if node in self.roster.dead_nodes or not mine:
                continue
            sec = secure.collect_config(node) if secure is not None else None
            # a secure phase is one message per node (one masked vector per node and round), and none
            # of its clients' training for a node that did not complete the key sharing
            for chunk in ([mine[i:i + cpm] for i in range(0, len(mine), cpm)] if cpm > 0 and secure is None
                          else [mine]):
                train = [c for c in chunk if c in tset]
                evs = [c for c in chunk if c in eset]
                if secure is not None and sec is None and train:
                    for c in train:
                        left_out.append({"client": c, "node": node, "reason": "secagg: its node did not complete "
                                         "the key sharing; it gets no message of the phase"})
                    train = []
                    if not evs:
                        continue
                req = PhaseRequest(phase, rnd, train, self.run, restore_round=self.restore_round,
                                   personal={c: personal[c] for c in train if personal.get(c)},
                                   secagg=sec if sec is not None and train else {},
                                   control={c: download.control[c] for c in train if c in download.control})
                if download.shared and (train or (evs and how == "global")):
                    req.shared = download.shared
                if evs:
                    assert ev is not None
                    req.evaluation = EvalPart(ev.rnd, evs, ev.when, how, ev.download.shared if how == "own" else {},
                                              {c: ev.download.personal[c] for c in evs if ev.download.personal.get(c)})
                out.append((node, req))
        return out, sum(r.bytes_down() for _, r in out), left_out

    # ------------------------------------------------------------------ replies
    def expected_bytes(self, phase: Phase, req: PhaseRequest) -> int | None:
        """The most array bytes a valid reply to ``req`` can carry (None: no bound): every array
        the strategy expects from its clients (optional ones included), their ``.npy`` headers
        and the packing's id arrays. Evaluation and top-K replies carry no arrays."""
        phase = Phase(phase)
        if phase == Phase.HANDSHAKE:
            return None
        n = 0
        if phase.trains:
            for c in req.clients:
                n += sum(int(np.prod(spec.bound())) * np.dtype(spec.dtype).itemsize + 256
                         for spec in self.strategy.expected_payload(phase, c, req.control_of(c)).values())
        return n + 512 * (len(req.clients) + 8)

    def _bound_num_examples(self) -> float:
        """An upper bound on a client's ``num-examples``: every training interaction of the run,
        with negatives (×1000); a larger count is not a count. Computed once per phase (a sum
        over the roster per client was O(clients²): minutes a round at 30,000 clients)."""
        if self._bound is None:
            self._bound = self._compute_bound()
        return self._bound

    def _compute_bound(self) -> float:
        total = sum(int(v.get("train", 0)) for v in self.roster.clients.values()) or \
            sum(int(v.get("train", 0)) for v in self.roster.client_info.values())
        return float(1000 * total) if total else float(2 ** 53)

    def _exclude(self, stats: PhaseStats, node: int, c: int, reason: str) -> None:
        stats.excluded.append({"client": c, "node": node, "reason": reason})

    def transport_error(self, phase: Phase, node: int, req: PhaseRequest, rep: str, stats: PhaseStats) -> None:
        """An error text instead of a reply: too large (the node flagged), late (asked again next
        round), or failed (the node is out for the run); every client of the message excluded."""
        ecids = req.evaluation.clients if req.evaluation is not None else []
        gone = sorted(set(req.clients) | set(ecids))
        if rep.startswith(REJECTED_PREFIX):
            log(WARNING, "node %s: %s in phase %s; its logical clients %s are excluded from this phase",
                node, rep, phase, gone)
            self.roster.flag(node, rep)
        elif rep.startswith(TIMEOUT_PREFIX):
            # slow or gone: this phase loses its contribution; it is asked again next round unless
            # the SuperLink has dropped it from the node list by then
            log(WARNING, "node %s: %s in phase %s; its logical clients %s are excluded from this phase",
                node, rep, phase, gone)
        else:
            log(WARNING, "node %s failed in phase %s (%s); its logical clients %s are excluded from this run",
                node, phase, rep.splitlines()[0] if rep else rep, gone)
            self.roster.dead_nodes.add(node)
        for c in gone:
            self._exclude(stats, node, c, rep[:200] if rep.startswith(REJECTED_PREFIX) else f"node failed: {rep[:200]}")

    def decode(self, phase: Phase, node: int, req: PhaseRequest, rep: dict, stats: PhaseStats) -> PhaseReply | None:
        """The decoded reply, or None (a malformed reply: every client excluded, the node flagged)."""
        ecids = req.evaluation.clients if req.evaluation is not None else []
        try:
            return PhaseReply.decode(rep, evaluation=bool(ecids))
        except Exception as e:  # noqa: BLE001 - whatever a node sends, the run goes on
            why = f"{type(e).__name__}: {e}" if not isinstance(e, PayloadError) else str(e)
            gone = sorted(set(req.clients) | set(ecids))
            log(WARNING, "node %s: malformed reply in phase %s (%s); its logical clients %s are excluded",
                node, phase, why[:300], gone)
            for c in gone:
                self._exclude(stats, node, c, f"malformed reply: {why[:300]}")
            self.roster.flag(node, f"malformed reply in phase {phase}")
            return None

    def strangers(self, phase: Phase, node: int, req: PhaseRequest, reply: PhaseReply, stats: PhaseStats) -> None:
        """Ids the node was not asked for in this message: never used; the node is flagged."""
        ecids = req.evaluation.clients if req.evaluation is not None else []
        stranger = sorted(reply.clients() - set(req.clients) - set(ecids))
        if not stranger:
            return
        owners = {c: self.roster.clients.get(c, {}).get("node") for c in stranger}
        for c in stranger:
            why = "hosted by another node" if owners[c] not in (None, node) else "not asked of this node in this phase"
            self._exclude(stats, node, c, f"reply for a client {why}; ignored")
        log(WARNING, "node %s replied for logical clients %s it was not asked for in phase %s; ignored and the node "
            "flagged", node, stranger[:20], phase)
        self.roster.flag(node, f"replied for clients it was not asked for ({len(stranger)}) in phase {phase}")

    def evaluations(self, node: int, req: PhaseRequest, reply: PhaseReply, stats: PhaseStats
                    ) -> dict[int, ClientResult]:
        """The valid results of the evaluation the message carried."""
        out = {}
        for c in (req.evaluation.clients if req.evaluation is not None else []):
            res = self.client_result(Phase.EVALUATE, node, c, (reply.eval_results, reply.eval_errors), stats)
            if res is not None:
                out[c] = res
        return out

    def client_result(self, phase: Phase, node: int, c: int,
                      reply_part: tuple[dict[int, ClientOut], dict[int, str]],
                      stats: PhaseStats, control=None) -> ClientResult | None:
        """The validated result of logical client ``c`` (None: excluded, the reason in ``stats``)."""
        phase = Phase(phase)
        results, errors = reply_part
        if c in errors:
            err = str(errors[c])
            log(WARNING, "logical client %s raised in phase %s; excluded:\n%s", c, phase, err)
            stats.raised.add(c)
            self._exclude(stats, node, c, (err.strip().splitlines() or ["(no message)"])[-1][:300])
            return None
        if c not in results:
            self._exclude(stats, node, c, "no reply record")
            return None
        payload = results[c].payload
        stats.bytes_up += payload_size(payload)
        mets = dict(results[c].metrics)
        try:
            bad = nonfinite_metric(mets)
            if bad is not None:
                raise PayloadError(f"metric {bad[:60]!r}: expected finite numbers")
            if phase.trains:
                validate_payload(payload, self.strategy.expected_payload(phase, c, control or DEFAULT_CONTROL))
                if phase in self.strategy.counted_phases and "num-examples" not in mets:
                    raise PayloadError(f"num-examples: missing (phase {phase} weights by it)")
                n = mets.get("num-examples", 0)
                if isinstance(n, bool) or not (isinstance(n, (int, float)) and math.isfinite(n)
                                               and 0 <= n <= self._bound_num_examples()):
                    raise PayloadError(f"num-examples: expected a count between 0 and the run's training "
                                       f"interactions, got {n!r}")
        except PayloadError as e:
            log(WARNING, "logical client %s (node %s): invalid payload in phase %s (%s); excluded", c, node, phase, e)
            self._exclude(stats, node, c, f"invalid payload: {e}")
            return None
        return ClientResult(payload, mets)

    @staticmethod
    def secure_reply(secure, node: int, cids: list[int], reply: PhaseReply) -> tuple[set[int], str | None]:
        """The clients that raised on ``node`` and None when its secure reply is taken (its masked
        vector added to the sum), else ``(set(), why not)``. A reply that carries any client's
        upload or metrics is not taken: a node in a secure phase sends nothing in the clear."""
        if reply.results or reply.errors or reply.orphans:
            return set(), "it sent per-client uploads or metrics in a secure phase"
        try:
            failed = json.loads(reply.secure_info.get("failed", "[]"))
        except (TypeError, ValueError):
            failed = None
        if not isinstance(failed, list) or not set(failed) <= set(cids) or len(set(failed)) != len(failed):
            return set(), "its list of clients that raised is not a list of its clients"
        comp = reply.secure_info.get("compute-s", 0.0)
        if not _finite(comp) or comp < 0:
            return set(), "its compute time is not a number"
        why = secure.add_masked(node, reply.secure.get("masked"))
        return (set(failed), None) if why is None else (set(), why)

    @staticmethod
    def reply_evaluation(res: ClientResult) -> ClientResult | None:
        """The ``valid/`` and ``test/`` metrics a client sent with its training reply (its own
        post-training model: the one-user harness), or None."""
        mets = {k: v for k, v in res.metrics.items() if k.startswith(("valid/", "test/"))}
        return ClientResult({}, mets) if mets else None

    def state_check(self, rnd: int, node: int, c: int, res: ClientResult, stats: PhaseStats) -> None:
        """Did a client that trained start from the state of its last round? (Its node does not share
        the state-dir of the node it came from, if not.)"""
        start = res.metrics.get("state-round")
        if _finite(start) and start < self.trained.get(c, 0):
            log(WARNING, "logical client %s (node %s) trained round %s from its state of round %s, not %s: its "
                "state was lost (its node does not share the state-dir of the node it came from)", c, node, rnd,
                start, self.trained[c])
            stats.state_lost.append(c)
        self.trained[c] = rnd

    def _secure_node(self, phase, rnd, node, req, reply, secure, stats, out) -> None:
        failed, why = self.secure_reply(secure, node, req.clients, reply)
        if why is not None:
            log(WARNING, "node %s: its masked vector is not used in phase %s (%s); its clients %s are excluded",
                node, phase, why, req.clients)
            for c in req.clients:
                self._exclude(stats, node, c, f"secagg: {why[:200]}")
            self.roster.flag(node, f"secure phase {phase}: {why[:120]}")
            return
        stats.bytes_up += secure.masked_bytes()
        stats.compute_s = max(stats.compute_s, float(reply.secure_info.get("compute-s", 0.0)))
        for c in req.clients:
            if c in failed:   # its error text stays on its node
                self._exclude(stats, node, c, "raised on its node (secure aggregation: no detail leaves it)")
                continue
            out[c] = ClientResult({}, {})   # its upload is in the node's masked vector, never seen alone
            if phase == Phase.TRAIN:
                self.trained[c] = rnd

    def parse(self, phase: Phase, sent: list[tuple[int, PhaseRequest]], replies, stats: PhaseStats,
              rnd: int = 0, secure=None) -> PhaseOutcome:
        """Validate replies (an iterable of ``(message index, flat reply | error text)``)."""
        phase = Phase(phase)
        self._bound = None   # the roster may have changed since the last phase
        outcome = PhaseOutcome({}, stats)
        for idx, rep in replies:
            node, req = sent[idx]
            if isinstance(rep, str):
                self.transport_error(phase, node, req, rep, stats)
                continue
            stats.replies += 1
            reply = self.decode(phase, node, req, rep, stats)
            if reply is None:
                continue
            self.strangers(phase, node, req, reply, stats)
            outcome.evals.update(self.evaluations(node, req, reply, stats))
            if secure is not None and req.secagg:   # one masked vector for the node's clients
                self._secure_node(phase, rnd, node, req, reply, secure, stats, outcome.results)
                continue
            node_compute = sum(float(r.metrics.get("compute-s", 0.0)) if _finite(r.metrics.get("compute-s", 0.0))
                               else 0.0 for part in (reply.eval_results, reply.results) for r in part.values())
            for c in req.clients:
                res = self.client_result(phase, node, c, (reply.results, reply.errors), stats, req.control_of(c))
                if res is None:
                    continue
                if phase.trains:
                    ev = self.reply_evaluation(res)
                    if ev is not None:
                        outcome.reply_evals[c] = ev
                if phase == Phase.TRAIN:
                    self.state_check(rnd, node, c, res, stats)
                try:   # the strategy's own checks of what it folds in (PayloadError: excluded)
                    outcome.results[c] = self.strategy.accept(phase, rnd, c, res)
                except PayloadError as e:
                    log(WARNING, "logical client %s (node %s): %s in phase %s; excluded", c, node, e, phase)
                    self._exclude(stats, node, c, f"invalid payload: {e}")
            stats.compute_s = max(stats.compute_s, node_compute)
        return outcome

    def exchange(self, phase: Phase, rnd: int, targets: list[int], download: Download,
                 ev: EvalRequest | None = None, secure=None) -> PhaseOutcome:
        """One phase: build the messages, hand each targeted client's download to the strategy's
        :meth:`~strategies.base.CorollaStrategy.delivered`, exchange them, validate the replies.
        With ``secure`` (``server_app.secure.SecureRound``) the nodes send masked sums instead of
        uploads."""
        t0 = time.perf_counter()
        phase = Phase(phase)
        stats = PhaseStats(str(phase) if ev is None else f"{phase}+evaluate")
        sent, stats.bytes_down, left_out = self.build(phase, rnd, targets, download, ev, secure)
        stats.excluded += left_out
        if phase.trains:   # an evaluation's download is handed over when it is requested (server_app.loop)
            self.strategy.delivered(phase, rnd, [c for _, r in sent for c in r.clients])
        limits = [self.expected_bytes(phase, r) if secure is None   # with secure: one masked vector per node
                  else secure.masked_bytes() + 512 * (len(r.clients) + 8) for _, r in sent]
        replies = self.transport.exchange([(n, r.encode()) for n, r in sent], message_type(phase),
                                          self.cfg["phase-timeout"], limits) if sent else []
        outcome = self.parse(phase, sent, replies, stats, rnd, secure)
        stats.wall_s = time.perf_counter() - t0
        return outcome
