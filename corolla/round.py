"""The round as a typed contract, shared by the server and the nodes (no Flower).

A method's round is a list of :class:`Phase` steps; each phase is stated as data — the
:class:`Download` it sends (arrays shared by every targeted client, arrays per client, and typed
per-client :class:`Control` fields), what each client must upload (the strategy's
``expected_payload``), whether its aggregate weights by ``num-examples`` and whether it is summed
securely — then an evaluation on the rounds :func:`evaluates` selects. ``server_app.loop``
executes it; ``strategies.base`` states the hooks a method implements and which of them may change
the strategy's state. The wire format of these fields is ``corolla.messages``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

Arrays = dict[str, np.ndarray]


class Phase(StrEnum):
    """Every step a message can ask of a node. Training phases are methods' own (a client class
    implements ``phase_<value>``); the others are the harness's."""
    TRAIN = "train"          # local training and the upload of most methods
    UPLOAD = "upload"        # FedCIA GF-CF's one-shot upload of each client's filter
    FINETUNE = "finetune"    # FedCIA: fine-tuning towards the aggregated similarity
    STATS = "stats"          # LPSFed: subgraph statistics for the reference graph
    EXPAND = "expand"        # Dist-FedAvg: hashed items to the matching party
    MATCH = "match"          # Dist-FedAvg: the expanded neighbourhood back
    EVALUATE = "evaluate"    # per-user metric values of the protocol
    TOPK = "topk"            # each user's top-K items (export)
    HANDSHAKE = "handshake"  # which clients a node hosts; carries the run config

    @property
    def trains(self) -> bool:
        """A method's own phase (a Flower ``train`` message), not evaluation, export or handshake."""
        return self not in (Phase.EVALUATE, Phase.TOPK, Phase.HANDSHAKE)


class SecAggStep(StrEnum):
    """The secure-aggregation exchanges around a summed phase (``corolla.secagg``)."""
    SETUP = "secagg-setup"
    SHARE = "secagg-share"
    CONFIRM = "secagg-confirm"
    UNMASK = "secagg-unmask"


def step(name: str) -> Phase | SecAggStep:
    """The phase or secure-aggregation step named ``name``; ValueError naming the known ones."""
    for kind in (Phase, SecAggStep):
        try:
            return kind(name)
        except ValueError:
            pass
    known = ", ".join([p.value for p in Phase] + [s.value for s in SecAggStep])
    raise ValueError(f"phase {name!r}: expected one of {known}")


@dataclass(frozen=True)
class Control:
    """Typed per-client fields of a request: what a client must do besides the arrays it gets.

    ``upload``: whether the client uploads its table in this phase (FedCA with ``fedca-upload =
    subset``: only the clients drawn for aggregation do)."""
    upload: bool = True

    def encode(self) -> dict[str, Any]:
        return {"upload": self.upload}

    @classmethod
    def decode(cls, d: Any) -> Control:
        if not isinstance(d, dict) or set(d) - {"upload"} or not isinstance(d.get("upload", True), bool):
            raise ValueError(f"control: expected {{'upload': bool}}, got {d!r}")
        return cls(**d)


DEFAULT_CONTROL = Control()


def encode_controls(controls: dict[int, Control]) -> str:
    """JSON of the controls that differ from the default (``{}`` for most phases)."""
    return json.dumps({str(c): v.encode() for c, v in sorted(controls.items()) if v != DEFAULT_CONTROL})


def decode_controls(text: Any) -> dict[int, Control]:
    if not isinstance(text, str):
        raise ValueError("control: expected JSON text")
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("control: expected a JSON object of client ids")
    return {int(c): Control.decode(v) for c, v in raw.items()}


@dataclass
class Download:
    """What one phase (or an evaluation) sends: ``shared`` arrays go once per message to every
    targeted client, ``personal`` arrays to one client each, ``control`` fields to one client each."""
    shared: Arrays = field(default_factory=dict)
    personal: dict[int, Arrays] = field(default_factory=dict)
    control: dict[int, Control] = field(default_factory=dict)

    def control_of(self, cid: int) -> Control:
        return self.control.get(cid, DEFAULT_CONTROL)


@dataclass(frozen=True)
class PhaseSpec:
    """How the loop runs one phase of a round."""
    phase: Phase
    counted: bool = False   # its aggregate weights by num-examples: every reply must carry it
    secure: dict[str, tuple[int, ...]] | None = None   # the arrays it sums securely (secagg), by shape


@dataclass(frozen=True)
class RoundSpec:
    """A round as data: its phases in order, whether it is evaluated, and whether that evaluation
    may run right after the last phase inside the last phase's message."""
    round: int
    phases: tuple[PhaseSpec, ...]
    evaluate: bool
    eval_fuses_after: bool = False


def evaluates(rnd: int, num_rounds: int, eval_every: int) -> bool:
    """Round ``rnd`` is evaluated: every ``eval-every`` rounds and after the last. The one
    definition the server (what to evaluate) and the nodes (what to evaluate in a training reply)
    both use."""
    return rnd % max(1, int(eval_every)) == 0 or rnd == num_rounds
