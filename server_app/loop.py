"""The round loop: it executes a method's rounds as the strategy states them (``corolla.round``).

A round is its :class:`~corolla.round.RoundSpec`: the phases in order, each ``configure -> send
/receive -> validate -> aggregate`` (one exchange per node: ``server_app.exchange``; a secure
phase adds the SecAgg+ exchanges around it: ``server_app.secure``), then the round's evaluation
when it is evaluated. With ``fused-evaluation`` (the default) a round is one exchange per node
and phase: an evaluated round's evaluation runs in its last phase's message
(``RoundSpec.eval_fuses_after``) or travels with the next round's first message, where the clients evaluate
before they train; only the last round's evaluation (or one with no next phase to carry it) is an
exchange of its own. Clients that evaluate in their training reply are not asked again. The
evaluated models are the same as with separate evaluation messages (tested).

The stages, each a small method: :meth:`RoundLoop.start` (the first handshake), :meth:`~RoundLoop.run_round`
(one round), :meth:`~RoundLoop.exchange_phase` and :meth:`~RoundLoop.aggregate_phase` (one phase,
secure or not, with the previous round recorded between them), :meth:`~RoundLoop.request`
and :meth:`~RoundLoop.finish` (an evaluation's download and its metrics), :meth:`~RoundLoop.settle`
(a round whose evaluation came back with a later message) and :meth:`~RoundLoop.evaluate_round`.

``recorder`` (``server_app.results.RunRecorder``) receives every round's record once its
evaluation is known, writes the checkpoint, and decides early stopping.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

from flwr.common.logger import log

from corolla.config import int_list
from corolla.round import Download, Phase, PhaseSpec, RoundSpec
from server_app.evaluation import pool_metrics
from server_app.exchange import EvalRequest, Exchanger, PhaseOutcome, PhaseStats
from server_app.secure import SecureRound
from strategies.base import ClientResult, CorollaStrategy


class NoClients(RuntimeError):
    """No node hosts a logical client: one line with each distinct reason and its nodes (the
    same missing file on every node is said once)."""

    def __init__(self, failures: dict[int, str]):
        by_reason: dict[str, list[int]] = {}
        for node, why in sorted(failures.items()):
            why = re.sub(r"^error \d+: ", "", why.strip())
            why = re.sub(r"^<class '[\w.]+'>:<'(.*)'>$", r"\1", why, flags=re.S)   # Flower's error text
            by_reason.setdefault(why, []).append(node)
        parts = [f"{why} (node{'s' if len(ns) > 1 else ''} {', '.join(map(str, ns))})" for why, ns in by_reason.items()]
        super().__init__("no node could host a logical client: " + "; ".join(parts) if parts else
                         "no node hosts any logical client (no node is connected)")


class EveryClientRaised(RuntimeError):
    """Every logical client asked in a phase raised in its own code (not a lost or late node): the
    same defect on every client (a device mismatch, a missing package), not a hostile or unlucky
    few. Going on would aggregate nothing and report the untrained model round after round, so the
    run stops here; the checkpoint of the round before stays in the run folder."""

    def __init__(self, rnd: int, stats: PhaseStats, asked: int):
        reasons: dict[str, int] = {}
        for x in stats.excluded:
            if x["client"] in stats.raised:
                reasons[x["reason"]] = reasons.get(x["reason"], 0) + 1
        said = "; ".join(f"{why!r} ({n} client{'s' if n > 1 else ''})" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
        super().__init__(f"round {rnd}, phase {stats.name}: every one of the {asked} logical clients "
                         f"asked raised: {said} (each client's traceback is in the log)")


@dataclass
class RoundState:
    """What one round gathers as its phases run."""
    rnd: int
    targets: list[int]
    t0: float
    phase_stats: list[PhaseStats] = field(default_factory=list)
    train_metrics: dict[str, Any] = field(default_factory=dict)
    reply_evals: dict[int, ClientResult] = field(default_factory=dict)   # metrics sent with training
    after: EvalRequest | None = None             # its evaluation, run inside its last phase's message
    after_results: dict[int, ClientResult] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.t0


@dataclass
class Deferred:
    """An evaluated round whose evaluation travels with the next round's first message."""
    state: RoundState
    ev: EvalRequest
    wall_s: float


class RoundLoop:
    def __init__(self, strategy: CorollaStrategy, ex: Exchanger, recorder=None):
        self.s, self.ex, self.recorder = strategy, ex, recorder
        self.cfg = strategy.cfg
        self.ks = int_list(self.cfg, "topk")
        self.fuse = bool(self.cfg.get("fused-evaluation", True))

    # ------------------------------------------------------------------ evaluation
    def request(self, rnd: int, when: str, replied: set[int]) -> EvalRequest:
        """Round ``rnd``'s evaluation: its targets and download (a query), handed to the strategy
        as delivered (``replied``: clients that sent their metrics with training already)."""
        targets = self.s.eval_targets(rnd, replied)
        download = self.s.evaluate_download(rnd, targets) if targets else Download()
        if targets:
            self.s.delivered(Phase.EVALUATE, rnd, targets)
        return EvalRequest(rnd, targets, download, when, set(self.s.available()))

    def finish(self, ev: EvalRequest, results: dict[int, ClientResult],
               reply_evals: dict[int, ClientResult]) -> dict[str, Any]:
        """Round ``ev.rnd``'s metrics: those sent with training replies, updated by the results
        of its evaluation exchange (over the clients available when it was requested)."""
        if ev.targets:
            self.s.evaluated(ev.rnd, results)
        pooled = {c: r for c, r in reply_evals.items() if c in ev.available}
        pooled.update(results)
        return pool_metrics(pooled, self.ks, bool(self.cfg.get("report-per-client")), self.groups())

    def groups(self) -> dict[int, int]:
        """Each logical client's subgraph where its node reported one (one-user clients on a
        spectral partition), for the per-subgraph report."""
        clients = getattr(getattr(self.s, "roster", None), "clients", None) or {}
        return {c: int(v["group"]) for c, v in clients.items() if "group" in v}

    def _close(self, r: RoundState, evaluation, wall_s: float | None = None) -> bool:
        """Record round ``r`` (True: the run stops early after it)."""
        if self.recorder is None:
            return False
        return self.recorder.end_round(self.s, r.rnd, r.phase_stats, r.train_metrics, evaluation,
                                       r.wall_s if wall_s is None else wall_s, r.targets)

    def _progress(self, rnd: int, stats: PhaseStats, ok: int, targets: int) -> None:
        if self.recorder:
            self.recorder.progress(rnd, stats.name, stats, ok, targets)

    def _stop(self, rnd: int) -> None:
        log(INFO, "early stop after round %d (patience %d)", rnd, self.cfg["patience"])

    # ------------------------------------------------------------------ stages
    def start(self) -> None:
        """The first handshake (unless nodes are known: a resumed loop) and the strategy's setup."""
        if not self.ex.roster.nodes:
            self.ex.handshake(self.ex.transport.node_ids())
            if not self.ex.roster.clients:
                raise NoClients(self.ex.roster.failures)
            self.s.setup()
        self.s.summary()

    def begin_round(self, rnd: int) -> RoundState:
        """Nodes that joined are handshaked, the round's clients sampled."""
        self.ex.restore_round = rnd - 1   # a node that joins now drops client state newer than that
        self.ex.refresh()
        if not self.s.available():
            raise RuntimeError(f"round {rnd}: no node with logical clients is left")
        return RoundState(rnd, self.s.sample(rnd, self.s.available()), time.perf_counter())

    def exchange_phase(self, spec: PhaseSpec, r: RoundState, ev: EvalRequest | None
                       ) -> tuple[PhaseOutcome, SecureRound | None]:
        """One phase of round ``r`` (carrying the evaluation ``ev``) up to its replies: configure and
        exchange (with the SecAgg+ key exchanges first when it is summed securely)."""
        s, rnd = self.s, r.rnd
        targets = s.phase_targets(spec.phase, rnd, r.targets)
        download = s.configure_phase(spec.phase, rnd, targets)
        sec = None
        if spec.secure is not None:
            sec = SecureRound(self.ex, spec.phase, rnd, targets)   # keys and shares first
            sec.setup_and_share()
        out = self.ex.exchange(spec.phase, rnd, targets, download, ev if ev is not None and ev.targets else None,
                               secure=sec)
        r.reply_evals.update(out.reply_evals)
        self._progress(rnd, out.stats, len(out.results), len(targets))
        if targets and set(targets) <= out.stats.raised:
            raise EveryClientRaised(rnd, out.stats, len(targets))
        return out, sec

    def aggregate_phase(self, spec: PhaseSpec, r: RoundState, out: PhaseOutcome, sec: SecureRound | None) -> None:
        """The strategy folds the phase in (a secure phase: after the unmasking, the mean)."""
        s, rnd = self.s, r.rnd
        if sec is not None:
            sec.collect_stats = out.stats
            mean, mets, nodes = sec.unmask()
            r.train_metrics.update(s.aggregate_secure(spec.phase, rnd, mean, mets))
            r.train_metrics.update({"secagg-nodes": nodes, "secagg-weight": mets["secagg-weight"],
                                    "secagg-signed": mets["secagg-signed"]})
            r.phase_stats += sec.stats[:2] + [out.stats] + sec.stats[2:]
        else:
            r.train_metrics.update(s.aggregate_phase(spec.phase, rnd, out.results))
            r.phase_stats.append(out.stats)

    def settle(self, d: Deferred, results: dict[int, ClientResult], stats: PhaseStats | None = None) -> bool:
        """Round ``d``'s evaluation came back (with a later message, or its own exchange ``stats``):
        record it. True: the run stops after it."""
        evaluation = self.finish(d.ev, results, d.state.reply_evals)
        if stats is not None:
            d.state.phase_stats.append(stats)
        return self._close(d.state, evaluation, d.wall_s)

    def evaluate_round(self, spec: RoundSpec, r: RoundState, num_rounds: int) -> tuple[bool, Deferred | None]:
        """Round ``r``'s evaluation: done in its last phase, deferred to the next round's first
        message, or an exchange of its own; then the round is recorded. Returns (stop, deferred)."""
        evaluation = None
        if spec.evaluate and r.after is not None:
            evaluation = self.finish(r.after, r.after_results, r.reply_evals)
        elif spec.evaluate:
            ev = self.request(r.rnd, "before", set(r.reply_evals))
            if ev.targets and self.fuse and r.rnd < num_rounds and self.s.phases(r.rnd + 1):
                return False, Deferred(r, ev, r.wall_s)
            results: dict[int, ClientResult] = {}
            if ev.targets:
                out = self.ex.exchange(Phase.EVALUATE, r.rnd, ev.targets, ev.download)
                results = out.results
                r.phase_stats.append(out.stats)
                self._progress(r.rnd, out.stats, len(results), len(ev.targets))
            evaluation = self.finish(ev, results, r.reply_evals)
        return self._close(r, evaluation), None

    def run_round(self, rnd: int, num_rounds: int, deferred: Deferred | None) -> tuple[bool, Deferred | None]:
        """One round; ``deferred``: the previous round, whose evaluation this round's first message
        carries. Returns (stop, the round to settle with the next round's first message)."""
        r = self.begin_round(rnd)
        spec = self.s.round_spec(rnd, num_rounds)
        for i, ps in enumerate(spec.phases):
            ev = None
            if i == 0 and deferred is not None:
                ev = deferred.ev
            elif i == len(spec.phases) - 1 and self.fuse and spec.eval_fuses_after:
                ev = r.after = self.request(rnd, "after", set(r.reply_evals))
            out, sec = self.exchange_phase(ps, r, ev)
            if i == 0 and deferred is not None:   # the previous round is recorded before this one aggregates
                d, deferred = deferred, None
                if self.settle(d, out.evals):   # this round's training is not used: the run ends after d
                    if self.recorder:
                        self.recorder.discard(out.stats)
                    self._stop(d.state.rnd)
                    return True, None
            elif ev is not None and ev is r.after:
                r.after_results = out.evals
            self.aggregate_phase(ps, r, out, sec)
        if deferred is not None:   # no phase this round to carry the previous evaluation
            d = deferred
            out = self.ex.exchange(Phase.EVALUATE, d.ev.rnd, d.ev.targets, d.ev.download)
            self._progress(d.state.rnd, out.stats, len(d.ev.targets), len(d.ev.targets))
            if self.settle(d, out.results, out.stats):
                self._stop(d.state.rnd)
                return True, None
        stop, later = self.evaluate_round(spec, r, num_rounds)
        if stop:
            self._stop(rnd)
        return stop, later

    # ------------------------------------------------------------------ rounds
    def run(self, num_rounds: int | None = None, start_round: int = 1):
        num_rounds = num_rounds or self.cfg["num-rounds"]
        self.start()
        deferred: Deferred | None = None
        for rnd in range(start_round, num_rounds + 1):
            stop, deferred = self.run_round(rnd, num_rounds, deferred)
            if stop:
                break
        return self.recorder
