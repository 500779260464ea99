"""Personal downloads the server owes its clients (FedCA's Q_g[u], pFedGraph's θ̄_u and c_u).

A personalised method computes, in round t, arrays meant for one client only; they go with the
next message that reaches that client. This is the bookkeeping both methods need, once:

* :meth:`Owed.owe` records them (a newer aggregate replaces the older one);
* :meth:`Owed.select` gives the arrays of the targets of a download (optionally some keys only);
* :meth:`Owed.handed` is called from the strategy's ``delivered`` hook. A training message
  consumes what it carried (the client starts from it or interpolates it there). An evaluation
  download holds what it carried until :meth:`Owed.settle` sees the evaluation's results: a client
  that did not reply did not surely get it, so it is owed again (under anything newer: a newer
  aggregate wins);
* :meth:`Owed.state_dict` / :meth:`Owed.load_state_dict` checkpoint what is owed under
  ``pending/<client>/<key>`` (what is in flight in an evaluation is owed again after a resume:
  the checkpoint holds it as owed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from corolla.round import Phase

Arrays = dict[str, np.ndarray]


def _all(key: str) -> bool:
    return True


class Owed:
    def __init__(self) -> None:
        self.pending: dict[int, Arrays] = {}      # not yet handed to the transport
        self.in_flight: dict[int, Arrays] = {}    # handed with an evaluation download, not yet confirmed

    def __contains__(self, cid: int) -> bool:
        return cid in self.pending

    def __len__(self) -> int:
        return len(self.pending)

    def clients(self) -> list[int]:
        return sorted(self.pending)

    def owe(self, cid: int, arrays: Arrays) -> None:
        self.pending[int(cid)] = dict(arrays)

    def select(self, targets: Iterable[int], keys: Callable[[str], bool] = _all) -> dict[int, Arrays]:
        """The owed arrays (those whose name passes ``keys``) of the targets that have any."""
        out = {}
        for c in targets:
            arrays = {k: v for k, v in self.pending.get(c, {}).items() if keys(k)}
            if arrays:
                out[c] = arrays
        return out

    def handed(self, phase: Phase, cids: Iterable[int], keys: Callable[[str], bool] = _all) -> None:
        """``phase``'s download carrying the arrays named by ``keys`` went to ``cids``."""
        for c in cids:
            if c not in self.pending:
                continue
            sent = {k: v for k, v in self.pending[c].items() if keys(k)}
            rest = {k: v for k, v in self.pending[c].items() if not keys(k)}
            if rest:
                self.pending[c] = rest
            else:
                del self.pending[c]
            if phase == Phase.EVALUATE and sent:
                self.in_flight[c] = sent

    def settle(self, replied: Iterable[int]) -> None:
        """The evaluation in flight is over; the clients in ``replied`` got their download."""
        got = set(replied)
        for c, sent in self.in_flight.items():
            if c not in got:
                self.pending[c] = {**sent, **self.pending.get(c, {})}
        self.in_flight = {}

    def state_dict(self) -> Arrays:
        owed = {c: dict(d) for c, d in self.pending.items()}
        for c, sent in self.in_flight.items():
            owed[c] = {**sent, **owed.get(c, {})}
        return {f"pending/{c}/{k}": v for c, d in owed.items() for k, v in d.items()}

    def load_state_dict(self, state: Arrays) -> None:
        self.pending, self.in_flight = {}, {}
        for key, v in state.items():
            if key.startswith("pending/"):
                _, c, k = key.split("/", 2)
                self.pending.setdefault(int(c), {})[k] = v
