"""A node's side of one SecAgg+ aggregation (Bonawitz et al., CCS 2017, Fig. 4 — AdvertiseKeys,
ShareKeys, MaskedInputCollection, ConsistencyCheck, Unmasking; on Bell et al.'s sparse graph),
as pure steps over a :class:`NodeState` that the caller keeps between messages.

Stage order is enforced: ``setup`` (two key pairs) → ``shared`` (the self-mask seed and the
first key Shamir-shared among the neighbourhood, each share encrypted for its holder) →
``masked`` (one masked vector, once) → ``confirmed`` (the survivors the server names, signed)
→ unmasked (shares of the survivors' seeds and of the dropped nodes' keys, once; then the state
is deleted). A message out of order, a second collect, a second unmasking, or a round not newer
than the last is refused.

With a trust list (``trusted`` keys, the operator's), a node accepts only neighbours whose round
keys are signed by a trusted key, pairwise distinct, and reveals shares only for a survivor set
that at least ``t`` of its neighbours signed: a server that lies about who survived, or swaps in
its own keys, gets nothing. Without one it trusts the server to route keys and to say the same
survivor set to every node (a semi-honest server).
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corolla.secagg import identity
from corolla.secagg.params import Params
from corolla.secagg.primitives import (MOD, PRIVATE_KEY_BYTES, SEED_BYTES, SecAggError, check_public, commitment,
                                       encode_fields, key_pair, open_sealed, prg, quantise, seal, share_secret,
                                       share_size, shared_key)

SHARE_LABEL = b"corolla-secagg/share-key/1"
MASK_LABEL = b"corolla-secagg/pairwise-mask/1"
B_SHARE, SK_SHARE = share_size(SEED_BYTES), share_size(PRIVATE_KEY_BYTES)
STAGES = ("setup", "shared", "masked", "confirmed")


def share_binding(run: str, rnd: int, phase: str, src: int, dst: int) -> bytes:
    """Associated data of the ciphertext of ``src``'s shares for ``dst``."""
    return encode_fields(b"corolla-secagg/shares/1", run, rnd, phase, src, dst)


@dataclass
class Neighbour:
    """What a node holds of a member of its neighbourhood (itself included)."""
    pk1: bytes
    pk2: bytes
    signer: str = ""   # OpenSSH line of the key that signed its round keys (signed rounds)


@dataclass
class NodeState:
    run: str
    rnd: int
    phase: str
    uid: int
    params: Params
    sk1: bytes
    sk2: bytes
    pk1: bytes
    pk2: bytes
    signed: bool = False        # it holds a trust list: neighbours and survivors must be signed
    stage: str = "setup"
    seed: bytes = b""
    keys: dict[int, Neighbour] = field(default_factory=dict)
    b_shares: dict[int, bytes] = field(default_factory=dict)    # owner -> my share of its seed
    sk1_shares: dict[int, bytes] = field(default_factory=dict)  # owner -> my share of its first key
    senders: list[int] = field(default_factory=list)            # neighbours it masked with
    active: list[int] = field(default_factory=list)             # the survivors it confirmed

    def expect(self, stage: str, step: str) -> None:
        if self.stage != stage:
            raise SecAggError(f"node (secagg id {self.uid}), round {self.rnd}: '{step}' arrived in stage "
                              f"'{self.stage}', expected '{stage}' (out of order or repeated)")

    # ------------------------------------------------------------ persistence (text)
    def dumps(self) -> str:
        b = lambda x: base64.b64encode(x).decode()   # noqa: E731
        return json.dumps({
            "run": self.run, "rnd": self.rnd, "phase": self.phase, "uid": self.uid,
            "params": [self.params.n, self.params.threshold, self.params.clip, self.params.bits,
                       self.params.neighbours],
            **{k: b(getattr(self, k)) for k in ("sk1", "sk2", "pk1", "pk2", "seed")},
            "signed": self.signed, "stage": self.stage,
            "keys": {str(v): [b(e.pk1), b(e.pk2), e.signer] for v, e in self.keys.items()},
            "b": {str(v): b(x) for v, x in self.b_shares.items()},
            "s": {str(v): b(x) for v, x in self.sk1_shares.items()},
            "senders": self.senders, "active": self.active})

    @classmethod
    def loads(cls, text: str) -> NodeState:
        d = json.loads(text)
        u = base64.b64decode
        n, t, c, bits, k = d["params"]
        return cls(d["run"], int(d["rnd"]), d["phase"], int(d["uid"]), Params(n, t, c, bits, k),
                   *(u(d[k]) for k in ("sk1", "sk2", "pk1", "pk2")), signed=bool(d["signed"]), stage=d["stage"],
                   seed=u(d["seed"]), keys={int(v): Neighbour(u(a), u(b), s) for v, (a, b, s) in d["keys"].items()},
                   b_shares={int(v): u(x) for v, x in d["b"].items()},
                   sk1_shares={int(v): u(x) for v, x in d["s"].items()},
                   senders=[int(v) for v in d["senders"]], active=[int(v) for v in d["active"]])


# ----------------------------------------------------------------------------- steps
def setup(run: str, rnd: int, phase: str, uid: int, params: Params, signer: identity.Signer | None,
          trusted: bool) -> tuple[NodeState, dict[str, Any]]:
    """AdvertiseKeys: two fresh key pairs; the reply ``{pk1, pk2[, signer, sig]}``."""
    params.check()
    if not isinstance(uid, int) or not 1 <= uid <= params.n:
        raise SecAggError(f"secagg id {uid!r}: expected 1..{params.n}")
    if trusted and signer is None:
        raise SecAggError("node config 'trusted-keys' is set but 'auth-key-file' is not: a node that checks its "
                          "neighbours' signatures must sign its own keys")
    sk1, pk1 = key_pair()
    sk2, pk2 = key_pair()
    st = NodeState(run, rnd, phase, uid, params, sk1, sk2, pk1, pk2, signed=trusted)
    reply: dict[str, Any] = {"pk1": pk1, "pk2": pk2}
    if signer is not None:
        reply["signer"] = signer.public
        reply["sig"] = signer.sign(identity.keys_statement(run, rnd, phase, uid, pk1, pk2))
    return st, reply


def share_keys(st: NodeState, entries: dict[int, dict[str, Any]], trusted: dict[str, str] | None,
               own_signer: str = "") -> tuple[dict[int, bytes], bytes]:
    """ShareKeys: ``entries`` are the round keys of this node's neighbourhood (itself included)
    as the server routes them. Returns one ciphertext per neighbour (its shares of this node's seed
    and first key) and the commitment to the seed."""
    st.expect("setup", "share-keys")
    p = st.params
    if not isinstance(entries, dict) or not p.threshold <= len(entries) <= p.hood:
        raise SecAggError(f"node {st.uid}: a neighbourhood of {len(entries) if isinstance(entries, dict) else '?'} "
                          f"nodes, expected {p.threshold}..{p.hood}")
    keys: dict[int, Neighbour] = {}
    for v, e in sorted(entries.items()):
        if not isinstance(v, int) or not 1 <= v <= p.n or not isinstance(e, dict):
            raise SecAggError(f"node {st.uid}: a neighbour id {v!r} outside 1..{p.n}")
        nb = Neighbour(check_public(e.get("pk1"), f"node {v}'s pk1"), check_public(e.get("pk2"), f"node {v}'s pk2"),
                       e.get("signer", "") if isinstance(e.get("signer", ""), str) else "")
        if trusted is not None:
            if identity.fingerprint(identity.public_line(identity.parse_public_line(nb.signer, f"node {v}'s signer")))\
                    not in trusted:
                raise SecAggError(f"node {st.uid}: node {v}'s round keys are signed by a key this node does not "
                                  "trust (node config 'trusted-keys')")
            identity.verify(nb.signer, identity.keys_statement(st.run, st.rnd, st.phase, v, nb.pk1, nb.pk2),
                            e.get("sig"), f"node {v}'s round keys")
        keys[v] = nb
    mine = keys.get(st.uid)
    if mine is None or (mine.pk1, mine.pk2) != (st.pk1, st.pk2) or (trusted is not None and mine.signer != own_signer):
        raise SecAggError(f"node {st.uid}: the server's key list does not hold this node's own keys")
    flat = [k for e in keys.values() for k in (e.pk1, e.pk2)]
    if len(set(flat)) != len(flat):
        raise SecAggError(f"node {st.uid}: two nodes announce the same public key")
    if trusted is not None and len({e.signer for e in keys.values()}) != len(keys):
        raise SecAggError(f"node {st.uid}: two SecAgg ids are signed by the same node key")
    st.keys, st.seed = keys, os.urandom(SEED_BYTES)
    order = sorted(keys)
    b_sh = share_secret(st.seed, p.threshold, len(order))
    sk_sh = share_secret(st.sk1, p.threshold, len(order))
    out: dict[int, bytes] = {}
    for i, v in enumerate(order):
        if v == st.uid:
            st.b_shares[v], st.sk1_shares[v] = b_sh[i], sk_sh[i]
            continue
        key = shared_key(st.sk2, keys[v].pk2, SHARE_LABEL)
        out[v] = seal(key, b_sh[i] + sk_sh[i], share_binding(st.run, st.rnd, st.phase, st.uid, v))
    st.stage = "shared"
    return out, commitment(st.seed)


def collect(st: NodeState, x: np.ndarray, ciphertexts: dict[int, bytes]) -> np.ndarray:
    """MaskedInputCollection: open the neighbours' shares (``ciphertexts``: sender -> ciphertext)
    and return ``q(x) + PRG(b_u) + Σ_{v<u} PRG(s_uv) − Σ_{v>u} PRG(s_uv) mod 2^32`` over the
    senders (int64)."""
    st.expect("shared", "collect")
    p = st.params
    if not isinstance(ciphertexts, dict) or len(ciphertexts) + 1 < p.threshold:
        raise SecAggError(f"node {st.uid}: shares from {len(ciphertexts) if isinstance(ciphertexts, dict) else 0} "
                          f"neighbours, fewer than the threshold {p.threshold} - 1")
    for src, ct in sorted(ciphertexts.items()):
        if src not in st.keys or src == st.uid:
            raise SecAggError(f"node {st.uid}: a share from {src}, which is not its neighbour")
        key = shared_key(st.sk2, st.keys[src].pk2, SHARE_LABEL)
        plain = open_sealed(key, ct, share_binding(st.run, st.rnd, st.phase, src, st.uid), f"node {src}'s shares")
        if len(plain) != B_SHARE + SK_SHARE:
            raise SecAggError(f"node {st.uid}: node {src}'s shares have {len(plain)} bytes, expected "
                              f"{B_SHARE + SK_SHARE}")
        st.b_shares[src], st.sk1_shares[src] = plain[:B_SHARE], plain[B_SHARE:]
    st.senders = sorted(ciphertexts)
    q = quantise(x, p.clip, p.bits)
    y = q + prg(st.seed, q.size)
    for v in st.senders:
        s_uv = prg(shared_key(st.sk1, st.keys[v].pk1, MASK_LABEL), q.size)
        y = y + s_uv if st.uid > v else y - s_uv
    st.stage = "masked"
    return np.mod(y, MOD)


def _survivors(st: NodeState, active: object) -> list[int]:
    if not isinstance(active, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in active):
        raise SecAggError(f"node {st.uid}: the survivor list is not a list of ids")
    if len(set(active)) != len(active) or any(not 1 <= v <= st.params.n for v in active):
        raise SecAggError(f"node {st.uid}: the survivor list has repeated ids or ids outside 1..{st.params.n}")
    if st.uid not in active:
        raise SecAggError(f"node {st.uid}: the survivor list leaves out this node, which sent its vector")
    near = set(active) & set(st.keys)
    if len(near) < st.params.threshold:
        raise SecAggError(f"node {st.uid}: {len(near)} survivors in its neighbourhood, fewer than the threshold "
                          f"{st.params.threshold}")
    return sorted(active)


def confirm(st: NodeState, active: object, signer: identity.Signer | None) -> bytes:
    """ConsistencyCheck: fix the survivor set this node will unmask for and sign it."""
    st.expect("masked", "confirm")
    st.active = _survivors(st, active)
    st.stage = "confirmed"
    return signer.sign(identity.survivors_statement(st.run, st.rnd, st.phase, st.active)) if signer else b""


def unmask(st: NodeState, active: object, signatures: dict[int, bytes]) -> dict[int, bytes]:
    """Unmasking: shares of the seeds of the survivors in this node's neighbourhood and of the
    first keys of the neighbours that sent shares but did not survive; never both for one node.
    A signed node answers only for the set it confirmed, and only when at least ``t`` of its
    neighbours signed that same set."""
    if st.signed or st.stage == "confirmed":
        st.expect("confirmed", "unmask")
        if _survivors(st, active) != st.active:
            raise SecAggError(f"node {st.uid}: asked to unmask for another survivor set than the one it confirmed")
    else:
        st.expect("masked", "unmask")
        st.active = _survivors(st, active)
    if st.signed:
        if not isinstance(signatures, dict):
            raise SecAggError(f"node {st.uid}: no survivor signatures")
        stmt = identity.survivors_statement(st.run, st.rnd, st.phase, st.active)
        good = 0
        for v, sig in signatures.items():
            if v in st.keys and v in st.active:
                try:
                    identity.verify(st.keys[v].signer, stmt, sig, f"node {v}'s survivor signature")
                    good += 1
                except SecAggError:
                    pass
        if good < st.params.threshold:
            raise SecAggError(f"node {st.uid}: {good} of its neighbours signed this survivor set, fewer than the "
                              f"threshold {st.params.threshold}: it reveals nothing")
    alive = set(st.active)
    out = {v: st.b_shares[v] for v in st.keys if v in alive and v in st.b_shares}
    out.update({v: st.sk1_shares[v] for v in st.senders if v not in alive})
    st.stage = "unmasked"
    return out
