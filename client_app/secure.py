"""A node's side of secure aggregation (``secagg = "secaggplus"``; the protocol is
``flower_io/secagg.py``, the server's side ``server_app/secure.py``).

The node is one SecAgg+ participant: it keeps its keys and the shares it holds in its state
directory between the messages of a round (``secagg-r<round>-n<id>.json``, written atomically; each
message may run in a fresh ClientApp process), and in the phase itself it sums its own logical
clients' uploads into one vector before masking it, so that no client's upload, and no node's
sum, leaves the node unmasked.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np

from corolla.messages import PhaseReply, PhaseRequest
from corolla.util import atomic_write_text
from flower_io.secagg import (NodeState, Params, SecAggError, node_collect, node_setup, node_share_keys,
                              node_unmask)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s.encode())


def _path(state_dir: Path, rnd: int, uid: int) -> Path:
    """Per round and SecAgg id: nodes that share a state directory (compose's volume) do not
    overwrite each other's secrets."""
    return Path(state_dir) / f"secagg-r{int(rnd)}-n{int(uid)}.json"


def save(state_dir: Path, rnd: int, st: NodeState) -> None:
    doc = {"uid": st.uid, "masked": st.masked, "senders": st.senders,
           **{k: _b64(getattr(st, k)) for k in ("sk1", "sk2", "pk1", "pk2", "seed")},
           "keys": {str(v): [_b64(a), _b64(b)] for v, (a, b) in st.keys.items()},
           "b_shares": {str(v): _b64(x) for v, x in st.b_shares.items()},
           "sk1_shares": {str(v): _b64(x) for v, x in st.sk1_shares.items()}}
    atomic_write_text(_path(state_dir, rnd, st.uid), json.dumps(doc))


def load(state_dir: Path, rnd: int, uid: int) -> NodeState:
    p = _path(state_dir, rnd, uid)
    if not p.is_file():
        raise SecAggError(f"node (secagg id {uid}): no secure-aggregation state for round {rnd} in {p.parent} "
                          "(the setup message of this round did not reach this node's state directory)")
    d = json.loads(p.read_text())
    if d["uid"] != uid:
        raise SecAggError(f"node: round {rnd}'s secure-aggregation state is for id {d['uid']}, not {uid}")
    return NodeState(d["uid"], *(_unb64(d[k]) for k in ("sk1", "sk2", "pk1", "pk2", "seed")),
                     keys={int(v): (_unb64(a), _unb64(b)) for v, (a, b) in d["keys"].items()},
                     b_shares={int(v): _unb64(x) for v, x in d["b_shares"].items()},
                     sk1_shares={int(v): _unb64(x) for v, x in d["sk1_shares"].items()},
                     senders=list(d["senders"]), masked=bool(d["masked"]))


def params(sec: dict[str, Any]) -> Params:
    t, clip, bits, k = json.loads(sec["secagg-params"])
    return Params(int(t), float(clip), int(bits), int(k))


def handle_query(req: PhaseRequest, state_dir: Path) -> dict[str, dict[str, Any]]:
    """Phases 1, 2 and 4 (``secagg-setup``, ``secagg-share``, ``secagg-unmask``): the reply's flat form."""
    sec = req.secagg
    rnd, uid, p = int(sec["secagg-round"]), int(sec["secagg-id"]), params(sec)
    if req.phase == "secagg-setup":
        for old in Path(state_dir).glob("secagg-r*-n*.json"):   # earlier rounds' secrets are not kept
            if int(old.name.split("-")[1][1:]) < rnd:
                old.unlink(missing_ok=True)
        st, (pk1, pk2) = node_setup(uid)
        save(state_dir, rnd, st)
        return {"secagg": {"pk1": _b64(pk1), "pk2": _b64(pk2)}}
    st = load(state_dir, rnd, uid)
    if req.phase == "secagg-share":
        keys = {int(v): (_unb64(a), _unb64(b)) for v, (a, b) in json.loads(sec["secagg-keys"]).items()}
        cts = node_share_keys(st, p, keys)
        save(state_dir, rnd, st)
        return {"secagg": {"cts": json.dumps({str(v): _b64(c) for v, c in cts.items()})}}
    if req.phase == "secagg-unmask":
        shares = node_unmask(st, p, json.loads(sec["secagg-active"]), json.loads(sec["secagg-dropped"]))
        _path(state_dir, rnd, uid).unlink(missing_ok=True)
        return {"secagg": {"shares": json.dumps({str(v): _b64(s) for v, s in shares.items()})}}
    raise SecAggError(f"unknown secure-aggregation phase {req.phase!r}")


def node_vector(reply: PhaseReply, layout: dict[str, list[int]], scale: float, weighted: bool) -> np.ndarray:
    """``Σ_c w_c·x_c / S`` over the arrays of ``layout``, then ``Σ_c w_c / S``, over the clients
    that replied (a GF-CF node sum counts its ``summed-clients``)."""
    size = sum(int(np.prod(s)) for s in layout.values())
    v = np.zeros(size + 1, np.float64)
    for out in reply.results.values():
        pay, mets = out.payload, out.metrics
        w = float(mets.get("num-examples", 0.0)) if weighted else 1.0
        at = 0
        parts: list[tuple[int, np.ndarray, float]] = []
        for k, shape in layout.items():
            m = int(np.prod(shape))
            if k in pay:
                parts.append((at, np.asarray(pay[k], np.float64).ravel(), w))
            elif f"{k}-sum" in pay:   # a node sum the client computed for its node (gfcf-upload=node-sum)
                w = float(mets.get("summed-clients", 0))
                parts.append((at, np.asarray(pay[f"{k}-sum"], np.float64).ravel(), 1.0))
            at += m
        if not parts:
            continue   # summed into another client's upload
        for at, a, ww in parts:
            v[at:at + a.size] += ww * a
        v[-1] += w
    return v / scale


def mask_reply(req: PhaseRequest, state_dir: Path, reply: PhaseReply) -> None:
    """Phase 3: replace the clients' uploads in ``reply`` by the node's masked sum."""
    sec = req.secagg
    rnd, uid, p = int(sec["secagg-round"]), int(sec["secagg-id"]), params(sec)
    st = load(state_dir, rnd, uid)
    v = node_vector(reply, json.loads(sec["secagg-layout"]), float(sec["secagg-scale"]),
                    bool(sec["secagg-weighted"]))
    big = float(np.abs(v).max()) if v.size else 0.0
    if big > p.clip:
        raise SecAggError(f"secure aggregation: this node's sum reaches {big:.4g}, beyond secagg-clip={p.clip}; "
                          "raise secagg-clip (the quantisation step grows with it)")
    cts = {int(s): _unb64(c) for s, c in json.loads(sec["secagg-cts"]).items()}
    y = node_collect(st, p, v, cts)
    save(state_dir, rnd, st)
    for out in reply.results.values():
        out.payload = {}
    reply.secure = {"masked": y}
