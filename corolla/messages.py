"""The message schema between the strategy and the nodes: the only place the wire format is
written (both sides use it; ``flower_io.records`` turns its flat form into Flower's records).

One message per node and phase. A :class:`PhaseRequest` is encoded as a *flat message*: a dict
of records, each either a dict of scalars (becomes a Flower ``ConfigRecord``) or a dict of numpy
arrays (an ``ArrayRecord``):

* ``config``: ``phase``, ``round``, ``clients`` (JSON list of the targeted logical client ids),
  ``run-key``, ``state-dir``, ``data-dir``, ``restore-round``, ``cfg-hash`` (sha256 of the resolved
  run config). The config itself (``cfg``, JSON) travels once per node and run: in the
  ``handshake`` request; the node keeps it for the run (Flower's ``context.state``) and checks
  every later message's ``cfg-hash`` against it;
* ``global`` (optional): arrays every targeted logical client receives (sent once per node);
* ``personal`` (optional): arrays for single logical clients, packed (``corolla.protocol.pack``).

A :class:`PhaseReply` holds ``payload`` (the hosted targeted clients' uploads, packed) and
``results`` (``metrics``: JSON ``{cid: {"num-examples": n, "valid/<metric>": [per-user values],
...}}``; ``errors``: JSON ``{cid: traceback}`` of the clients that raised). The handshake reply
(:class:`NodeInfo`) is ``node``: ``hosted`` (JSON ``{cid: {"users", "train"[, "items"]}}``),
``n-items``, ``edge``, ``auto``, ``data-stats``.

**Fused evaluation** (:class:`EvalPart`): a phase message may also carry the evaluation of a
round, so that a round costs one exchange per node: config ``eval-round``, ``eval-clients``,
``eval-when`` (``before``: evaluate, then run the phase; ``after``: the phase, then evaluate its
result) and ``eval-shared`` (``own``: the arrays are in ``eval-global``; ``global``: the
evaluation uses the phase's own ``global`` arrays, sent once; ``none``). Per-client evaluation
downloads are packed in ``eval-personal``; the reply then also holds ``eval-payload`` (none so
far), and ``eval-metrics`` / ``eval-errors`` in ``results``.

**Packing** and **bytes**: ``corolla.protocol``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corolla.protocol import dumps_per_client, loads_per_client, npy_size, pack, payload_size, unpack

Arrays = dict[str, np.ndarray]
Flat = dict[str, dict[str, Any]]   # record name -> {key: scalar} or {key: ndarray}


def config_hash(cfg: dict[str, Any]) -> str:
    """The fingerprint of a resolved run config that every message carries."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class RunInfo:
    """What identifies the run on a node: its key, where state and data live, its config's hash."""
    run_key: str
    cfg_hash: str
    state_dir: str = ""
    data_dir: str = ""

    def encode(self) -> dict[str, Any]:
        return {"run-key": self.run_key, "cfg-hash": self.cfg_hash, "state-dir": self.state_dir,
                "data-dir": self.data_dir}

    @classmethod
    def decode(cls, conf: dict[str, Any]) -> RunInfo:
        return cls(str(conf["run-key"]), str(conf.get("cfg-hash", "")), str(conf.get("state-dir", "")),
                   str(conf.get("data-dir", "")))


@dataclass
class EvalPart:
    """The evaluation of round ``round`` by ``clients``, run ``before`` or ``after`` the phase of
    the message that carries it."""
    round: int
    clients: list[int]
    when: str = "before"
    shared_mode: str = "none"          # "own", "global" or "none"
    shared: Arrays = field(default_factory=dict)
    personal: dict[int, Arrays] = field(default_factory=dict)


@dataclass
class PhaseRequest:
    phase: str
    round: int
    clients: list[int]
    run: RunInfo
    shared: Arrays = field(default_factory=dict)
    personal: dict[int, Arrays] = field(default_factory=dict)
    restore_round: int = 0
    evaluation: EvalPart | None = None
    cfg: dict[str, Any] | None = None   # the resolved run config: in the handshake only

    def encode(self) -> Flat:
        conf: dict[str, Any] = {"phase": self.phase, "round": int(self.round), "clients": json.dumps(self.clients),
                                "restore-round": int(self.restore_round), **self.run.encode()}
        if self.cfg is not None:
            conf["cfg"] = json.dumps(self.cfg)
        flat: Flat = {"config": conf}
        if self.shared:
            flat["global"] = dict(self.shared)
        if self.personal:
            flat["personal"] = pack(self.personal)
        ev = self.evaluation
        if ev is not None:
            conf.update({"eval-round": int(ev.round), "eval-clients": json.dumps(ev.clients), "eval-when": ev.when,
                         "eval-shared": ev.shared_mode})
            if ev.shared_mode == "own" and ev.shared:
                flat["eval-global"] = dict(ev.shared)
            if ev.personal:
                flat["eval-personal"] = pack(ev.personal)
        return flat

    @classmethod
    def decode(cls, flat: Flat) -> PhaseRequest:
        conf = flat["config"]
        shared = dict(flat.get("global", {}))
        ev = None
        if "eval-round" in conf:
            how = str(conf.get("eval-shared", "none"))
            ev = EvalPart(int(conf["eval-round"]), [int(c) for c in json.loads(conf["eval-clients"])],
                          str(conf.get("eval-when", "before")), how,
                          shared if how == "global" else dict(flat.get("eval-global", {})) if how == "own" else {},
                          unpack(flat["eval-personal"]) if "eval-personal" in flat else {})
        return cls(str(conf["phase"]), int(conf.get("round", 0)), [int(c) for c in json.loads(conf.get("clients", "[]"))],
                   RunInfo.decode(conf), shared, unpack(flat["personal"]) if "personal" in flat else {},
                   int(conf.get("restore-round", 0)), ev, json.loads(conf["cfg"]) if "cfg" in conf else None)

    def bytes_down(self) -> int:
        """Bytes of the arrays this message carries (``corolla.protocol``): shared arrays once,
        each client's personal arrays as if sent alone."""
        n = sum(npy_size(a) for a in self.shared.values())
        n += sum(payload_size(a) for a in self.personal.values())
        if self.evaluation is not None:
            if self.evaluation.shared_mode == "own":
                n += sum(npy_size(a) for a in self.evaluation.shared.values())
            n += sum(payload_size(a) for a in self.evaluation.personal.values())
        return n


@dataclass
class ClientOut:
    """One logical client's result in a reply: its upload and its metrics."""
    payload: Arrays
    metrics: dict[str, Any]


@dataclass
class PhaseReply:
    results: dict[int, ClientOut] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    eval_results: dict[int, ClientOut] = field(default_factory=dict)
    eval_errors: dict[int, str] = field(default_factory=dict)

    def encode(self) -> Flat:
        flat: Flat = {}
        texts: dict[str, str] = {}
        for prefix, res, err in (("", self.results, self.errors), ("eval-", self.eval_results, self.eval_errors)):
            if prefix and not res and not err:
                continue
            packed = pack({c: r.payload for c, r in res.items()})
            if packed:
                flat[f"{prefix}payload"] = packed
            texts[f"{prefix}metrics"] = dumps_per_client(
                {c: {k: v for k, v in r.metrics.items() if v is not None} for c, r in res.items()})
            if err:
                texts[f"{prefix}errors"] = dumps_per_client(err)
        flat["results"] = texts
        return flat

    @classmethod
    def decode(cls, flat: Flat, evaluation: bool = False) -> PhaseReply:
        """Raises ``corolla.protocol.PayloadError`` (or ``ValueError``/``KeyError``) on a malformed
        reply. A payload without a metrics record is dropped (its client counts as not replied)."""
        res = flat.get("results", {})
        out = cls()
        for prefix in ("", "eval-") if evaluation else ("",):
            payloads = unpack(dict(flat[f"{prefix}payload"])) if f"{prefix}payload" in flat else {}
            mets = loads_per_client(res.get(f"{prefix}metrics"))
            errs = loads_per_client(res.get(f"{prefix}errors"))
            results = {c: ClientOut(payloads.get(c, {}), dict(m)) for c, m in mets.items()}
            if prefix:
                out.eval_results, out.eval_errors = results, {c: str(e) for c, e in errs.items()}
            else:
                out.results, out.errors = results, {c: str(e) for c, e in errs.items()}
        return out


@dataclass
class NodeInfo:
    """A node's handshake reply: which logical clients it hosts (``auto``: can host) and its data."""
    hosted: dict[int, dict[str, int]]
    n_items: int
    edge: bool = False
    auto: bool = False
    data_stats: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> Flat:
        return {"node": {"hosted": json.dumps({str(c): v for c, v in self.hosted.items()}), "n-items": int(self.n_items),
                         "edge": bool(self.edge), "auto": bool(self.auto), "data-stats": json.dumps(self.data_stats)}}

    @classmethod
    def decode(cls, flat: Flat) -> NodeInfo:
        info = flat["node"]
        return cls({int(c): v for c, v in json.loads(info["hosted"]).items()}, int(info["n-items"]),
                   bool(info.get("edge", False)), bool(info.get("auto", False)),
                   json.loads(info["data-stats"]) if "data-stats" in info else {})
