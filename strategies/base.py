"""Base of every Corolla strategy: the round contract a method implements, nothing else.

A round is data (``corolla.round``): the strategy states its phases (:meth:`phases`), what each
phase sends to whom (:meth:`configure_phase` → a ``Download`` of shared arrays, per-client arrays
and typed per-client ``Control`` fields), what each client must upload
(:meth:`expected_payload`), whether its aggregate weights by ``num-examples``
(:attr:`counted_phases`) or is summed securely (:meth:`secure_layout`), and when and with what the
round is evaluated (``corolla.round.evaluates``, :meth:`eval_fuses_after`, :meth:`eval_targets`,
:meth:`evaluate_download`); :meth:`round_spec` puts that together and ``server_app.loop`` executes
it. Everything else is the server app's: one message per node and the validation of every reply
(``server_app.exchange``), which node hosts which client (``server_app.roster``), the pooling of
evaluation metrics (``server_app.evaluation``), the Flower ``Strategy`` face
(``server_app.flower_strategy``).

**The hooks**, and which may change the strategy's state:

==========================  ======  ======================================================
hook                        state   called
==========================  ======  ======================================================
``setup``                   sets    once, after the first handshake (``n_items``, clients known)
``phases``                  —       at the start of each round
``sample``                  —       once per round: the round's clients
``phase_targets``           —       per phase: its clients (default: the round's)
``configure_phase``         —       per phase: its ``Download``
``expected_payload``        —       per reply: what a client must upload (with its ``Control``)
``secure_layout``           —       per phase: the arrays summed securely (``secagg``)
``eval_fuses_after``        —       per evaluated round
``eval_targets``            —       per evaluated round: who is asked to evaluate
``evaluate_download``       —       per evaluated round: the evaluation's ``Download``
``delivered``               sets    once a phase's or an evaluation's download is handed to the
                                    transport, with the clients it goes to
``accept``                  sets    per validated reply, as it arrives (fold it, or hold it)
``aggregate_phase``         sets    once per phase, with every accepted result
``aggregate_secure``        sets    once per secure phase, with the mean the nodes summed
``evaluated``               sets    with the results of an evaluation exchange
``state_dict`` / ``load…``  — / sets  checkpoint and resume
``summary``                 —       once, at the start
==========================  ======  ======================================================

Queries never change state: the loop and ``FlowerStrategy``'s one-step API may call them more
than once. To add a method, subclass :class:`CorollaStrategy` and override the hooks it needs
(``docs/adding-a-method.md``). Aggregation kernels stay pure functions (``corolla/``,
``strategies/aggregation.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from logging import INFO
from typing import Any, Protocol

import numpy as np
from flwr.common.logger import log

from corolla import methods
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Control, Download, Phase, PhaseSpec, RoundSpec, evaluates
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
    counted_phases: tuple[Phase, ...] = ()   # phases whose aggregate weights by ``num-examples`` (must be sent)

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg                       # the run config: core keys and this method's (``corolla.config``)
        self.p = methods.run_params(cfg)     # this method's parameters, typed (``corolla.methods.params``)
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

    def phases(self, rnd: int) -> list[Phase]:
        """*hook*: the phases of round ``rnd`` before evaluation."""
        return [Phase.TRAIN]

    def round_spec(self, rnd: int, num_rounds: int) -> RoundSpec:
        """Round ``rnd`` as data: its phases (each counted or not, secure or not), whether it is
        evaluated and whether that evaluation may run inside its last phase's message."""
        secure = self.cfg.get("secagg", "none") != "none"
        phases = tuple(PhaseSpec(p, p in self.counted_phases, self.secure_layout(p, rnd) if secure else None)
                       for p in self.phases(rnd))
        ev = self.evaluates(rnd, num_rounds)
        return RoundSpec(rnd, phases, ev, bool(ev and phases and self.eval_fuses_after(rnd)))

    def sample(self, rnd: int, available: list[int]) -> list[int]:
        """Clients of round ``rnd``: ``clients-per-round`` of them if set, else
        ``ceil(fraction-train * |available|)``; seeded by (seed, round)."""
        n = self.round_size(len(available))
        if n >= len(available):
            return sorted(available)
        pick = rng(self.cfg["seed"], "sample", rnd).choice(sorted(available), size=n, replace=False)
        return sorted(int(c) for c in pick)

    def round_size(self, n_available: int) -> int:
        """How many of ``n_available`` clients a round samples: ``clients-per-round`` if set, else
        ``ceil(fraction-train * n_available)`` (all of them at ``fraction-train`` = 1)."""
        per_round = int(self.cfg.get("clients-per-round", 0) or 0)
        if per_round > 0:
            return per_round
        f = self.cfg["fraction-train"]
        return n_available if f >= 1.0 else max(1, math.ceil(f * n_available))

    def phase_targets(self, phase: Phase, rnd: int, sampled: list[int]) -> list[int]:
        """*hook*: the logical clients of ``phase`` (default: the round's sampled clients)."""
        return sampled

    def configure_phase(self, phase: Phase, rnd: int, targets: list[int]) -> Download:
        """*hook* (a query): what ``phase`` sends to ``targets``."""
        return Download()

    def expected_payload(self, phase: Phase, cid: int, control: Control = DEFAULT_CONTROL) -> dict[str, ArraySpec]:
        """*hook*: the arrays a logical client must upload in ``phase`` (empty: none), given the
        ``control`` fields it was sent."""
        return {}

    def delivered(self, phase: Phase, rnd: int, cids: list[int]) -> None:
        """*hook* (changes state): ``phase``'s download of round ``rnd`` (``Phase.EVALUATE``: the
        round's evaluation download) has been handed to the transport for ``cids``."""
    # secure aggregation (``secagg``; methods declared ``secure_sum``): the server gets only the
    # (weighted) mean of the phase's uploads, computed from the nodes' masked sums
    secure_weighted = False   # weights = ``num-examples`` (else 1 per client)

    def secure_layout(self, phase: Phase, rnd: int) -> dict[str, tuple[int, ...]] | None:
        """*hook*: the arrays whose mean ``phase`` aggregates, by name and shape (None: not a sum)."""
        return None

    def aggregate_secure(self, phase: Phase, rnd: int, mean: dict[str, np.ndarray],
                         metrics: dict[str, float]) -> dict[str, Any]:
        """*hook*: the phase's aggregate from the securely summed ``mean``; ``metrics`` are the
        securely summed ones (``clients``: how many were summed, ``train-loss``: their mean loss —
        no client's own value reaches the server); returns the round's train metrics."""
        raise NotImplementedError(f"{type(self).__name__} has no secure aggregation")

    def accept(self, phase: Phase, rnd: int, cid: int, result: ClientResult) -> ClientResult:
        """*hook*: called for each validated result as its node's reply arrives.

        A strategy with large payloads folds ``result.payload`` into a running aggregate here and
        returns the result without its payload, so the server never holds all payloads at once.
        With ``hold_uploads`` every ``train`` payload is kept until :meth:`take_uploads` (so
        ``aggregate_phase`` sees only valid uploads, in client order)."""
        if self.hold_uploads and phase == Phase.TRAIN and result.payload:
            self._held[cid] = result
            return ClientResult({}, result.metrics)
        return result

    def take_uploads(self) -> dict[int, ClientResult]:
        """The ``train`` uploads held since the last call (``hold_uploads``)."""
        held, self._held = self._held, {}
        return held

    def aggregate_phase(self, phase: Phase, rnd: int, results: dict[int, ClientResult]) -> dict[str, float]:
        """*hook*: aggregate the validated results; returns metrics to log."""
        return {}

    def evaluates(self, rnd: int, num_rounds: int) -> bool:
        """Round ``rnd`` is evaluated (``corolla.round.evaluates``: every ``eval-every`` rounds and
        after the last)."""
        return evaluates(rnd, num_rounds, self.cfg["eval-every"])

    def eval_targets(self, rnd: int, replied: set[int]) -> list[int]:
        """*hook*: the logical clients asked to evaluate round ``rnd``; ``replied`` sent their
        metrics with their training reply already. Default: every available client that did not."""
        return [c for c in self.available() if c not in replied]

    def eval_fuses_after(self, rnd: int) -> bool:
        """*hook*: True when round ``rnd``'s evaluation may run on the clients right after the
        round's last phase, in that phase's message (its ``evaluate_download`` must not depend on
        that phase's replies). Otherwise it travels with the next round's first message."""
        return False

    def evaluate_download(self, rnd: int, targets: list[int]) -> Download:
        """*hook* (a query): what ``targets`` need to evaluate their models after round ``rnd``."""
        return Download()

    def evaluated(self, rnd: int, results: dict[int, ClientResult]) -> None:
        """*hook* (changes state): the results of round ``rnd``'s evaluation exchange (a client
        missing from them did not get the evaluation download)."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """*hook*: server state to checkpoint."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """*hook*: restore :meth:`state_dict`."""

    def summary(self) -> None:
        log(INFO, "%s: %s", type(self).__name__,
            {k: self.cfg[k] for k in ("method", "model", "num-rounds", "fraction-train", "dim", "lr")})
