"""The message schema between the strategy and the nodes: the only place the wire format is
written (both sides use it; ``flower_io.records`` turns its flat form into Flower's records).

One message per node and phase. A :class:`PhaseRequest` is encoded as a *flat message*: a dict
of records, each either a dict of scalars (becomes a Flower ``ConfigRecord``) or a dict of numpy
arrays (an ``ArrayRecord``):

* ``config``: ``phase``, ``round``, ``clients`` (JSON list of the targeted logical client ids),
  ``run-key``, ``state-dir``, ``data-dir``, ``restore-round``, ``cfg-hash`` (sha256 of the resolved
  run config), and ``control`` (JSON ``{cid: {"upload": false}}``: the typed per-client fields of
  ``corolla.round.Control`` that differ from the default, when any does). The config itself (``cfg``, JSON) travels once per node and run: in the
  ``handshake`` request; the node keeps it for the run (Flower's ``context.state``) and checks
  every later message's ``cfg-hash`` against it;
* ``global`` (optional): arrays every targeted logical client receives (sent once per node);
* ``personal`` (optional): arrays for single logical clients, packed (``corolla.protocol.pack``).

A :class:`PhaseReply` holds ``payload`` (the hosted targeted clients' uploads, packed) and
``results`` (``metrics``: JSON ``{cid: {"num-examples": n, "valid/<metric>": [per-user values],
...}}``; ``errors``: JSON ``{cid: traceback}`` of the clients that raised). The handshake reply
(:class:`NodeInfo`) is ``node``: ``hosted`` (JSON ``{cid: {"users", "train"[, "items"]}}``),
``n-items``, ``edge``, ``auto``, ``data-stats`` and, from a node with a key (node config
``auth-key-file``: an authenticating SuperNode's key), ``key`` (its OpenSSH public key) and
``key-sig`` (its signature of the run and the request's ``nonce``, which the server checks). The
handshake request also carries ``versions`` (JSON: message ``protocol``, ``corolla``, ``flwr``),
which the node checks (:func:`version_mismatch`).

**Secure aggregation** (``secagg``): the ``secagg-*`` config entries of a request
(:attr:`PhaseRequest.secagg`: round, SecAgg id, parameters, and per phase the keys, ciphertexts,
active/dropped lists or the layout of the summed vector), and a reply's ``secagg`` record (public
keys, ciphertexts, signatures or shares as base64 text; in the summed phase ``masked``, the
node's masked vector, and ``secagg-info`` — the ids of its clients that raised and its compute
time — instead of any ``payload`` or per-client metric). ``server_app/secure.py`` and
``client_app/secure.py``; the protocol is ``corolla.secagg``.

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

from corolla.protocol import PayloadError, dumps_per_client, loads_per_client, npy_size, pack, payload_size, unpack
from corolla.round import DEFAULT_CONTROL, Control, decode_controls, encode_controls

Arrays = dict[str, np.ndarray]
Flat = dict[str, dict[str, Any]]   # record name -> {key: scalar} or {key: ndarray}


PROTOCOL_VERSION = 2   # this module's wire format (2: SecAgg+ under attack: signed keys, consistency check); a node and a server must speak the same one


def version_mismatch(server: dict[str, str], node: dict[str, str]) -> str | None:
    """One line naming what differs between the server's and the node's versions (``protocol``,
    ``corolla``, ``flwr``: Flower's major.minor), or None when they match."""
    def mm(v: str) -> str:
        return ".".join(str(v).split(".")[:2])
    diff = [k for k in ("protocol", "corolla") if str(server.get(k)) != str(node.get(k))]
    if mm(server.get("flwr", "")) != mm(node.get("flwr", "")):
        diff.append("flwr")
    if not diff:
        return None
    names = {"protocol": "message protocol", "corolla": "Corolla", "flwr": "Flower"}
    say = ", ".join(f"{names[k]} {node.get(k)} (the server: {server.get(k)})" for k in diff)
    fix = " and ".join(f"flwr=={server.get('flwr')}" if k == "flwr" else f"Corolla {server.get('corolla')}"
                       for k in diff if k != "protocol") or f"Corolla {server.get('corolla')}"
    return f"version mismatch: this node runs {say}; install {fix} on the node (or the node's on the server)"


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
    versions: dict[str, str] | None = None   # the server's protocol/Corolla/Flower: in the handshake only
    secagg: dict[str, Any] = field(default_factory=dict)   # secure aggregation's ``secagg-*`` config entries
    nonce: str = ""   # the handshake's challenge: a node with a key signs it (``key-sig``)
    control: dict[int, Control] = field(default_factory=dict)   # typed per-client fields (``corolla.round``)

    def encode(self) -> Flat:
        conf: dict[str, Any] = {"phase": self.phase, "round": int(self.round), "clients": json.dumps(self.clients),
                                "restore-round": int(self.restore_round), **self.run.encode()}
        if self.cfg is not None:
            conf["cfg"] = json.dumps(self.cfg)
        if self.versions is not None:
            conf["versions"] = json.dumps(self.versions)
        if self.nonce:
            conf["nonce"] = self.nonce
        if any(c != DEFAULT_CONTROL for c in self.control.values()):
            conf["control"] = encode_controls(self.control)
        conf.update(self.secagg)
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
                   int(conf.get("restore-round", 0)), ev, json.loads(conf["cfg"]) if "cfg" in conf else None,
                   json.loads(conf["versions"]) if "versions" in conf else None,
                   {k: v for k, v in conf.items() if k.startswith("secagg-")}, str(conf.get("nonce", "")),
                   decode_controls(conf["control"]) if "control" in conf else {})

    def control_of(self, cid: int) -> Control:
        return self.control.get(cid, DEFAULT_CONTROL)

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
    orphans: list[int] = field(default_factory=list)   # decoded payloads without metrics (dropped)
    secure: dict[str, Any] = field(default_factory=dict)   # secure aggregation: the node's part (``secagg``)
    secure_info: dict[str, Any] = field(default_factory=dict)   # with it: ids that raised, node compute time

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
        if self.secure:
            flat["secagg"] = dict(self.secure)
        if self.secure_info:
            flat["secagg-info"] = dict(self.secure_info)
        return flat

    @classmethod
    def decode(cls, flat: Flat, evaluation: bool = False) -> PhaseReply:
        """Raises ``corolla.protocol.PayloadError`` (or ``ValueError``/``KeyError``) on a malformed
        reply. A payload without a metrics record is dropped (its client counts as not replied)."""
        res = flat.get("results", {})
        if not isinstance(res, dict):
            raise PayloadError("record 'results': expected a config record")
        out = cls()
        for prefix in ("", "eval-") if evaluation else ("",):
            packed = flat.get(f"{prefix}payload", {})
            if not isinstance(packed, dict) or not all(isinstance(a, np.ndarray) for a in packed.values()):
                raise PayloadError(f"record '{prefix}payload': expected an array record")
            payloads = unpack(dict(packed))
            mets = loads_per_client(res.get(f"{prefix}metrics"), dict)
            errs = loads_per_client(res.get(f"{prefix}errors"), str)
            results = {c: ClientOut(payloads.get(c, {}), dict(m)) for c, m in mets.items()}
            unclaimed = sorted(set(payloads) - set(mets))
            if prefix:
                out.eval_results, out.eval_errors = results, errs
            else:
                out.results, out.errors = results, errs
            out.orphans += unclaimed
        sec = flat.get("secagg", {})
        if not isinstance(sec, dict):
            raise PayloadError("record 'secagg': expected a record")
        out.secure = dict(sec)
        info = flat.get("secagg-info", {})
        if not isinstance(info, dict):
            raise PayloadError("record 'secagg-info': expected a record")
        out.secure_info = dict(info)
        return out

    def clients(self) -> set[int]:
        """Every client id the reply speaks for (results, errors, payloads without metrics)."""
        return set(self.results) | set(self.errors) | set(self.eval_results) | set(self.eval_errors) | set(self.orphans)


@dataclass
class NodeInfo:
    """A node's handshake reply: which logical clients it hosts (``auto``: can host) and its data;
    from a node with a key (``auth-key-file``), the key and its signature of the handshake's nonce."""
    hosted: dict[int, dict[str, int]]
    n_items: int
    edge: bool = False
    auto: bool = False
    data_stats: dict[str, Any] = field(default_factory=dict)
    key: str = ""        # the node's public key (an OpenSSH line) when it has one
    key_sig: str = ""    # base64 of its signature of (run, nonce): proof that it holds the key

    def encode(self) -> Flat:
        node = {"hosted": json.dumps({str(c): v for c, v in self.hosted.items()}), "n-items": int(self.n_items),
                "edge": bool(self.edge), "auto": bool(self.auto), "data-stats": json.dumps(self.data_stats)}
        if self.key:
            node["key"] = self.key
            node["key-sig"] = self.key_sig
        return {"node": node}

    @classmethod
    def decode(cls, flat: Flat) -> NodeInfo:
        """Raises :class:`PayloadError` unless the reply is a well-formed handshake."""
        info = flat.get("node")
        if not isinstance(info, dict):
            raise PayloadError("record 'node': missing or not a config record")
        hosted = loads_per_client(info.get("hosted"), dict)
        for c, v in hosted.items():
            if c < 0 or not all(isinstance(v.get(k), int) and not isinstance(v.get(k), bool) and v[k] >= 0
                                for k in ("users", "train")):
                raise PayloadError(f"hosted client {c}: expected a client id >= 0 with counts 'users' and 'train'")
            for k in ("items", "group"):   # optional: a subgraph's item count, a one-user client's subgraph
                if k in v and not (isinstance(v[k], int) and not isinstance(v[k], bool) and v[k] >= 0):
                    raise PayloadError(f"hosted client {c}: '{k}' must be an integer >= 0, got {v[k]!r}")
        n_items = info.get("n-items")
        if not isinstance(n_items, int) or isinstance(n_items, bool) or n_items <= 0:
            raise PayloadError(f"n-items: expected a positive integer, got {n_items!r}")
        stats = json.loads(info["data-stats"]) if "data-stats" in info else {}
        if not isinstance(stats, dict):
            raise PayloadError("data-stats: expected a JSON object")
        key, sig = info.get("key", ""), info.get("key-sig", "")
        if not isinstance(key, str) or not isinstance(sig, str) or len(key) > 1024 or len(sig) > 512:
            raise PayloadError("key / key-sig: expected an OpenSSH public key line and a base64 signature")
        return cls(hosted, n_items, bool(info.get("edge", False)), bool(info.get("auto", False)), stats, key, sig)
