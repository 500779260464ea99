"""Secure aggregation of one phase's upload (``secagg = "secaggplus"``): SecAgg+ as exchanges of
the round (``corolla.secagg`` holds the protocol; ``client_app/secure.py`` the node's side).

A secure phase is these exchanges with the nodes that host the phase's clients, each node a
SecAgg participant with an id 1..n for this round: ``secagg-setup`` (round keys up, signed by the
node's key when it has one), ``secagg-share`` (its neighbours' keys down; encrypted shares and a
seed commitment up), the phase itself (sent only to the nodes whose share set was complete: the
strategy's download and the shares addressed to the node down; the node's one masked vector up:
``Σ_c w_c·x_c / S``, the clients' count and training loss, and ``Σ_c w_c / S``, with ``w_c`` =
``num-examples`` for a weighted mean or 1 and ``S`` a public scale; no per-client payload or
metric leaves the node), ``secagg-confirm`` (signed rounds: every survivor signs the survivor
set) and ``secagg-unmask`` (the survivor set and its signatures down; shares up). The server
learns only ``Σ_nodes``, from which the mean of the uploads is the first part over the last
entry; the strategy folds it in with ``aggregate_secure``.

Every reply is bounded in size before it is decoded and checked where it arrives; whatever a
node sends (a malformed key, a missing share, a second vector, garbage), that node is excluded
with the reason and the round completes with the others or fails with :class:`SecAggError`,
never with a wrong sum (``corolla.secagg.server``).

Bytes: the key, share and ciphertext texts are counted as they travel (base64 in JSON), the
masked vectors as ``.npy`` arrays, so ``rounds.jsonl`` shows each phase's cost.
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
from corolla.secagg.params import Params
from corolla.secagg.primitives import SecAggError
from corolla.secagg.server import MAX_CIPHERTEXT, KeyEntry, ServerRound
from server_app.exchange import Exchanger, PhaseStats

REPLY_TEXT = {"setup": 2048, "confirm": 1024}   # bytes of text a setup / confirm reply may carry
LOSS_SCALE = 1000.0                              # as client_app.secure.LOSS_SCALE (the wire contract)
EXTRA = 4                                        # loss, loss count, clients, weight


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def unb64(s: Any, what: str) -> bytes:
    if not isinstance(s, str):
        raise SecAggError(f"{what}: expected base64 text")
    try:
        return base64.b64decode(s.encode(), validate=True)
    except ValueError:
        raise SecAggError(f"{what}: not base64") from None


def _json(s: Any, what: str, kind: type) -> Any:
    if not isinstance(s, str):
        raise SecAggError(f"{what}: expected JSON text")
    try:
        v = json.loads(s)
    except ValueError:
        raise SecAggError(f"{what}: not JSON") from None
    if not isinstance(v, kind):
        raise SecAggError(f"{what}: expected a JSON {kind.__name__}")
    return v


class SecureRound:
    """One secure phase of round ``rnd`` over the nodes hosting ``targets``."""

    def __init__(self, ex: Exchanger, phase: str, rnd: int, targets: list[int]):
        self.ex, self.phase, self.rnd = ex, phase, rnd
        cfg, roster, strategy = ex.cfg, ex.roster, ex.strategy
        tset = set(targets)
        nodes = sorted(n for n, cids in roster.nodes.items() if n not in roster.dead_nodes and tset & set(cids))
        self.sid = {node: i + 1 for i, node in enumerate(nodes)}
        self.node_of = {i: node for node, i in self.sid.items()}
        try:
            self.p = Params.from_config(cfg, len(nodes))
        except SecAggError as e:
            raise SecAggError(f"round {rnd}: {e} ({len(nodes)} nodes host the clients of phase {phase})") from None
        self.layout = strategy.secure_layout(phase, rnd)
        if self.layout is None:
            raise SecAggError(f"{type(strategy).__name__}: phase {phase} is not a sum")
        self.weighted = bool(strategy.secure_weighted)
        self.n_targets = len(targets)
        if self.weighted:   # the round's training interactions: w_c / S stays near a client's share
            self.scale = float(sum(roster.clients[c].get("train", 0) for c in targets) or len(targets))
        else:
            self.scale = float(len(targets))
        self.size = sum(int(np.prod(s)) for s in self.layout.values()) + EXTRA
        self.srv = ServerRound(self.p, sorted(self.sid.values()), ex.run.run_key, rnd, phase)
        self.stats: list[PhaseStats] = []
        self.collect_stats: PhaseStats | None = None   # the summed phase's own (its exclusions)
        self.failed: dict[int, str] = {}               # node -> why it left the aggregation

    # ------------------------------------------------------------------ helpers
    def _drop(self, node: int, step: str, why: str, st: PhaseStats) -> None:
        log(WARNING, "node %s is excluded from secure aggregation in secagg-%s (%s)", node, step, why[:300])
        st.excluded.append({"node": node, "client": -1, "reason": f"secagg-{step}: {why[:300]}"})
        self.failed.setdefault(node, f"secagg-{step}: {why[:200]}")

    def _query(self, name: str, nodes: list[int], make, take, limit_text: int) -> None:
        """One ``secagg-<name>`` exchange: ``make(node)`` gives the request's entries, ``take(node,
        record)`` checks and takes a reply (any exception excludes that node)."""
        t0 = time.perf_counter()
        st = PhaseStats(f"secagg-{name}")
        msgs = []
        for node in nodes:
            extra = {"secagg-id": self.sid[node], **make(node)}
            st.bytes_down += sum(len(v) for v in extra.values() if isinstance(v, str))
            req = PhaseRequest(f"secagg-{name}", self.rnd, [], self.ex.run, secagg=extra)
            msgs.append((node, req.encode()))
        limits = [(0, limit_text)] * len(msgs)
        for idx, rep in self.ex.transport.exchange(msgs, "query.secagg", self.ex.cfg["phase-timeout"], limits):
            node = msgs[idx][0]
            rec = rep.get("secagg") if isinstance(rep, dict) else None
            if not isinstance(rec, dict):
                self._drop(node, name, rep if isinstance(rep, str) else "no secagg record", st)
                continue
            try:
                take(node, rec)
            except Exception as e:  # noqa: BLE001 - whatever a node sends costs that node only
                self._drop(node, name, f"{type(e).__name__}: {e}" if not isinstance(e, SecAggError) else str(e), st)
                continue
            st.replies += 1
            st.bytes_up += sum(len(v) for v in rec.values() if isinstance(v, str))
        st.wall_s = time.perf_counter() - t0
        self.stats.append(st)

    # ------------------------------------------------------------------ phases
    def setup_and_share(self) -> None:
        """Round keys, then the encrypted shares; raises :class:`SecAggError` when fewer than the
        threshold completed sharing."""
        def take_keys(node, rec):
            signer = rec.get("signer", "")
            entry = KeyEntry(unb64(rec.get("pk1"), "pk1"), unb64(rec.get("pk2"), "pk2"),
                             signer if isinstance(signer, str) else "",
                             unb64(rec["sig"], "sig") if "sig" in rec else b"")
            self.srv.add_keys(self.sid[node], entry, self.ex.roster.keys.get(node, ""))
        self._query("setup", sorted(self.sid), lambda node: {"secagg-n": self.p.n, "secagg-phase": self.phase},
                    take_keys, REPLY_TEXT["setup"])
        keyed = [n for n in sorted(self.sid) if self.sid[n] in self.srv.keys]

        def share_keys(node):
            keys = self.srv.keys_for(self.sid[node])
            return {"secagg-keys": json.dumps({str(v): [b64(e.pk1), b64(e.pk2), e.signer, b64(e.sig) if e.sig else ""]
                                               for v, e in keys.items()})}

        def take_shares(node, rec):
            raw = _json(rec.get("cts"), "cts", dict)
            cts = {int(v): unb64(c, f"ciphertext for {v}") for v, c in raw.items()}
            self.srv.add_shares(self.sid[node], cts, unb64(rec.get("commit"), "commit"))
        self._query("share", keyed, share_keys, take_shares, self.p.hood * (MAX_CIPHERTEXT * 4 // 3 + 64) + 256)
        if len(self.srv.shared) < self.p.threshold:
            raise SecAggError(f"round {self.rnd}: {len(self.srv.shared)} nodes shared their keys, fewer than the "
                              f"threshold {self.p.threshold}: secure aggregation cannot complete")

    def collect_config(self, node: int) -> dict[str, Any] | None:
        """Phase 3's entries for ``node``'s message of the phase itself; None: the node did not
        complete key sharing and gets no message of the phase."""
        if node not in self.sid or self.sid[node] not in self.srv.shared:
            return None
        cts = self.srv.ciphertexts_for(self.sid[node])
        return {"secagg-id": self.sid[node], "secagg-cts": json.dumps({str(s): b64(c) for s, c in cts.items()}),
                "secagg-layout": json.dumps({k: list(v) for k, v in self.layout.items()}),
                "secagg-scale": self.scale, "secagg-weighted": self.weighted, "secagg-targets": self.n_targets}

    def add_masked(self, node: int, y: Any) -> str | None:
        """A node's masked vector from phase 3 (None: taken; else why not)."""
        if node not in self.sid:
            return "not a participant"
        try:
            self.srv.add_masked(self.sid[node], y, self.size)
        except SecAggError as e:
            return str(e)
        return None

    def masked_bytes(self) -> int:
        return npy_size(np.zeros(self.size, np.int64))

    def unmask(self) -> tuple[dict[str, np.ndarray], dict[str, float], int]:
        """The consistency check (signed rounds), the shares, then the mean of the uploads:
        ``(mean, metrics, survivors)`` with metrics ``clients``, ``train-loss``, ``secagg-weight``."""
        alive = [self.node_of[u] for u in self.srv.survivors()]
        if self.srv.signed:
            survivors = json.dumps(self.srv.survivors())
            self._query("confirm", alive, lambda node: {"secagg-active": survivors},
                        lambda node, rec: self.srv.add_confirmation(self.sid[node], unb64(rec.get("sig"), "sig")),
                        REPLY_TEXT["confirm"])
            alive = [self.node_of[u] for u in sorted(self.srv.confirmations)]

        def unmask_req(node):
            act, sigs = self.srv.unmask_request(self.sid[node])
            return {"secagg-active": json.dumps(act),
                    "secagg-sigs": json.dumps({str(v): b64(s) for v, s in sigs.items()})}
        shares: dict[int, dict[int, bytes]] = {}

        def take_shares(node, rec):
            raw = _json(rec.get("shares"), "shares", dict)
            shares[self.sid[node]] = {int(v): unb64(s, f"share of {v}") for v, s in raw.items()}
        self._query("unmask", alive, unmask_req, take_shares, self.p.hood * 2 * 160 + 256)
        try:
            total, n_active = self.srv.finish(shares)
        except SecAggError as e:
            said = [x["reason"] for x in (self.collect_stats.excluded if self.collect_stats else [])
                    if "secure aggregation" in x["reason"] or "secagg" in x["reason"]]
            said += list(self.failed.values())
            raise SecAggError(f"round {self.rnd}, phase {self.phase}: {e}"
                              + (f" (a node said: {said[0][:300]})" if said else "")) from None
        for u in sorted(self.srv.bad_holders):
            log(WARNING, "node %s returned a share that does not rebuild its owner's secret; flagged", self.node_of[u])
            self.ex.roster.flag(self.node_of[u], f"round {self.rnd}: a wrong secure-aggregation share")
        loss_sum, loss_n, clients, weight = (float(x) for x in total[-EXTRA:])
        if not weight > 0 or not math.isfinite(weight):
            raise SecAggError(f"round {self.rnd}: the secure sum's weight is not positive: no client was summed")
        mean, at = {}, 0
        for k, shape in self.layout.items():
            m = int(np.prod(shape))
            mean[k] = (total[at:at + m] / weight).reshape(shape)
            at += m
        metrics = {"clients": int(round(clients * self.n_targets)), "secagg-weight": weight,
                   "secagg-signed": int(self.srv.signed),
                   "train-loss": (loss_sum * LOSS_SCALE / loss_n) if loss_n > 0.5 / self.n_targets else float("nan")}
        return mean, metrics, n_active
