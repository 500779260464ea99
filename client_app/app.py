"""The Flower ClientApp: a message's records to a ``corolla.messages.PhaseRequest``, the node's work
(:class:`client_app.host.NodeHost`), the ``PhaseReply`` back to records.

The run config arrives once per node and run, in the handshake; the node keeps it in Flower's
``context.state`` (which a SuperNode keeps across the messages of one run, also when each message
starts a new ClientApp process) and checks every later message's ``cfg-hash`` against it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client_app import secure
from client_app.host import NodeHost
from corolla import methods
from corolla.messages import (PROTOCOL_VERSION, ClientOut, Flat, PhaseReply, PhaseRequest, config_hash,
                              version_mismatch)
from corolla.round import Phase, SecAggStep, step
from flower_io.records import from_records, to_records

app = ClientApp()
STATE_KEY = "corolla-run"


def run_config(req: PhaseRequest, run_state: dict[str, Any]) -> dict[str, Any]:
    """The run config of ``req``: from the handshake (kept in ``run_state``), else from
    ``run_state``, checked against the message's hash."""
    if req.cfg is not None:
        run_state.clear()
        run_state.update({"run-key": req.run.run_key, "cfg": json.dumps(req.cfg)})
        return req.cfg
    if run_state.get("run-key") != req.run.run_key:
        raise RuntimeError(f"this node holds no config for run {req.run.run_key} (it has "
                           f"{run_state.get('run-key') or 'none'}): the server sends it in the handshake, "
                           f"which this node missed")
    cfg = json.loads(run_state["cfg"])
    if req.run.cfg_hash and config_hash(cfg) != req.run.cfg_hash:
        raise RuntimeError(f"run {req.run.run_key}: the message's config hash {req.run.cfg_hash} is not the "
                           f"handshake's {config_hash(cfg)}")
    return cfg


class VersionMismatch(RuntimeError):
    """The node's protocol, Corolla or Flower differs from the server's: its handshake fails."""


def node_versions() -> dict[str, str]:
    from importlib.metadata import version

    import corolla
    return {"protocol": str(PROTOCOL_VERSION), "corolla": corolla.__version__, "flwr": version("flwr")}


def _split(out) -> tuple[dict[int, ClientOut], dict[int, str]]:
    ok = {c: ClientOut(r.payload, r.metrics) for c, r in out.items() if not isinstance(r, str)}
    return ok, {c: r for c, r in out.items() if isinstance(r, str)}


def handle_flat(flat: Flat, node_config: dict, run_state: dict[str, Any]) -> Flat:
    """Pure message handler on flat messages (``corolla.messages``)."""
    req = PhaseRequest.decode(flat)
    kind = step(req.phase)   # a phase or a secure-aggregation step; anything else is refused
    if kind == Phase.HANDSHAKE and req.versions is not None:
        bad = version_mismatch(req.versions, node_versions())
        if bad:
            raise VersionMismatch(bad)
    cfg = run_config(req, run_state)
    if isinstance(kind, SecAggStep):
        return secure.handle_query(req, cfg, node_config, run_state)
    t0 = time.perf_counter()
    summed = secure.check_summed_phase(req, cfg, methods.lookup(cfg).secure_phase)
    host = NodeHost(node_config, cfg, req.run)
    if kind == Phase.HANDSHAKE:
        return host.handshake(req.restore_round, req.nonce).encode()
    reply = PhaseReply()
    ev = req.evaluation
    if ev is not None and ev.when == "before":
        reply.eval_results, reply.eval_errors = _split(host.run_phase(Phase.EVALUATE, ev.round, ev.clients,
                                                                      ev.shared, ev.personal))
    if req.clients:
        reply.results, reply.errors = _split(host.run_phase(kind, req.round, req.clients, req.shared,
                                                            req.personal, req.control))
    if summed:   # secure aggregation: one masked vector for the node's clients, nothing in the clear
        secure.mask_reply(req, cfg, run_state, reply, t0)
    if ev is not None and ev.when == "after":
        reply.eval_results, reply.eval_errors = _split(host.run_phase(Phase.EVALUATE, ev.round, ev.clients,
                                                                      ev.shared, ev.personal))
    return reply.encode()


def handle(content: RecordDict, node_config: dict, run_state: dict[str, Any]) -> RecordDict:
    """The handler on Flower's records (the ClientApp's and the in-process transport's)."""
    return to_records(handle_flat(from_records(content), node_config, run_state))


def _reply(msg: Message, context: Context) -> Message:
    state = dict(context.state[STATE_KEY]) if STATE_KEY in context.state else {}
    out = handle(msg.content, context.node_config, state)
    context.state[STATE_KEY] = ConfigRecord(state)
    return Message(out, reply_to=msg)


@app.query("handshake")
def handshake(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.query("secagg")
def secagg(msg: Message, context: Context) -> Message:
    return _reply(msg, context)


@app.query("topk")
def topk(msg: Message, context: Context) -> Message:
    return _reply(msg, context)
