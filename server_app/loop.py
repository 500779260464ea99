"""The round loop: a method's phases round after round, with fused evaluation.

A round is the strategy's phases (``configure -> send/receive -> validate -> aggregate``, each one
exchange per node: ``server_app.exchange``), then the evaluation of the round when it is
evaluated (every ``eval-every`` rounds and after the last). With ``fused-evaluation`` (the
default) a round is one exchange per node and phase: an evaluated round's evaluation runs in its
last phase's message (``eval_fuses_after``) or travels with the next round's first message, where
the clients evaluate before they train; only the last round's evaluation (or one with no next
phase to carry it) is an exchange of its own. Clients that evaluate in their training reply are
not asked again. The evaluated models are the same as with separate evaluation messages (tested).

``recorder`` (``server_app.results.RunRecorder``) receives every round's record once its
evaluation is known, writes the checkpoint, and decides early stopping.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from logging import INFO
from typing import Any

from flwr.common.logger import log

from corolla.config import int_list
from server_app.evaluation import pool_metrics
from server_app.exchange import EvalRequest, Exchanger, PhaseStats
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


class RoundLoop:
    def __init__(self, strategy: CorollaStrategy, ex: Exchanger, recorder=None):
        self.s, self.ex, self.recorder = strategy, ex, recorder
        self.cfg = strategy.cfg
        self.ks = int_list(self.cfg, "topk")

    # ------------------------------------------------------------------ evaluation
    def request(self, rnd: int, when: str) -> EvalRequest:
        targets = self.s.eval_targets(rnd, set(self.ex.reply_evals))
        shared, personal = self.s.evaluate_download(rnd, targets) if targets else ({}, {})
        return EvalRequest(rnd, targets, shared, personal, when, set(self.s.available()))

    def finish(self, ev: EvalRequest, results: dict[int, ClientResult],
               reply_evals: dict[int, ClientResult]) -> dict[str, Any]:
        """Round ``ev.rnd``'s metrics: those sent with training replies, updated by the results
        of its evaluation exchange (over the clients available when it was requested)."""
        if ev.targets:
            self.s.evaluated(ev.rnd, results)
        pooled = {c: r for c, r in reply_evals.items() if c in ev.available}
        pooled.update(results)
        return pool_metrics(pooled, self.ks, bool(self.cfg.get("report-per-client")))

    def _close(self, rnd, phase_stats, train_metrics, evaluation, wall_s, targets) -> bool:
        if self.recorder is None:
            return False
        return self.recorder.end_round(self.s, rnd, phase_stats, train_metrics, evaluation, wall_s, targets)

    def _progress(self, rnd: int, stats: PhaseStats, ok: int, targets: int) -> None:
        if self.recorder:
            self.recorder.progress(rnd, stats.name, stats, ok, targets)

    def _stop(self, rnd: int) -> None:
        log(INFO, "early stop after round %d (patience %d)", rnd, self.cfg["patience"])

    # ------------------------------------------------------------------ rounds
    def run(self, num_rounds: int | None = None, start_round: int = 1):
        s, ex = self.s, self.ex
        num_rounds = num_rounds or self.cfg["num-rounds"]
        if not ex.roster.nodes:
            ex.handshake(ex.transport.node_ids())
            if not ex.roster.clients:
                raise NoClients(ex.roster.failures)
            s.setup()
        s.summary()
        fuse = bool(self.cfg.get("fused-evaluation", True))
        deferred: _Deferred | None = None
        for rnd in range(start_round, num_rounds + 1):
            t0 = time.perf_counter()
            ex.restore_round = rnd - 1   # a node that joins now drops client state newer than that
            ex.refresh()
            if not s.available():
                raise RuntimeError(f"round {rnd}: no node with logical clients is left")
            targets = s.sample(rnd, s.available())
            ex.reply_evals = {}
            phases = s.phases(rnd)
            evaluate = s.evaluates(rnd, num_rounds)
            after = fuse and evaluate and bool(phases) and s.eval_fuses_after(rnd)
            phase_stats: list[PhaseStats] = []
            train_metrics: dict[str, Any] = {}
            after_ev, after_results = None, {}
            for i, phase in enumerate(phases):
                ptargets = s.phase_targets(phase, rnd, targets)
                shared, personal = s.configure_phase(phase, rnd, ptargets)
                ev = None
                if i == 0 and deferred is not None:
                    ev = deferred.ev
                elif i == len(phases) - 1 and after:
                    ev = after_ev = self.request(rnd, "after")
                sec = None
                if self.cfg.get("secagg", "none") != "none" and s.secure_layout(phase, rnd) is not None:
                    sec = SecureRound(ex, phase, rnd, ptargets)   # keys and shares first (server_app.secure)
                    sec.setup_and_share()
                results, stats, evals = ex.exchange(phase, rnd, ptargets, shared, personal,
                                                    ev if ev is not None and ev.targets else None, secure=sec)
                self._progress(rnd, stats, len(results), len(ptargets))
                if i == 0 and deferred is not None:
                    d, deferred = deferred, None
                    evaluation = self.finish(d.ev, evals, d.reply_evals)
                    if self._close(d.rnd, d.phase_stats, d.train_metrics, evaluation, d.wall_s, d.targets):
                        # this round's training is not used: the run ends after round d.rnd
                        if self.recorder:
                            self.recorder.discard(stats)
                        self._stop(d.rnd)
                        return self.recorder
                elif ev is after_ev and ev is not None:
                    after_results = evals
                if sec is not None:   # the unmasking, then the strategy folds in the mean
                    sec.collect_stats = stats
                    mean, mets, nodes = sec.unmask()
                    train_metrics.update(s.aggregate_secure(phase, rnd, mean, mets))
                    train_metrics.update({"secagg-nodes": nodes, "secagg-weight": mets["secagg-weight"],
                                          "secagg-signed": mets["secagg-signed"]})
                    phase_stats += sec.stats[:2] + [stats] + sec.stats[2:]
                    continue
                train_metrics.update(s.aggregate_phase(phase, rnd, results))
                phase_stats.append(stats)
            if deferred is not None:   # no phase this round to carry the previous evaluation
                d, deferred = deferred, None
                results, stats, _ = ex.exchange("evaluate", d.ev.rnd, d.ev.targets, d.ev.shared, d.ev.personal)
                evaluation = self.finish(d.ev, results, d.reply_evals)
                d.phase_stats.append(stats)
                self._progress(d.rnd, stats, len(d.ev.targets), len(d.ev.targets))
                if self._close(d.rnd, d.phase_stats, d.train_metrics, evaluation, d.wall_s, d.targets):
                    self._stop(d.rnd)
                    return self.recorder
            evaluation = None
            if evaluate and after_ev is not None:
                evaluation = self.finish(after_ev, after_results, ex.reply_evals)
            elif evaluate:
                ev = self.request(rnd, "before")
                if ev.targets and fuse and rnd < num_rounds and s.phases(rnd + 1):
                    deferred = _Deferred(rnd, ev, ex.reply_evals, phase_stats, train_metrics,
                                         time.perf_counter() - t0, targets)
                    continue
                results, stats = {}, None
                if ev.targets:
                    results, stats, _ = ex.exchange("evaluate", rnd, ev.targets, ev.shared, ev.personal)
                    phase_stats.append(stats)
                    self._progress(rnd, stats, len(results), len(ev.targets))
                evaluation = self.finish(ev, results, ex.reply_evals)
            if self._close(rnd, phase_stats, train_metrics, evaluation, time.perf_counter() - t0, targets):
                self._stop(rnd)
                break
        return self.recorder
