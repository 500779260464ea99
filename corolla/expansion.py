"""The graph expansion's matching party and the clients' item pseudonyms, shared by Dist-FedAvg
(docs/methods/distfedavg.md) and FedPerGNN (docs/methods/fedpergnn.md).

The expansion is FedPerGNN's (Wu et al., Nat. Commun. 13:3091, 2022; the authors' code
wuch15/FedPerGNN 9e77e2e ``expansion.py:6-63``): each client sends pseudonyms of its items to a
third party, which finds the users holding each pseudonym (``cipher2userid``, expansion.py:21-27)
and returns to each client, per item, its co-interacting users (expansion.py:31-38; the client
shuffles them and keeps ``NEIGHBOR_LEN``, l.49-57).

* :func:`hash_items` — the pseudonym of an item: a salted 63-bit SHA-256 hash. The code signs
  SHA-256(str(j)) with one RSA key every client shares (expansion.py:8-14, encrypt.py:30-35): a
  deterministic pseudonym either way, which whoever holds the key (here: the salt) can invert over
  the item universe;
* :class:`MatchingParty` — the third party. :meth:`MatchingParty.match` is Dist-FedAvg's
  (the union of a client's neighbours and the shared-item edges); :meth:`MatchingParty.per_item`
  is FedPerGNN's (per item of the client, in the client's order, the users holding it).

Pure NumPy, no Flower: the server side (``strategies/``) hosts the party, the clients
(``client_app/``) compute the pseudonyms.
"""

from __future__ import annotations

import numpy as np

from corolla.util import rng, stable_seed


def hash_items(items: np.ndarray, salt: int) -> np.ndarray:
    """Salted 63-bit hashes of item ids (what the matching party sees)."""
    return np.array([stable_seed("item", salt, int(i)) & ((1 << 63) - 1) for i in items], np.int64)


class MatchingParty:
    """The trusted third party of the expansion (FedPerGNN expansion.py:21-59): matches hashed item
    ids across clients; caps ``max-items`` per client and ``max-neighbors-per-item`` (0: none)."""

    def __init__(self, seed: int, max_items: int, max_neighbours: int):
        self.seed, self.max_items, self.max_neighbours = seed, max_items, max_neighbours
        self.items_of: dict[int, np.ndarray] = {}
        self._holders: dict[int, list[int]] | None = None

    def register(self, cid: int, hashes: np.ndarray) -> None:
        self.items_of[cid] = np.asarray(hashes, np.int64)
        self._holders = None

    def holders(self) -> dict[int, list[int]]:
        """Per pseudonym, the registered clients holding it, in client-id order (``cipher2userid``,
        expansion.py:21-27)."""
        if self._holders is None:
            out: dict[int, list[int]] = {}
            for c in sorted(self.items_of):
                for h in self.items_of[c].tolist():
                    out.setdefault(h, []).append(c)
            self._holders = out
        return self._holders

    def match(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per client: (U_c sorted, edges (k, 2): index into U_c, index into its sorted items)."""
        holders = self.holders()
        out = {}
        for c in sorted(self.items_of):
            hashes = self.items_of[c]
            idx = np.arange(len(hashes))
            g = rng(self.seed, "expansion", c)
            if self.max_items and len(idx) > self.max_items:
                idx = np.sort(g.permutation(len(idx))[: self.max_items])
            pairs = []
            for k in idx.tolist():
                who = [v for v in holders[int(hashes[k])] if v != c]
                if self.max_neighbours and len(who) > self.max_neighbours:
                    who = sorted(g.permutation(who)[: self.max_neighbours].tolist())
                pairs += [(v, k) for v in who]
            users = np.array(sorted({v for v, _ in pairs}), np.int64)
            pos = {v: j for j, v in enumerate(users.tolist())}
            edges = np.array([(1 + pos[v], k) for v, k in pairs], np.int64).reshape(-1, 2)
            out[c] = (users, edges)
        return out

    def per_item(self, cid: int, g: np.random.Generator, include_self: bool) -> list[list[int]]:
        """FedPerGNN's lists for client ``cid``: for each of its registered pseudonyms, in the order
        it sent them, the clients holding it (itself only with ``include_self``: the code's
        ``cipher2userid`` includes the querying user, expansion.py:21-27), shuffled by ``g`` and cut
        to ``max-neighbors-per-item`` (0: all; expansion.py:52-53)."""
        holders = self.holders()
        out = []
        for h in self.items_of[cid].tolist():
            who = [v for v in holders[int(h)] if include_self or v != cid]
            who = [int(v) for v in g.permutation(np.asarray(who, np.int64))] if len(who) else []
            if self.max_neighbours:
                who = who[: self.max_neighbours]
            out.append(who)
        return out
