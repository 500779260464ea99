"""Shared pieces of the secure-aggregation tests: node keys in OpenSSH form, and one SecAgg+
aggregation driven in memory over ``corolla.secagg``'s node and server steps (an honest server,
which the attack tests then replace step by step)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from corolla.secagg import identity, node
from corolla.secagg.params import Params
from corolla.secagg.server import KeyEntry, ServerRound

RUN, RND, PHASE = "run-x", 1, "train"


def node_keys(folder: Path, n: int) -> tuple[list[Path], Path]:
    """``n`` ECDSA P-384 node keys in OpenSSH form (``ssh-keygen -t ecdsa -b 384``'s) and a trust
    list of their public keys (the operator's ``trusted-keys`` file)."""
    folder.mkdir(parents=True, exist_ok=True)
    keys, lines = [], []
    for i in range(n):
        k = ec.generate_private_key(ec.SECP384R1())
        p = folder / f"node{i}"
        p.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                      serialization.NoEncryption()))
        p.chmod(0o600)
        line = k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
        (folder / f"node{i}.pub").write_text(line + f" corolla-node{i}\n")
        keys.append(p)
        lines.append(line)
    trust = folder / "trusted.pub"
    trust.write_text("\n".join(lines) + "\n")
    return keys, trust


class Round:
    """One aggregation over nodes 1..n, step by step, with an honest server."""

    def __init__(self, xs: dict[int, np.ndarray], p: Params, signers: dict[int, identity.Signer] | None = None,
                 trusted: dict[str, str] | None = None, seed: int | None = 0):
        self.xs, self.p, self.signers, self.trusted = xs, p, signers or {}, trusted
        self.srv = ServerRound(p, sorted(xs), RUN, RND, PHASE, seed=seed)
        self.st: dict[int, node.NodeState] = {}
        self.seen: dict[int, np.ndarray] = {}

    def setup(self):
        for u in sorted(self.xs):
            signer = self.signers.get(u)
            self.st[u], rep = node.setup(RUN, RND, PHASE, u, self.p, signer, self.trusted is not None)
            self.srv.add_keys(u, KeyEntry(rep["pk1"], rep["pk2"], rep.get("signer", ""), rep.get("sig", b"")))
        return self

    def share(self, skip=()):
        for u in sorted(self.xs):
            if u in skip:
                continue
            entries = {v: e.wire() for v, e in self.srv.keys_for(u).items()}
            signer = self.signers.get(u)
            cts, commit = node.share_keys(self.st[u], entries, self.trusted, signer.public if signer else "")
            self.srv.add_shares(u, cts, commit)
        return self

    def collect(self, skip=()):
        for u in sorted(self.srv.shared):
            if u in skip:
                continue
            y = node.collect(self.st[u], self.xs[u], self.srv.ciphertexts_for(u))
            self.seen[u] = y
            self.srv.add_masked(u, y, y.size)
        return self

    def confirm(self, skip=()):
        if self.srv.signed:
            for u in self.srv.survivors():
                if u not in skip:
                    self.srv.add_confirmation(u, node.confirm(self.st[u], self.srv.survivors(), self.signers.get(u)))
        return self

    def unmask(self, skip=()):
        shares = {}
        for u in self.srv.survivors():
            if u in skip or (self.srv.signed and u not in self.srv.confirmations):
                continue
            active, sigs = self.srv.unmask_request(u)
            shares[u] = node.unmask(self.st[u], active, sigs)
        return shares

    def run(self, drop_after_share=(), drop_after_collect=()):
        self.setup().share().collect(skip=drop_after_share).confirm()
        return self.srv.finish(self.unmask(skip=drop_after_collect))


def vectors(n: int, size: int = 500, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {u: rng.uniform(-1, 1, size) for u in range(1, n + 1)}


def bound(n: int, p: Params) -> float:
    return n * 2 * p.clip / (1 << p.bits)
