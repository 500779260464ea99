"""Base of every Corolla strategy: the method hooks, nothing else.

A round is a list of *phases* (``configure -> send/receive -> validate -> aggregate``), then an
evaluation. The strategy reasons in logical clients: it says what each phase sends (shared
arrays, and per logical client), what each client must upload, how the validated uploads are
aggregated and what the clients need to evaluate. Everything else is the server app's:
the round loop with fused evaluation (``server_app.loop``), one message per node and the
validation of every reply (``server_app.exchange``), which node hosts which client
(``server_app.roster``), the pooling of evaluation metrics (``server_app.evaluation``), the
Flower ``Strategy`` face (``server_app.flower_strategy``).

To add a method, subclass :class:`CorollaStrategy` and override the hooks marked *hook*:
``phases``, ``configure_phase``, ``expected_payload``, ``aggregate_phase``, ``evaluate_download``,
``state_dict``/``load_state_dict`` and ``summary`` (``docs/adding-a-method.md``). Aggregation
kernels stay pure functions (``corolla/``, ``strategies/aggregation.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from logging import INFO
from typing import Any, Protocol

import numpy as np
from flwr.common.logger import log

from corolla.protocol import ArraySpec
from corolla.util import rng


@dataclass
class ClientResult:
    payload: dict[str, np.ndarray]
    metrics: dict[str, Any]


class Roster(Protocol):
    """What a strategy may know of the nodes (``server_app.roster.Roster``)."""
    n_items: int
    clients: dict[int, dict[str, int]]
    data_stats: dict[str, Any]

    def available(self) -> list[int]: ...


class CorollaStrategy:
    """``cfg`` is the resolved run configuration (``corolla.config``); ``roster`` is set by the
    server app before :meth:`setup`."""

    hold_uploads = False   # keep every ``train`` upload until :meth:`take_uploads` (aggregate in client order)
    counted_phases: tuple[str, ...] = ()   # phases whose aggregate weights by ``num-examples`` (must be sent)

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.roster: Roster | None = None
        self._held: dict[int, ClientResult] = {}

    # ------------------------------------------------------------------ what the roster knows
    @property
    def n_items(self) -> int:
        return self.roster.n_items if self.roster is not None else 0

    @property
    def clients(self) -> dict[int, dict[str, int]]:
        """Every logical client: ``{"users", "train"[, "items"], "node"}``."""
        return self.roster.clients if self.roster is not None else {}

    @property
    def data_stats(self) -> dict[str, Any]:
        return self.roster.data_stats if self.roster is not None else {}

    def available(self) -> list[int]:
        return self.roster.available() if self.roster is not None else []

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

    # secure aggregation (``secagg``; methods declared ``secure_sum``): the server gets only the
    # (weighted) mean of the phase's uploads, computed from the nodes' masked sums
    secure_weighted = False   # weights = ``num-examples`` (else 1 per client)

    def secure_layout(self, phase: str, rnd: int) -> dict[str, tuple[int, ...]] | None:
        """*hook*: the arrays whose mean ``phase`` aggregates, by name and shape (None: not a sum)."""
        return None

    def aggregate_secure(self, phase: str, rnd: int, mean: dict[str, np.ndarray],
                         metrics: dict[str, float]) -> dict[str, Any]:
        """*hook*: the phase's aggregate from the securely summed ``mean``; ``metrics`` are the
        securely summed ones (``clients``: how many were summed, ``train-loss``: their mean loss —
        no client's own value reaches the server); returns the round's train metrics."""
        raise NotImplementedError(f"{type(self).__name__} has no secure aggregation")

    def accept(self, phase: str, rnd: int, cid: int, result: ClientResult) -> ClientResult:
        """*hook*: called for each validated result as its node's reply arrives.

        A strategy with large payloads folds ``result.payload`` into a running aggregate here and
        returns the result without its payload, so the server never holds all payloads at once.
        With ``hold_uploads`` every ``train`` payload is kept until :meth:`take_uploads` (so
        ``aggregate_phase`` sees only valid uploads, in client order)."""
        if self.hold_uploads and phase == "train" and result.payload:
            self._held[cid] = result
            return ClientResult({}, result.metrics)
        return result

    def take_uploads(self) -> dict[int, ClientResult]:
        """The ``train`` uploads held since the last call (``hold_uploads``)."""
        held, self._held = self._held, {}
        return held

    def aggregate_phase(self, phase: str, rnd: int, results: dict[int, ClientResult]) -> dict[str, float]:
        """*hook*: aggregate the validated results; returns metrics to log."""
        return {}

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

    def evaluate_download(self, rnd: int, targets: list[int]
                          ) -> tuple[dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
        """*hook*: what the clients need to evaluate their personalised models."""
        return {}, {}

    def evaluated(self, rnd: int, results: dict[int, ClientResult]) -> None:
        """*hook*: called with the results of round ``rnd``'s evaluation exchange."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """*hook*: server state to checkpoint."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """*hook*: restore :meth:`state_dict`."""

    def summary(self) -> None:
        log(INFO, "%s: %s", type(self).__name__,
            {k: self.cfg[k] for k in ("method", "model", "num-rounds", "fraction-train", "dim", "lr")})
