"""The Flower ClientApp: converts messages to plain dicts, runs :class:`NodeHost`, converts back."""

from __future__ import annotations

import json

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client_app.host import NodeHost
from corolla.protocol import dumps_per_client, pack, unpack

app = ClientApp()


def _arrays(rec: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in rec.items()}


def _record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def handle(content: RecordDict, node_config: dict) -> RecordDict:
    """Pure message handler (also used by the in-process transport); see ``corolla.protocol``."""
    cfgrec = dict(content["config"])
    host = NodeHost(node_config, cfgrec)
    phase = str(cfgrec["phase"])
    if phase == "handshake":
        return RecordDict({"node": ConfigRecord(host.handshake(int(cfgrec.get("restore-round", 0))))})
    targets = [int(c) for c in json.loads(cfgrec["clients"])]
    shared = _arrays(content["global"]) if "global" in content else {}
    personal = unpack(_arrays(content["personal"])) if "personal" in content else {}
    reply = RecordDict()
    results: dict[str, str] = {}
    evaluation = None
    if "eval-round" in cfgrec:   # the fused evaluation of a round
        ev_targets = [int(c) for c in json.loads(cfgrec["eval-clients"])]
        how = str(cfgrec.get("eval-shared", "none"))
        ev_shared = shared if how == "global" else (_arrays(content["eval-global"]) if how == "own" else {})
        ev_personal = unpack(_arrays(content["eval-personal"])) if "eval-personal" in content else {}
        evaluation = (int(cfgrec["eval-round"]), ev_targets, ev_shared, ev_personal)
    if evaluation is not None and cfgrec.get("eval-when") == "before":
        _put(reply, results, "eval-", host.run_phase("evaluate", *evaluation))
    if targets:
        _put(reply, results, "", host.run_phase(phase, int(cfgrec["round"]), targets, shared, personal))
    if evaluation is not None and cfgrec.get("eval-when") == "after":
        _put(reply, results, "eval-", host.run_phase("evaluate", *evaluation))
    reply["results"] = ConfigRecord(results)
    return reply


def _put(reply: RecordDict, results: dict[str, str], prefix: str, out) -> None:
    """The phase's per-client results into the reply: payloads packed, metrics and errors as JSON."""
    ok = {c: r for c, r in out.items() if not isinstance(r, str)}
    errors = {c: r for c, r in out.items() if isinstance(r, str)}
    packed = pack({c: r.payload for c, r in ok.items()})
    if packed:
        reply[f"{prefix}payload"] = _record(packed)
    results[f"{prefix}metrics"] = dumps_per_client(
        {c: {k: v for k, v in r.metrics.items() if v is not None} for c, r in ok.items()})
    if errors:
        results[f"{prefix}errors"] = dumps_per_client(errors)


def _reply(msg: Message, context: Context) -> Message:
    return Message(handle(msg.content, context.node_config), reply_to=msg)


@app.query("handshake")
def handshake(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.query("topk")
def topk(msg: Message, context: Context) -> Message:
    return _reply(msg, context)
