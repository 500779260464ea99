"""The Flower ClientApp: converts messages to plain dicts, runs :class:`NodeHost`, converts back."""

from __future__ import annotations

import json

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client_app.base import NodeHost
from corolla.protocol import (client_key, error_key, eval_client_key, eval_error_key, eval_metric_key,
                              metric_key)

app = ClientApp()


def _arrays(rec: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in rec.items()}


def handle(content: RecordDict, node_config: dict) -> RecordDict:
    """Pure message handler (also used by the in-process transport of the tests)."""
    cfgrec = dict(content["config"])
    host = NodeHost(node_config, cfgrec)
    phase = str(cfgrec["phase"])
    if phase == "handshake":
        return RecordDict({"node": ConfigRecord(host.handshake(int(cfgrec.get("restore-round", 0))))})
    targets = [int(c) for c in json.loads(cfgrec["clients"])]
    shared = _arrays(content["global"]) if "global" in content else {}
    personal = {c: _arrays(content[client_key(c)]) for c in targets if client_key(c) in content}
    reply = RecordDict()
    evaluation = None
    if "eval-round" in cfgrec:   # the fused evaluation of a round (corolla.protocol)
        ev_targets = [int(c) for c in json.loads(cfgrec["eval-clients"])]
        how = str(cfgrec.get("eval-shared", "none"))
        ev_shared = shared if how == "global" else (_arrays(content["eval-global"]) if how == "own" else {})
        ev_personal = {c: _arrays(content[eval_client_key(c)]) for c in ev_targets
                       if eval_client_key(c) in content}
        evaluation = (int(cfgrec["eval-round"]), ev_targets, ev_shared, ev_personal)
    if evaluation is not None and cfgrec.get("eval-when") == "before":
        _put(reply, host.run_phase("evaluate", *evaluation), eval_client_key, eval_metric_key, eval_error_key)
    if targets:
        _put(reply, host.run_phase(phase, int(cfgrec["round"]), targets, shared, personal),
             client_key, metric_key, error_key)
    if evaluation is not None and cfgrec.get("eval-when") == "after":
        _put(reply, host.run_phase("evaluate", *evaluation), eval_client_key, eval_metric_key, eval_error_key)
    return reply


def _put(reply: RecordDict, results, payload_key, metrics_key, err_key) -> None:
    for cid, res in results.items():
        if isinstance(res, str):
            reply[err_key(cid)] = ConfigRecord({"error": res})
            continue
        if res.payload:
            reply[payload_key(cid)] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in res.payload.items()})
        reply[metrics_key(cid)] = MetricRecord({k: v for k, v in res.metrics.items() if v is not None})


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
