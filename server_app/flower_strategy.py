"""Every Corolla method as a Flower ``Strategy``.

:class:`FlowerStrategy` wraps a method's strategy (``strategies/``), the roster and the exchanger
of a run. ``start`` runs Corolla's multi-phase round loop (``server_app.loop``: Flower's own
``Strategy.start`` does one train and one evaluate exchange per round and sends one global
``ArrayRecord``, which the methods' protocols do not fit); the four message methods speak a
method's ``train`` phase and its evaluation in Flower's one-exchange-per-step form, so a Flower
user can drive a Corolla method from their own loop. Messages are ``corolla.messages`` encoded by
``flower_io.records``, exactly as in Corolla's loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from corolla.config import int_list
from corolla.messages import PhaseRequest
from flower_io.records import from_records, to_records
from server_app.evaluation import pool_metrics
from server_app.exchange import Exchanger, PhaseStats, message_type
from server_app.loop import RoundLoop
from strategies.base import CorollaStrategy


class FlowerStrategy(Strategy):
    def __init__(self, strategy: CorollaStrategy, exchanger: Exchanger, recorder=None):
        self.strategy, self.ex, self.recorder = strategy, exchanger, recorder
        self._sent: dict[str, list[tuple[int, PhaseRequest]]] = {}

    def summary(self) -> None:
        self.strategy.summary()

    def start(self, grid: Grid | None = None, initial_arrays: ArrayRecord | None = None, num_rounds: int = 0,
              timeout: float = 0.0, *, start_round: int = 1, **_: Any):
        """Run the method's rounds (its phases and fused evaluation) on the exchanger's transport."""
        return RoundLoop(self.strategy, self.ex, self.recorder).run(num_rounds or None, start_round)

    # ------------------------------------------------------------------ Flower's one-step API
    def _messages(self, kind: str, phase: str, rnd: int, targets: list[int], shared, personal) -> list[Message]:
        sent, _ = self.ex.build(phase, rnd, targets, shared, personal)
        self._sent[kind] = sent
        return [Message(content=to_records(r.encode()), dst_node_id=n, message_type=message_type(phase))
                for n, r in sent]

    def _replies(self, kind: str, phase: str, rnd: int, replies: Iterable[Message]):
        sent = self._sent.pop(kind, [])
        index = {n: i for i, (n, _) in enumerate(sent)}
        reps = [(index[r.metadata.src_node_id],
                 f"error {r.error.code}: {r.error.reason}" if r.has_error() else from_records(r.content))
                for r in replies if r.metadata.src_node_id in index]
        results, _ = self.ex.parse(phase, sent, reps, PhaseStats(phase), rnd)
        return results

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The ``train`` phase messages for the logical clients sampled this round."""
        s = self.strategy
        targets = s.sample(server_round, s.available())
        shared, personal = s.configure_phase("train", server_round, targets)
        return self._messages("train", "train", server_round, targets, shared, personal)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate and aggregate the ``train`` replies; returns the evaluation download's shared
        arrays (the global model, where the method has one) and the phase's metrics."""
        results = self._replies("train", "train", server_round, replies)
        mets = self.strategy.aggregate_phase("train", server_round, results)
        shared, _ = self.strategy.evaluate_download(server_round, self.strategy.available())
        return (to_records({"global": shared})["global"] if shared else None,
                MetricRecord({k: float(v) for k, v in mets.items()}))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """The ``evaluate`` messages for every available logical client."""
        targets = self.strategy.available()
        shared, personal = self.strategy.evaluate_download(server_round, targets)
        return self._messages("evaluate", "evaluate", server_round, targets, shared, personal)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The pooled test metrics of the ``evaluate`` replies."""
        results = self._replies("evaluate", "evaluate", server_round, replies)
        pooled = pool_metrics(results, int_list(self.strategy.cfg, "topk"))
        return MetricRecord(dict(pooled["test"]["metrics"]))
