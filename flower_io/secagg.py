"""SecAgg+ (Bell et al., CCS 2020; the practical SecAgg of Bonawitz et al., CCS 2017, on a sparse
neighbour graph) for a sum of one vector per node: the node-side and server-side steps as pure
functions over bytes and numpy arrays, built on Flower's primitives.

From Flower (1.39): EC key pairs (``flwr.supercore.primitives.asymmetric``, SECP384R1), ECDH +
HKDF shared keys and Fernet encryption (``flwr.common.secure_aggregation.crypto.symmetric_encryption``),
Shamir sharing (``...crypto.shamir``) and the plaintext layout of a share message
(``secaggplus_utils.share_keys_plaintext_concat``). Stochastic quantisation is Flower's as well
(``quantization.quantize``), applied to the clipped vector.

One deliberate difference: Flower's ``pseudo_rand_gen`` folds the 32-byte seed into a **32-bit**
seed of numpy's Mersenne Twister, so a server that holds a masked vector could search 2³² seeds
for a node's self mask. Masks here are a ChaCha20 keystream keyed with SHA-256 of the whole seed
(``cryptography``'s ChaCha20), read as uniform 32-bit words; the arithmetic is modulo 2³².

The four phases (``phase`` is what the ServerApp sends; ``u``, ``v`` are SecAgg ids 1..n):

1. **setup**: each node makes two key pairs, ``(sk1, pk1)`` for pairwise masks and
   ``(sk2, pk2)`` for encrypting shares, and sends ``pk1, pk2``;
2. **share-keys**: the server sends each node its neighbours' public keys; the node draws its
   self-mask seed ``b_u``, Shamir-shares ``b_u`` and ``sk1_u`` among itself and its neighbours
   (threshold ``t``), and sends each neighbour's shares encrypted for it;
3. **collect**: the server routes the ciphertexts; the node quantises its clipped vector ``x_u``
   to ``q_u`` and sends ``y_u = q_u + PRG(b_u) + Σ_{v∈N(u), v<u} PRG(s_uv) − Σ_{v∈N(u), v>u}
   PRG(s_uv) mod 2³²`` (``s_uv`` = ECDH(sk1_u, pk1_v)), over the neighbours whose shares it got;
4. **unmask**: the server names the nodes that sent ``y`` (active) and the neighbours that
   shared keys but did not (dropped); each surviving node returns its shares of ``b`` for the
   active ones and of ``sk1`` for the dropped ones (never both for one node). With at least ``t``
   shares per secret the server removes every ``PRG(b_u)`` and the dropped nodes' pairwise masks:
   ``Σ_u y_u − Σ PRG(b_u) ± … = Σ_u q_u``, and dequantises. Fewer than ``t`` shares for any
   secret ends the round with :class:`SecAggError`, never a wrong sum.

**Quantisation error.** ``q = stochastic_round((clip(x) + c)·L/(2c))`` with ``L = 2^bits``: each
value of each node is off by less than ``2c/L`` (zero in expectation), so the sum of ``n`` nodes
is off by less than ``n·2c/L`` per value; values outside ``[−c, c]`` are clipped first (the
caller chooses ``c`` above the largest value it sums, and ``n·L < 2³²``).
"""
from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, encrypt, generate_shared_key
from flwr.common.secure_aggregation.quantization import quantize
from flwr.common.secure_aggregation.secaggplus_utils import (share_keys_plaintext_concat,
                                                             share_keys_plaintext_separate)
from flwr.supercore.primitives.asymmetric import (bytes_to_private_key, bytes_to_public_key, generate_key_pairs,
                                                  private_key_to_bytes, public_key_to_bytes)

MOD_BITS = 32
MOD = 1 << MOD_BITS


class SecAggError(RuntimeError):
    """The protocol cannot complete correctly (too few shares or nodes, a bad message)."""


@dataclass(frozen=True)
class Params:
    threshold: int          # t: shares needed to reconstruct a node's secrets
    clip: float             # c: values are clipped to [-c, c] before quantisation
    bits: int = 16          # L = 2^bits quantisation levels over [-c, c]
    neighbours: int = 0     # k: SecAgg+ neighbours per node (0 or >= n-1: every other node, plain SecAgg)

    def check(self, n: int) -> None:
        if not 1 <= self.bits <= 24:
            raise SecAggError(f"secagg-bits: expected 1..24, got {self.bits}")
        if n * (1 << self.bits) >= MOD:
            raise SecAggError(f"secagg-bits {self.bits} with {n} nodes overflows the 2^{MOD_BITS} field")
        if not self.clip > 0:
            raise SecAggError(f"secagg-clip: expected > 0, got {self.clip}")
        if self.threshold < 2:
            raise SecAggError(f"secagg-threshold: expected >= 2, got {self.threshold}")


def prg(seed: bytes, size: int) -> np.ndarray:
    """``size`` uniform values in [0, 2³²) from ``seed``: a ChaCha20 keystream keyed with
    SHA-256(seed), as int64."""
    key = hashlib.sha256(seed).digest()
    enc = Cipher(algorithms.ChaCha20(key, b"\0" * 16), mode=None).encryptor()
    words = np.frombuffer(enc.update(b"\0" * (4 * size)), dtype="<u4")
    return words.astype(np.int64)


def neighbour_graph(ids: list[int], k: int, seed: int) -> dict[int, set[int]]:
    """SecAgg+'s graph: ids shuffled (seeded) on a ring, each node with the ``k`` nearest (``k//2``
    on each side; ``k`` <= 0 or >= n-1: all others). Returns ``{u: N(u)}`` without ``u``."""
    n = len(ids)
    if k <= 0 or k >= n - 1:
        return {u: set(ids) - {u} for u in ids}
    ring = sorted(ids)
    random.Random(seed).shuffle(ring)
    half = max(1, k // 2)
    return {u: {ring[(i + o) % n] for o in range(-half, half + 1) if o} for i, u in enumerate(ring)}


def quantise(x: np.ndarray, p: Params) -> np.ndarray:
    """Flower's stochastic quantisation of ``clip(x, -c, c)`` to [0, 2^bits] (int64)."""
    return quantize([np.asarray(x, np.float64).ravel()], p.clip, 1 << p.bits)[0].astype(np.int64)


def dequantise_sum(q_sum: np.ndarray, n: int, p: Params) -> np.ndarray:
    """The float sum of ``n`` nodes' vectors from the sum of their quantised vectors."""
    return q_sum.astype(np.float64) * (2 * p.clip / (1 << p.bits)) - n * p.clip


# ---------------------------------------------------------------------------------- node side

@dataclass
class NodeState:
    """What a node keeps between the phases (bytes only: it is stored on disk between messages)."""
    uid: int
    sk1: bytes = b""
    sk2: bytes = b""
    pk1: bytes = b""
    pk2: bytes = b""
    seed: bytes = b""
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)   # v -> (pk1_v, pk2_v)
    b_shares: dict[int, bytes] = field(default_factory=dict)             # owner v -> my share of b_v
    sk1_shares: dict[int, bytes] = field(default_factory=dict)           # owner v -> my share of sk1_v
    senders: list[int] = field(default_factory=list)                     # neighbours whose shares came
    masked: bool = False


def node_setup(uid: int) -> tuple[NodeState, tuple[bytes, bytes]]:
    """Phase 1: two fresh key pairs; returns the state and ``(pk1, pk2)``."""
    sk1, pk1 = generate_key_pairs()
    sk2, pk2 = generate_key_pairs()
    st = NodeState(uid, private_key_to_bytes(sk1), private_key_to_bytes(sk2), public_key_to_bytes(pk1),
                   public_key_to_bytes(pk2))
    return st, (st.pk1, st.pk2)


def node_share_keys(st: NodeState, p: Params, keys: dict[int, tuple[bytes, bytes]]) -> dict[int, bytes]:
    """Phase 2: ``keys`` are the public keys of this node and its neighbours; returns one
    ciphertext per neighbour (its shares of ``b_u`` and ``sk1_u``)."""
    if keys.get(st.uid) != (st.pk1, st.pk2):
        raise SecAggError(f"node {st.uid}: the server's key list does not hold this node's own keys")
    if len(keys) < p.threshold:
        raise SecAggError(f"node {st.uid}: {len(keys)} nodes in its neighbourhood, fewer than the threshold "
                          f"{p.threshold}")
    flat = [k for pair in keys.values() for k in pair]
    if len(set(flat)) != len(flat):
        raise SecAggError(f"node {st.uid}: two nodes announce the same public key")
    st.keys = dict(keys)
    st.seed = os.urandom(32)
    order = sorted(keys)
    b_sh = create_shares(st.seed, p.threshold, len(order))
    sk_sh = create_shares(st.sk1, p.threshold, len(order))
    out: dict[int, bytes] = {}
    for i, v in enumerate(order):
        if v == st.uid:
            st.b_shares[v], st.sk1_shares[v] = b_sh[i], sk_sh[i]
            continue
        key = generate_shared_key(bytes_to_private_key(st.sk2), bytes_to_public_key(keys[v][1]))
        out[v] = encrypt(key, share_keys_plaintext_concat(st.uid, v, b_sh[i], sk_sh[i]))
    return out


def node_collect(st: NodeState, p: Params, x: np.ndarray, ciphertexts: dict[int, bytes]) -> np.ndarray:
    """Phase 3: decrypt the neighbours' shares (from ``ciphertexts``: sender -> ciphertext) and
    return the masked, quantised ``x`` (int64 in [0, 2³²))."""
    if len(ciphertexts) + 1 < p.threshold:
        raise SecAggError(f"node {st.uid}: shares from {len(ciphertexts)} neighbours, fewer than the "
                          f"threshold {p.threshold} - 1")
    for src, ct in ciphertexts.items():
        if src not in st.keys or src == st.uid:
            raise SecAggError(f"node {st.uid}: a share from {src}, which is not its neighbour")
        key = generate_shared_key(bytes_to_private_key(st.sk2), bytes_to_public_key(st.keys[src][1]))
        real_src, dst, b_share, sk_share = share_keys_plaintext_separate(decrypt(key, ct))
        if real_src != src or dst != st.uid:
            raise SecAggError(f"node {st.uid}: a share routed from {src} says it is from {real_src} to {dst}")
        st.b_shares[src], st.sk1_shares[src] = b_share, sk_share
    st.senders = sorted(ciphertexts)
    q = quantise(x, p)
    y = q + prg(st.seed, q.size)
    for v in st.senders:
        s_uv = generate_shared_key(bytes_to_private_key(st.sk1), bytes_to_public_key(st.keys[v][0]))
        y = y + prg(s_uv, q.size) if st.uid > v else y - prg(s_uv, q.size)
    st.masked = True
    return np.mod(y, MOD)


def node_unmask(st: NodeState, p: Params, active: list[int], dropped: list[int]) -> dict[int, bytes]:
    """Phase 4: shares of ``b`` for the ``active`` nodes, of ``sk1`` for the ``dropped`` ones
    (this node's neighbours and itself). Refuses to reveal both secrets of one node, or ``sk1``
    of a node that is active, which would let the server unmask that node's vector."""
    both = set(active) & set(dropped)
    if both:
        raise SecAggError(f"node {st.uid}: asked for both secrets of nodes {sorted(both)}")
    if st.uid in dropped:
        raise SecAggError(f"node {st.uid}: asked for its own mask key as if it had dropped")
    if len(active) < p.threshold:
        raise SecAggError(f"node {st.uid}: {len(active)} active nodes, fewer than the threshold {p.threshold}")
    out = {v: st.b_shares[v] for v in active if v in st.b_shares}
    out.update({v: st.sk1_shares[v] for v in dropped if v in st.sk1_shares})
    return out


# ---------------------------------------------------------------------------------- server side

@dataclass
class ServerRound:
    """The server's view of one SecAgg+ aggregation (``Σ`` of one vector per node)."""
    p: Params
    ids: list[int]
    seed: int = 0
    graph: dict[int, set[int]] = field(default_factory=dict)
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    shared: set[int] = field(default_factory=set)              # nodes that sent their shares
    routed: dict[int, dict[int, bytes]] = field(default_factory=dict)   # dst -> src -> ciphertext
    masked_sum: np.ndarray | None = None
    active: list[int] = field(default_factory=list)            # nodes whose masked vector arrived

    def __post_init__(self):
        self.p.check(len(self.ids))
        if len(self.ids) < self.p.threshold:
            raise SecAggError(f"{len(self.ids)} nodes, fewer than the threshold {self.p.threshold}")
        self.graph = neighbour_graph(self.ids, self.p.neighbours, self.seed)

    def keys_for(self, u: int) -> dict[int, tuple[bytes, bytes]]:
        """Phase 2's download of ``u``: its own and its neighbours' public keys."""
        return {v: self.keys[v] for v in sorted(self.graph[u] | {u}) if v in self.keys}

    def add_keys(self, u: int, pk: tuple[bytes, bytes]) -> None:
        self.keys[u] = (bytes(pk[0]), bytes(pk[1]))

    def add_shares(self, u: int, cts: dict[int, bytes]) -> None:
        bad = set(cts) - self.graph[u]
        if bad:
            raise SecAggError(f"node {u} sent shares for {sorted(bad)}, not its neighbours")
        self.shared.add(u)
        for v, ct in cts.items():
            self.routed.setdefault(v, {})[u] = ct

    def ciphertexts_for(self, u: int) -> dict[int, bytes]:
        """Phase 3's download of ``u``: the shares its neighbours sent it."""
        return {s: ct for s, ct in self.routed.get(u, {}).items() if s in self.shared}

    def add_masked(self, u: int, y: np.ndarray) -> None:
        y = np.asarray(y, np.int64)
        if self.masked_sum is None:
            self.masked_sum = np.zeros_like(y)
        if y.shape != self.masked_sum.shape or (y < 0).any() or (y >= MOD).any():
            raise SecAggError(f"node {u}: a masked vector of shape {y.shape} or out of [0, 2^32)")
        self.masked_sum = np.mod(self.masked_sum + y, MOD)
        self.active.append(u)

    def unmask_request(self, u: int) -> tuple[list[int], list[int]]:
        """Phase 4's download of surviving node ``u``: (active, dropped) among ``u`` and its neighbours."""
        hood = self.graph[u] | {u}
        act = sorted(v for v in hood if v in self.active)
        drop = sorted(v for v in hood if v in self.shared and v not in self.active)
        return act, drop

    def finish(self, shares: dict[int, dict[int, bytes]]) -> tuple[np.ndarray, int]:
        """``shares``: from each surviving node, owner -> share. Returns the float sum of the
        active nodes' vectors and their count; :class:`SecAggError` when a secret lacks shares."""
        if self.masked_sum is None or len(self.active) < self.p.threshold:
            raise SecAggError(f"{len(self.active)} nodes sent a masked vector, fewer than the threshold "
                              f"{self.p.threshold}: the round cannot be unmasked")
        by_owner: dict[int, list[bytes]] = {}
        for _, got in shares.items():
            for owner, sh in got.items():
                by_owner.setdefault(owner, []).append(sh)
        y = self.masked_sum.copy()
        size = y.size
        dropped = sorted(self.shared - set(self.active))
        for u in self.active:
            got = by_owner.get(u, [])
            if len(got) < self.p.threshold:
                raise SecAggError(f"node {u}'s self mask: {len(got)} shares, the threshold is {self.p.threshold}: "
                                  f"too many nodes dropped during unmasking")
            y = y - prg(combine_shares(got), size)
        for d in dropped:
            got = by_owner.get(d, [])
            if len(got) < self.p.threshold:
                raise SecAggError(f"dropped node {d}'s mask key: {len(got)} shares, the threshold is "
                                  f"{self.p.threshold}: too many nodes dropped")
            sk1 = bytes_to_private_key(combine_shares(got))
            for v in self.graph[d]:
                # v masked with d iff d's shares reached v, i.e. d shared keys and v is active
                if v in self.active:
                    s = generate_shared_key(sk1, bytes_to_public_key(self.keys[v][0]))
                    y = y + prg(s, size) if d > v else y - prg(s, size)
        q_sum = np.mod(y, MOD)
        return dequantise_sum(q_sum, len(self.active), self.p), len(self.active)
