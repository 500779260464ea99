"""Every Corolla method as a Flower ``Strategy``.

:class:`FlowerStrategy` wraps a method's strategy (``strategies/``), the roster and the exchanger
of a run. ``start`` runs Corolla's round loop (``server_app.loop``), which every method fits: its
phases, secure aggregation and fused evaluation. Flower's own ``Strategy.start`` does one train
and one evaluate exchange per round; the four one-step methods (``configure_train``,
``aggregate_train``, ``configure_evaluate``, ``aggregate_evaluate``) speak exactly that form, so a
Flower user can drive a Corolla method from their own loop — **for the methods whose every round
is one training phase** (``Phase.TRAIN``) without secure aggregation: FedAvg, FCF, FedAtt,
FedProx, Local (silo and one-user), FedCA, PFedRec, GPFedRec, UFGraphFR, MetaMF, FedRecon,
PerFedRec, FedFast, pFedGraph and the centralised references. A method whose round has
other phases (FedCIA's upload or fine-tuning, LPSFed's statistics, Dist-FedAvg's expansion and the
baselines on its harness) or a run with ``secagg`` is refused by ``configure_train`` with one line
(:class:`NotOneStep`); ``tests/test_flower_strategy.py`` drives the whole method table both ways.
Messages are ``corolla.messages`` encoded by ``flower_io.records``, exactly as in Corolla's loop;
the strategy's hooks are called as the loop calls them (``delivered`` when a download is handed
over, ``evaluated`` with the evaluation's replies).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from corolla import methods
from corolla.config import int_list
from corolla.messages import PhaseRequest
from corolla.round import Download, Phase
from flower_io.records import from_records, to_records
from server_app.evaluation import pool_metrics
from server_app.exchange import Exchanger, PhaseOutcome, PhaseStats, message_type
from server_app.loop import RoundLoop
from strategies.base import ClientResult, CorollaStrategy


class NotOneStep(RuntimeError):
    """A method whose round does not fit Flower's one-exchange-per-step ``Strategy`` API."""


class FlowerStrategy(Strategy):
    def __init__(self, strategy: CorollaStrategy, exchanger: Exchanger, recorder=None):
        self.strategy, self.ex, self.recorder = strategy, exchanger, recorder
        self._sent: dict[str, list[tuple[int, PhaseRequest]]] = {}
        self._reply_evals: dict[int, dict[int, ClientResult]] = {}   # round -> metrics sent with training

    def summary(self) -> None:
        self.strategy.summary()

    def start(self, grid: Grid | None = None, initial_arrays: ArrayRecord | None = None, num_rounds: int = 0,
              timeout: float = 0.0, *, start_round: int = 1, **_: Any):
        """Run the method's rounds (its phases, secure aggregation and fused evaluation) on the
        exchanger's transport."""
        return RoundLoop(self.strategy, self.ex, self.recorder).run(num_rounds or None, start_round)

    # ------------------------------------------------------------------ Flower's one-step API
    def check_one_step(self, rnd: int) -> None:
        """Raise :class:`NotOneStep` unless round ``rnd`` is one training phase, not summed securely."""
        s = self.strategy
        spec = s.round_spec(rnd, max(rnd, int(s.cfg["num-rounds"])))
        phases = [p.phase for p in spec.phases]
        why = ""
        if phases != [Phase.TRAIN]:
            why = f"its round {rnd} has the phases {[str(p) for p in phases] or 'none'}"
        elif spec.phases[0].secure is not None:
            why = "secure aggregation adds key exchanges around its training phase"
        if why:
            raise NotOneStep(f"method {methods.lookup(s.cfg).label}: {why}; Flower's one-step Strategy API runs "
                             "one training exchange per round: use FlowerStrategy.start() (Corolla's round loop)")

    def _messages(self, kind: str, phase: Phase, rnd: int, targets: list[int], download: Download) -> list[Message]:
        sent, _, _ = self.ex.build(phase, rnd, targets, download)
        self._sent[kind] = sent
        self.strategy.delivered(phase, rnd, [c for _, r in sent for c in r.clients])
        return [Message(content=to_records(r.encode()), dst_node_id=n, message_type=message_type(phase))
                for n, r in sent]

    def _replies(self, kind: str, phase: Phase, rnd: int, replies: Iterable[Message]) -> PhaseOutcome:
        sent = self._sent.pop(kind, [])
        index = {n: i for i, (n, _) in enumerate(sent)}
        reps = [(index[r.metadata.src_node_id],
                 f"error {r.error.code}: {r.error.reason}" if r.has_error() else from_records(r.content))
                for r in replies if r.metadata.src_node_id in index]
        return self.ex.parse(phase, sent, reps, PhaseStats(str(phase)), rnd)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The ``train`` messages for the logical clients sampled this round (:class:`NotOneStep`
        for a method whose round is more than that)."""
        self.check_one_step(server_round)
        s = self.strategy
        targets = s.sample(server_round, s.available())
        return self._messages("train", Phase.TRAIN, server_round, targets,
                              s.configure_phase(Phase.TRAIN, server_round, targets))

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate and aggregate the ``train`` replies; returns the evaluation download's shared
        arrays (the global model, where the method has one) and the phase's metrics."""
        out = self._replies("train", Phase.TRAIN, server_round, replies)
        self._reply_evals[server_round] = out.reply_evals
        mets = self.strategy.aggregate_phase(Phase.TRAIN, server_round, out.results)
        shared = self.strategy.evaluate_download(server_round, []).shared   # a query: nothing is handed over
        return (to_records({"global": shared})["global"] if shared else None,
                MetricRecord({k: float(v) for k, v in mets.items() if isinstance(v, (int, float))}))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """The ``evaluate`` messages for the clients the method asks (every available client that
        did not send its metrics with its training reply)."""
        s = self.strategy
        targets = s.eval_targets(server_round, set(self._reply_evals.get(server_round, {})))
        return self._messages("evaluate", Phase.EVALUATE, server_round, targets,
                              s.evaluate_download(server_round, targets))

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The pooled test metrics of the round: the ``evaluate`` replies and the metrics sent with
        the training replies."""
        out = self._replies("evaluate", Phase.EVALUATE, server_round, replies)
        self.strategy.evaluated(server_round, out.results)
        pooled = {c: r for c, r in self._reply_evals.pop(server_round, {}).items() if c in set(self.strategy.available())}
        pooled.update(out.results)
        return MetricRecord(dict(pool_metrics(pooled, int_list(self.strategy.cfg, "topk"))["test"]["metrics"]))
