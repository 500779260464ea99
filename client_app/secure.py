"""A node's side of secure aggregation (``secagg = "secaggplus"``; the protocol is
``corolla.secagg``, the server's side ``server_app/secure.py``).

The node is one SecAgg+ participant of each round's summed phase. Its secrets (the round's key
pairs, its self-mask seed, the shares it holds) live in Flower's ``context.state`` (``run_state``
here: the SuperNode keeps it in its own memory across the messages of a run, and nothing of it is
written to disk), are replaced at the next round's setup and deleted once it has unmasked.

What it takes from the server is checked: the parameters come from the run config it received
in the handshake (its hash is checked on every message), fixed at setup, never from a later
message; the stages run in order, once each; in the summed phase it sums its own clients'
uploads, with their count and training loss, into one vector and sends only that vector,
masked, with the ids of the clients that raised (no per-client metric and no value leaves the
node). A message of the summed phase without its secure-aggregation entries is refused: the
node never uploads in the clear in a secure run.

Node config: ``auth-key-file`` (the SuperNode's authentication key: it signs its round keys and
the survivor set; ``corolla supernode`` sets it from ``--auth-supernode-private-key``) and
``trusted-keys`` (the operator's list of registered node keys: a file of OpenSSH public keys or a
folder of ``*.pub``; with it the node accepts only signed neighbours and a survivor set signed by
at least ``t`` of them: the malicious-server model of ``docs/deployment.md``).
"""
from __future__ import annotations

import base64
import json
import time
from typing import Any

import numpy as np

from corolla.messages import PhaseReply, PhaseRequest
from corolla.secagg import identity, node
from corolla.secagg.params import Params
from corolla.secagg.primitives import SecAggError

STATE = "secagg"           # the key of the node's secure-aggregation state in run_state
LOSS_SCALE = 1000.0        # the training-loss entry is Σ loss / (S_n · LOSS_SCALE), inside [-clip, clip]


def _b(x: bytes) -> str:
    return base64.b64encode(x).decode()


def _unb(x: Any, what: str) -> bytes:
    if not isinstance(x, str):
        raise SecAggError(f"{what}: expected base64 text")
    try:
        return base64.b64decode(x.encode(), validate=True)
    except ValueError:
        raise SecAggError(f"{what}: not base64") from None


def identity_of(node_config: dict[str, Any]) -> tuple[identity.Signer | None, dict[str, str] | None]:
    """The node's signer (``auth-key-file``) and trust list (``trusted-keys``), each None if unset."""
    key = str(node_config.get("auth-key-file", "") or "")
    trust = str(node_config.get("trusted-keys", "") or "")
    return (identity.Signer(key) if key else None), (identity.load_trusted(trust) if trust else None)


def _load(run_state: dict[str, Any], req: PhaseRequest) -> node.NodeState:
    text = run_state.get(STATE)
    if not text:
        raise SecAggError(f"no secure-aggregation state for round {req.round} (this node missed the round's setup)")
    st = node.NodeState.loads(text)
    if (st.run, st.rnd) != (req.run.run_key, req.round) or st.uid != req.secagg.get("secagg-id"):
        raise SecAggError(f"the secure-aggregation state is for round {st.rnd}, not {req.round}")
    return st


def handle_query(req: PhaseRequest, cfg: dict[str, Any], node_config: dict[str, Any],
                 run_state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``secagg-setup``, ``-share``, ``-confirm`` and ``-unmask``: the reply's flat form."""
    if cfg.get("secagg", "none") == "none":
        raise SecAggError("a secure-aggregation message in a run without secure aggregation")
    sec = req.secagg
    signer, trusted = identity_of(node_config)
    if req.phase == "secagg-setup":
        last = json.loads(run_state.get(STATE + "-last", "[0, \"\"]"))
        if req.round <= int(last[0]):
            raise SecAggError(f"setup of round {req.round}: this node already took part in round {last[0]}'s "
                              "aggregation (rounds only move forward)")
        n, uid, phase = sec.get("secagg-n"), sec.get("secagg-id"), sec.get("secagg-phase")
        if not isinstance(n, int) or not isinstance(uid, int) or not isinstance(phase, str):
            raise SecAggError("setup: expected integer 'secagg-n' and 'secagg-id' and the phase's name")
        st, rep = node.setup(req.run.run_key, req.round, phase, uid, Params.from_config(cfg, n), signer,
                             trusted is not None)
        run_state[STATE] = st.dumps()
        run_state[STATE + "-last"] = json.dumps([req.round, phase])
        out = {"pk1": _b(rep["pk1"]), "pk2": _b(rep["pk2"])}
        if "sig" in rep:
            out.update(signer=rep["signer"], sig=_b(rep["sig"]))
        return {"secagg": out}
    st = _load(run_state, req)
    if req.phase == "secagg-share":
        raw = json.loads(sec.get("secagg-keys", "null"))
        if not isinstance(raw, dict):
            raise SecAggError("share: expected the neighbourhood's keys")
        entries = {}
        for v, e in raw.items():
            if not isinstance(e, list) or len(e) != 4:
                raise SecAggError(f"share: node {v}'s keys: expected [pk1, pk2, signer, sig]")
            entries[int(v)] = {"pk1": _unb(e[0], "pk1"), "pk2": _unb(e[1], "pk2"), "signer": e[2],
                               "sig": _unb(e[3], "sig") if e[3] else b""}
        cts, commit = node.share_keys(st, entries, trusted, signer.public if signer else "")
        run_state[STATE] = st.dumps()
        return {"secagg": {"cts": json.dumps({str(v): _b(c) for v, c in cts.items()}), "commit": _b(commit)}}
    if req.phase == "secagg-confirm":
        sig = node.confirm(st, json.loads(sec.get("secagg-active", "null")), signer)
        run_state[STATE] = st.dumps()
        return {"secagg": {"sig": _b(sig)}}
    if req.phase == "secagg-unmask":
        sigs = {int(v): _unb(s, "signature") for v, s in json.loads(sec.get("secagg-sigs", "{}")).items()}
        shares = node.unmask(st, json.loads(sec.get("secagg-active", "null")), sigs)
        run_state.pop(STATE, None)   # the round's secrets are gone
        return {"secagg": {"shares": json.dumps({str(v): _b(s) for v, s in shares.items()})}}
    raise SecAggError(f"unknown secure-aggregation phase {req.phase!r}")


def node_vector(reply: PhaseReply, layout: dict[str, list[int]], scale: float, weighted: bool,
                n_targets: int) -> np.ndarray:
    """The node's contribution: ``Σ_c w_c·x_c / S`` over the arrays of ``layout``, then
    ``Σ_c loss_c / (S_n·LOSS_SCALE)``, ``#losses / S_n``, ``#clients / S_n`` and ``Σ_c w_c / S``
    over the clients that replied (``S_n`` = the phase's targets; a GF-CF node sum counts its
    ``summed-clients``)."""
    size = sum(int(np.prod(s)) for s in layout.values())
    v = np.zeros(size + 4, np.float64)
    for out in reply.results.values():
        pay, mets = out.payload, out.metrics
        w = float(mets.get("num-examples", 0.0)) if weighted else 1.0
        clients = 1.0
        at = 0
        parts: list[tuple[int, np.ndarray, float]] = []
        for k, shape in layout.items():
            m = int(np.prod(shape))
            if k in pay:
                parts.append((at, np.asarray(pay[k], np.float64).ravel(), w))
            elif f"{k}-sum" in pay:   # a node sum the client computed for its node (gfcf-upload=node-sum)
                w = clients = float(mets.get("summed-clients", 0))
                parts.append((at, np.asarray(pay[f"{k}-sum"], np.float64).ravel(), 1.0))
            at += m
        if not parts:
            continue   # summed into another client's upload
        for at, a, ww in parts:
            v[at:at + a.size] += ww * a
        loss = mets.get("train-loss")
        if isinstance(loss, (int, float)) and np.isfinite(loss):
            v[size] += float(loss) / (n_targets * LOSS_SCALE)
            v[size + 1] += 1.0 / n_targets
        v[size + 2] += clients / n_targets
        v[size + 3] += w / scale
    v[:size] /= scale
    return v


def mask_reply(req: PhaseRequest, cfg: dict[str, Any], run_state: dict[str, Any], reply: PhaseReply,
               t0: float) -> None:
    """The summed phase: replace the clients' uploads and metrics in ``reply`` by the node's one
    masked vector and the ids of the clients that raised."""
    sec = req.secagg
    st = _load(run_state, req)
    layout = json.loads(sec["secagg-layout"])
    v = node_vector(reply, layout, float(sec["secagg-scale"]), bool(sec["secagg-weighted"]),
                    int(sec["secagg-targets"]))
    v[-4] = float(np.clip(v[-4], -st.params.clip, st.params.clip))   # the loss entry is a metric: clipped
    if v.size and float(np.abs(v).max()) > st.params.clip:
        raise SecAggError("secure aggregation: this node's sum exceeds secagg-clip; raise secagg-clip "
                          "(the quantisation step grows with it)")
    raw = json.loads(sec["secagg-cts"])
    cts = {int(s): _unb(c, "ciphertext") for s, c in raw.items()}
    y = node.collect(st, v, cts)
    run_state[STATE] = st.dumps()
    failed = sorted(set(reply.errors))
    reply.results, reply.errors = {}, {}
    reply.secure = {"masked": y}
    reply.secure_info = {"failed": json.dumps(failed), "compute-s": round(time.perf_counter() - t0, 3)}


def check_summed_phase(req: PhaseRequest, cfg: dict[str, Any], secure_phase: str) -> bool:
    """Whether ``req`` is the run's summed phase under secure aggregation; raises when such a
    message carries no secure-aggregation entries (the node never uploads in the clear)."""
    if cfg.get("secagg", "none") == "none" or req.phase != secure_phase or not req.clients:
        return False
    if not isinstance(req.secagg.get("secagg-cts"), str):
        raise SecAggError(f"phase '{req.phase}' of a secure-aggregation run without its secure-aggregation "
                          "entries: refused (this node uploads nothing in the clear)")
    return True
