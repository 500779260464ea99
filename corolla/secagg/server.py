"""The server's side of one SecAgg+ aggregation (Bonawitz et al., CCS 2017, Fig. 4; Bell et al.,
CCS 2020): routing keys and shares, summing the masked vectors, the consistency check, and the
unmasking — which either returns the exact sum of the survivors' quantised vectors or raises
:class:`SecAggError`, never a wrong sum.

Every node input is checked where it arrives (a hostile or broken node is excluded with the
reason, by raising here for that node only): keys must be P-384 points, signed by the node's key
when the round is signed, and not announced twice; a share set must hold exactly one ciphertext
for every keyed neighbour; a masked vector comes once per node that shared its keys, in range.
At the end each secret is rebuilt from the shares its neighbourhood returned and checked — a
seed against the commitment its owner published, a first key against the public key its owner
announced — trying subsets when a share is bad (the holders of bad shares are named), and the
unmasked sum must lie in ``[0, |survivors|·2^bits]``.
"""
from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from corolla.secagg import identity
from corolla.secagg.node import B_SHARE, MASK_LABEL, SK_SHARE
from corolla.secagg.params import Params, neighbour_graph
from corolla.secagg.primitives import (MOD, SecAggError, check_public, combine_shares, commitment, dequantise_sum,
                                       prg, public_of, share_index, shared_key)

MAX_CIPHERTEXT = 12 + 16 + B_SHARE + SK_SHARE   # nonce + tag + the two shares
MAX_SUBSETS = 2000      # subsets tried per secret when its shares disagree


@dataclass
class KeyEntry:
    pk1: bytes
    pk2: bytes
    signer: str = ""
    sig: bytes = b""

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pk1": self.pk1, "pk2": self.pk2}
        if self.signer:
            out.update(signer=self.signer, sig=self.sig)
        return out


@dataclass
class ServerRound:
    """One aggregation of round ``rnd``'s ``phase`` of run ``run`` over SecAgg ids ``ids``."""
    p: Params
    ids: list[int]
    run: str = ""
    rnd: int = 0
    phase: str = ""
    seed: int | None = None          # graph seed: fresh randomness unless given (tests)
    graph: dict[int, set[int]] = field(default_factory=dict)
    keys: dict[int, KeyEntry] = field(default_factory=dict)
    commits: dict[int, bytes] = field(default_factory=dict)
    shared: set[int] = field(default_factory=set)                       # nodes whose share set was complete
    routed: dict[int, dict[int, bytes]] = field(default_factory=dict)   # dst -> src -> ciphertext
    masked_sum: np.ndarray | None = None
    active: list[int] = field(default_factory=list)                     # nodes whose masked vector was taken
    confirmations: dict[int, bytes] = field(default_factory=dict)      # survivor signatures
    bad_holders: set[int] = field(default_factory=set)                  # nodes that returned a wrong share

    def __post_init__(self):
        self.p.check()
        if sorted(self.ids) != list(range(1, self.p.n + 1)):
            raise SecAggError(f"SecAgg ids: expected 1..{self.p.n}")
        self.graph = neighbour_graph(self.ids, self.p.neighbours,
                                     secrets.randbits(64) if self.seed is None else self.seed)

    def hood(self, u: int) -> set[int]:
        return self.graph[u] | {u}

    # ------------------------------------------------------------------ keys
    def add_keys(self, u: int, entry: KeyEntry, expect_signer: str = "") -> None:
        """Node ``u``'s round keys (checked: points of P-384, a valid signature when it signs, the
        signer it proved in its handshake, no key or signer seen before)."""
        if u not in self.graph or u in self.keys:
            raise SecAggError(f"node {u}: round keys from an unknown or repeated SecAgg id")
        check_public(entry.pk1, f"node {u}'s pk1")
        check_public(entry.pk2, f"node {u}'s pk2")
        if expect_signer and not entry.signer:
            raise SecAggError(f"node {u}: it proved a node key in its handshake but did not sign its round keys")
        if entry.signer:
            identity.verify(entry.signer, identity.keys_statement(self.run, self.rnd, self.phase, u, entry.pk1,
                                                                  entry.pk2), entry.sig, f"node {u}'s round keys")
            if expect_signer and identity.fingerprint(entry.signer) != expect_signer:
                raise SecAggError(f"node {u}: its round keys are not signed by the key it proved in its handshake")
        seen = {k for e in self.keys.values() for k in (e.pk1, e.pk2)}
        if entry.pk1 in seen or entry.pk2 in seen or entry.pk1 == entry.pk2:
            raise SecAggError(f"node {u}: announces a public key already announced")
        if entry.signer and any(e.signer == entry.signer for e in self.keys.values()):
            raise SecAggError(f"node {u}: its node key already signed another SecAgg id's keys")
        self.keys[u] = entry

    @property
    def signed(self) -> bool:
        """Every keyed node signed its keys: the round runs the consistency check."""
        return bool(self.keys) and all(e.signer for e in self.keys.values())

    def keys_for(self, u: int) -> dict[int, KeyEntry]:
        """ShareKeys' download of ``u``: its own and its keyed neighbours' round keys."""
        return {v: self.keys[v] for v in sorted(self.hood(u)) if v in self.keys}

    # ------------------------------------------------------------------ shares
    def add_shares(self, u: int, cts: dict[int, bytes], commit: bytes) -> None:
        """Node ``u``'s ciphertexts (one for every keyed neighbour, no other) and its seed
        commitment."""
        if u not in self.keys or u in self.shared:
            raise SecAggError(f"node {u}: shares from a node without round keys, or a second time")
        want = set(self.keys_for(u)) - {u}
        if not isinstance(cts, dict) or set(cts) != want:
            got = set(cts) if isinstance(cts, dict) else set()
            raise SecAggError(f"node {u}: shares for {sorted(got)[:20]}, expected one for each of its keyed "
                              f"neighbours {sorted(want)[:20]}")
        for v, ct in cts.items():
            if not isinstance(ct, (bytes, bytearray)) or not 28 < len(ct) <= MAX_CIPHERTEXT:
                raise SecAggError(f"node {u}: its ciphertext for node {v} is not {MAX_CIPHERTEXT} bytes or fewer")
        if not isinstance(commit, (bytes, bytearray)) or len(commit) != 32:
            raise SecAggError(f"node {u}: its seed commitment is not 32 bytes")
        self.shared.add(u)
        self.commits[u] = bytes(commit)
        for v, ct in cts.items():
            self.routed.setdefault(v, {})[u] = bytes(ct)

    def ciphertexts_for(self, u: int) -> dict[int, bytes]:
        """The collect download of ``u``: the shares its neighbours that completed sharing sent it."""
        return {s: ct for s, ct in sorted(self.routed.get(u, {}).items()) if s in self.shared}

    # ------------------------------------------------------------------ masked vectors
    def add_masked(self, u: int, y: Any, size: int) -> None:
        """Node ``u``'s masked vector: once, from a node that completed sharing, ``size`` int64
        values in [0, 2^32)."""
        if u not in self.shared:
            raise SecAggError(f"node {u}: a masked vector from a node that did not complete key sharing")
        if u in self.active:
            raise SecAggError(f"node {u}: a second masked vector in one aggregation")
        if not isinstance(y, np.ndarray) or y.dtype != np.int64 or y.shape != (size,):
            raise SecAggError(f"node {u}: a masked vector that is not {size} int64 values")
        if (y < 0).any() or (y >= MOD).any():
            raise SecAggError(f"node {u}: a masked vector outside [0, 2^32)")
        self.masked_sum = y.copy() if self.masked_sum is None else np.mod(self.masked_sum + y, MOD)
        self.active.append(u)

    def survivors(self) -> list[int]:
        return sorted(self.active)

    def add_confirmation(self, u: int, sig: Any) -> None:
        """Node ``u``'s signature of the survivor set (signed rounds)."""
        if u not in self.active:
            raise SecAggError(f"node {u}: a confirmation from a node that is not a survivor")
        identity.verify(self.keys[u].signer, identity.survivors_statement(self.run, self.rnd, self.phase,
                                                                          self.survivors()), sig,
                        f"node {u}'s survivor signature")
        self.confirmations[u] = bytes(sig)

    def unmask_request(self, u: int) -> tuple[list[int], dict[int, bytes]]:
        """Unmasking's download of a survivor: the survivor set and every signature of it — the
        same for every node."""
        return self.survivors(), dict(self.confirmations)

    # ------------------------------------------------------------------ unmasking
    def _rebuild(self, owner: int, got: dict[int, bytes], size: int, check: Callable[[bytes], bool],
                 what: str) -> bytes:
        """``owner``'s secret from the shares ``got`` (holder -> share): every well-formed share
        whose index is its holder's place in ``owner``'s neighbourhood, at least ``t`` of them,
        combined and checked; on a failed check, subsets of ``t`` until one checks."""
        order = sorted(self.keys_for(owner))
        good: list[tuple[int, bytes]] = []
        for h, share in sorted(got.items()):
            try:
                if share_index(share, size) != order.index(h) + 1:
                    raise SecAggError("index")
                good.append((h, bytes(share)))
            except (SecAggError, ValueError):
                self.bad_holders.add(h)
        t = self.p.threshold
        if len(good) < t:
            raise SecAggError(f"{what} of node {owner}: {len(good)} usable shares, the threshold is {t}: too many "
                              "nodes dropped during unmasking")

        def attempt(part):
            try:
                secret = combine_shares([s for _, s in part])
                return secret if check(secret) else None
            except (SecAggError, ValueError):
                return None
        secret = attempt(good)
        if secret is not None:
            return secret
        for part in itertools.islice(itertools.combinations(good, t), MAX_SUBSETS):
            secret = attempt(part)
            if secret is not None:
                members = {h for h, _ in part}
                base = list(part[:t - 1])
                for h, s in good:   # name the holders whose share disagrees with the rebuilt secret
                    if h not in members and attempt(base + [(h, s)]) is None:
                        self.bad_holders.add(h)
                return secret
        raise SecAggError(f"{what} of node {owner}: no {t} of its {len(good)} shares rebuild the secret it "
                          "committed to (wrong shares)")

    def finish(self, shares: dict[int, dict[int, bytes]]) -> tuple[np.ndarray, int]:
        """``shares``: from each survivor, owner -> share. Returns the float sum of the
        survivors' vectors and their count, or :class:`SecAggError`."""
        if self.masked_sum is None or len(self.active) < self.p.threshold:
            raise SecAggError(f"{len(self.active)} nodes sent a masked vector, fewer than the threshold "
                              f"{self.p.threshold}: the round cannot be unmasked")
        alive = set(self.active)
        by_owner: dict[int, dict[int, bytes]] = {}
        for holder, got in shares.items():
            if holder not in alive:
                continue
            for owner, share in got.items():
                if owner in self.graph and holder in self.hood(owner):
                    by_owner.setdefault(owner, {})[holder] = share
        y = self.masked_sum.copy()
        size = y.size
        for u in sorted(alive):
            seed = self._rebuild(u, by_owner.get(u, {}), B_SHARE,
                                 lambda s, u=u: commitment(s) == self.commits[u], "the self-mask seed")
            y = y - prg(seed, size)
        for d in sorted(self.shared - alive):
            sk1 = self._rebuild(d, by_owner.get(d, {}), SK_SHARE,
                                lambda s, d=d: _public_matches(s, self.keys[d].pk1), "the mask key")
            for v in sorted(self.graph[d] & alive):   # v masked with d: d's shares reached it
                m = prg(shared_key(sk1, self.keys[v].pk1, MASK_LABEL), size)
                y = y + m if d > v else y - m
        q_sum = np.mod(y, MOD)
        if (q_sum > len(alive) * (1 << self.p.bits)).any():
            raise SecAggError("the unmasked sum lies outside the range of the survivors' quantised vectors: a masked "
                              "vector or a share was wrong; the round's aggregate is not used")
        return dequantise_sum(q_sum, len(alive), self.p.clip, self.p.bits), len(alive)


def _public_matches(sk1: bytes, pk1: bytes) -> bool:
    try:
        return public_of(sk1) == pk1
    except SecAggError:
        return False
