"""Secure aggregation of one phase's upload (``secagg = "secaggplus"``): SecAgg+ as phases of the
round (``flower_io/secagg.py`` holds the protocol and its reference).

A secure phase is four exchanges with the nodes that host the phase's clients, each node a SecAgg
participant with an id 1..n for this round: ``secagg-setup`` (public keys up), ``secagg-share``
(its neighbours' keys down, encrypted shares up), the phase itself (the strategy's download and
the shares addressed to the node down; each node trains its clients, sums their uploads into one
vector, ``Σ_c w_c·x_c / S`` and ``Σ_c w_c / S`` with ``w_c`` = ``num-examples`` for a weighted
mean or 1, ``S`` a public scale, and sends it masked; no per-client payload leaves the node), and
``secagg-unmask`` (shares of the survivors' self-mask seeds and of the dropped nodes' mask keys).
The server learns only ``Σ_nodes``, from which the mean of the uploads is the first part over the
last entry; the strategy folds it in with ``aggregate_secure``.

Bytes: the key, share and ciphertext texts are counted as they travel (base64 in JSON), the masked
vectors as ``.npy`` arrays, so ``rounds.jsonl`` shows each phase's cost.
"""
from __future__ import annotations

import base64
import json
import math
import time
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.messages import PhaseRequest
from corolla.protocol import npy_size
from flower_io.secagg import Params, SecAggError, ServerRound
from server_app.exchange import Exchanger, PhaseStats


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s.encode())


class SecureRound:
    """One secure phase of round ``rnd`` over the nodes hosting ``targets``."""

    def __init__(self, ex: Exchanger, phase: str, rnd: int, targets: list[int]):
        self.ex, self.phase, self.rnd = ex, phase, rnd
        cfg, roster, strategy = ex.cfg, ex.roster, ex.strategy
        tset = set(targets)
        nodes = sorted(n for n, cids in roster.nodes.items() if n not in roster.dead_nodes and tset & set(cids))
        self.sid = {node: i + 1 for i, node in enumerate(nodes)}
        self.node_of = {i: node for node, i in self.sid.items()}
        n = len(nodes)
        k = cfg["secagg-neighbours"]
        hood = (n if k <= 0 or k >= n - 1 else 2 * max(1, k // 2) + 1)   # a node and its neighbours
        t = cfg["secagg-threshold"] or max(2, hood // 2 + 1)
        if t > hood:
            raise SecAggError(f"round {rnd}: secagg-threshold={t} exceeds the {hood} nodes of a neighbourhood "
                              f"({n} nodes host this phase's clients): lower it or add nodes")
        self.p = Params(threshold=t, clip=float(cfg["secagg-clip"]), bits=int(cfg["secagg-bits"]), neighbours=k)
        self.layout = strategy.secure_layout(phase, rnd)
        if self.layout is None:
            raise SecAggError(f"{type(strategy).__name__}: phase {phase} is not a sum")
        self.weighted = bool(strategy.secure_weighted)
        if self.weighted:   # the round's training interactions: w_c / S stays near a client's share
            self.scale = float(sum(roster.clients[c].get("train", 0) for c in targets) or len(targets))
        else:
            self.scale = float(len(targets))
        self.size = sum(int(np.prod(s)) for s in self.layout.values()) + 1
        self.srv = ServerRound(self.p, sorted(self.sid.values()), seed=hash((cfg["seed"], rnd)) & 0xFFFFFFFF)
        self.stats: list[PhaseStats] = []
        self.collect_stats: PhaseStats | None = None   # the summed phase's own (its exclusions)

    # ------------------------------------------------------------------ helpers
    def _config(self, node: int, **kw) -> dict[str, Any]:
        return {"secagg-round": self.rnd, "secagg-id": self.sid[node],
                "secagg-params": json.dumps([self.p.threshold, self.p.clip, self.p.bits, self.p.neighbours]), **kw}

    def _query(self, name: str, nodes: list[int], make) -> dict[int, dict]:
        """One ``secagg-<name>`` exchange; returns the ``secagg`` record of each node that replied."""
        t0 = time.perf_counter()
        st = PhaseStats(f"secagg-{name}")
        msgs = []
        for node in nodes:
            extra = make(node)
            st.bytes_down += sum(len(v) for v in extra.values() if isinstance(v, str))
            req = PhaseRequest(f"secagg-{name}", self.rnd, [], self.ex.run, secagg=self._config(node, **extra))
            msgs.append((node, req.encode()))
        out: dict[int, dict] = {}
        for idx, rep in self.ex.transport.exchange(msgs, "query.secagg", self.ex.cfg["phase-timeout"]):
            node = msgs[idx][0]
            if isinstance(rep, str) or not isinstance(rep.get("secagg"), dict):
                why = rep if isinstance(rep, str) else "no secagg record"
                log(WARNING, "node %s dropped out of secure aggregation in secagg-%s (%s)", node, name, str(why)[:200])
                st.excluded.append({"node": node, "client": -1, "reason": f"secagg-{name}: {str(why)[:200]}"})
                continue
            st.replies += 1
            rec = rep["secagg"]
            st.bytes_up += sum(len(v) for v in rec.values() if isinstance(v, str))
            out[node] = rec
        st.wall_s = time.perf_counter() - t0
        self.stats.append(st)
        return out

    # ------------------------------------------------------------------ phases
    def setup_and_share(self) -> None:
        """Phases 1 and 2: public keys, then the encrypted shares."""
        for node, rec in self._query("setup", sorted(self.sid), lambda node: {}).items():
            try:
                self.srv.add_keys(self.sid[node], (unb64(rec["pk1"]), unb64(rec["pk2"])))
            except (KeyError, ValueError) as e:
                log(WARNING, "node %s: malformed secagg-setup reply (%s)", node, e)
        keyed = [n for n in sorted(self.sid) if self.sid[n] in self.srv.keys]

        def share_keys(node):
            keys = self.srv.keys_for(self.sid[node])
            return {"secagg-keys": json.dumps({str(v): [b64(a), b64(b)] for v, (a, b) in keys.items()})}
        for node, rec in self._query("share", keyed, share_keys).items():
            try:
                cts = {int(v): unb64(c) for v, c in json.loads(rec["cts"]).items()}
                self.srv.add_shares(self.sid[node], cts)
            except (KeyError, ValueError, SecAggError) as e:
                log(WARNING, "node %s: its secagg-share reply is not used (%s)", node, e)
        if len(self.srv.shared) < self.p.threshold:
            raise SecAggError(f"round {self.rnd}: {len(self.srv.shared)} nodes shared their keys, fewer than the "
                              f"threshold {self.p.threshold}: secure aggregation cannot complete")

    def collect_config(self, node: int) -> dict[str, Any]:
        """Phase 3's entries for ``node``'s message of the phase itself."""
        if node not in self.sid or self.sid[node] not in self.srv.shared:
            return {}
        cts = self.srv.ciphertexts_for(self.sid[node])
        return self._config(node, **{"secagg-cts": json.dumps({str(s): b64(c) for s, c in cts.items()}),
                                     "secagg-layout": json.dumps({k: list(v) for k, v in self.layout.items()}),
                                     "secagg-scale": self.scale, "secagg-weighted": self.weighted})

    def add_masked(self, node: int, y: Any) -> str | None:
        """A node's masked vector from phase 3 (None: taken; else why not)."""
        if node not in self.sid:
            return "not a participant"
        if not isinstance(y, np.ndarray) or y.dtype != np.int64 or y.shape != (self.size,):
            return f"masked vector: expected int64 of shape ({self.size},), got {getattr(y, 'dtype', type(y))} " \
                   f"{getattr(y, 'shape', '')}"
        try:
            self.srv.add_masked(self.sid[node], y)
        except SecAggError as e:
            return str(e)
        return None

    def masked_bytes(self) -> int:
        return npy_size(np.zeros(self.size, np.int64))

    def unmask(self) -> tuple[dict[str, np.ndarray], float, int]:
        """Phase 4: the shares, then the mean of the uploads: ``(mean, Σw/S, active nodes)``."""
        alive = [self.node_of[u] for u in self.srv.active]

        def unmask(node):
            act, drop = self.srv.unmask_request(self.sid[node])
            return {"secagg-active": json.dumps(act), "secagg-dropped": json.dumps(drop)}
        shares: dict[int, dict[int, bytes]] = {}
        for node, rec in self._query("unmask", alive, unmask).items():
            try:
                shares[self.sid[node]] = {int(v): unb64(s) for v, s in json.loads(rec["shares"]).items()}
            except (KeyError, ValueError) as e:
                log(WARNING, "node %s: malformed secagg-unmask reply (%s)", node, e)
        try:
            total, n_active = self.srv.finish(shares)
        except SecAggError as e:
            said = [x["reason"] for x in (self.collect_stats.excluded if self.collect_stats else [])
                    if "secure aggregation" in x["reason"] or "secagg" in x["reason"]]
            raise SecAggError(f"round {self.rnd}, phase {self.phase}: {e}"
                              + (f" (a node said: {said[0][:300]})" if said else "")) from None
        weight = float(total[-1])
        if not weight > 0 or not math.isfinite(weight):
            raise SecAggError(f"round {self.rnd}: the secure sum's weight is {weight}: no client was summed")
        mean, at = {}, 0
        for k, shape in self.layout.items():
            m = int(np.prod(shape))
            mean[k] = (total[at:at + m] / weight).reshape(shape)
            at += m
        return mean, weight, n_active
