"""UFGraphFR and GPFedRec servers (UF engine.py:151-168, utils.py:77-146; docs/methods/ufgraphfr.md; UFGraphFR paper §4.2, Alg. 1).

Round t, phase ``train``: each client uploads its item table Q_u and its graph input g_u
(UFGraphFR: W_u, 32 × d_text, Laplace-noised; oT: v_u; GPFedRec: the item table itself). The
server stacks them in client-id order (E: N × M·32, X: N × F), builds the user graph A from X
(``corolla.graph``: ``graph-mode`` reference or paper, rebuilt every ``graph-update-every``
rounds and kept in between, UFGraphFR-Lite = 5), propagates R = A E (Eq. 25) and keeps

* ``reference`` (the code): r_u = R[u] for every client, sent to u alone next round (its start
  table and regularisation target);
* ``paper``: the global table mean_u R[u] (Eq. 26), sent once per node to everyone;
* GPFedRec: both, the global table as every client's start, r_u as u's regularisation target.
  The same server runs FedCIA Table 3's GGA column (``gpfedrec`` on the silo harness,
  ``client_app.gga``): there the tables are ``dim`` wide (MF d = 256, MLP d = 32).

What the server sees per round: every client's item table (M × 32 floats) and, for UFGraphFR, its
noised W_u (32 × d_text) — not v_u, the prompt, the interactions or the user part of the model.
Clients that sent nothing valid are left out of the graph and keep their previous r_u.
"""

from __future__ import annotations

import time
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla import graph
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Download
from strategies.base import CorollaStrategy

DIM = 32


class GraphAggregation(CorollaStrategy):
    """UFGraphFR (``method = ufgraphfr``) and GPFedRec (``method = gpfedrec``)."""

    hold_uploads = True

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.global_table: np.ndarray | None = None
        self.personal: dict[int, np.ndarray] = {}     # r_u, reference mode and GPFedRec
        self.adjacency: np.ndarray | None = None      # cached A (Lite) over self.graph_clients
        self.graph_clients: list[int] = []
        self.graph_round = 0

    @property
    def gpfedrec(self) -> bool:
        """GPFedRec (set by the method table): the global table goes to every client too."""
        return self.global_table_too

    global_table_too = False

    def summary(self) -> None:
        keys = ("method", "num-rounds", "graph-mode", "graph-input", "neighborhood-size", "neighborhood-threshold",
                "graph-update-every", "upload-noise", "noise-target", "use-transformer", "use-joint-embedding")
        log(INFO, "%s: %s", type(self).__name__, {k: self.cfg[k] for k in keys})

    # -------------------------------------------------------------- download
    def configure_phase(self, phase, rnd, targets):
        shared: dict[str, np.ndarray] = {}
        if self.global_table is not None and (self.gpfedrec or self.p.graph_mode == "paper"):
            shared["item.global"] = self.global_table
        key = "item.target" if self.gpfedrec else "item.weight"
        personal = {c: {key: self.personal[c]} for c in targets if c in self.personal}
        return Download(shared, personal)

    # -------------------------------------------------------------- upload
    def graph_input_shape(self) -> tuple[int, ...]:
        if self.p.graph_input == "text":
            return (self.p.text_dim,)
        if self.p.use_joint_embedding:
            return (DIM, self.p.text_dim)
        return (1, DIM)

    @property
    def dim(self) -> int:
        """The item tables' width: 32 on the one-user harness (UFGraphFR's and GPFedRec's
        networks), the run's ``dim`` for GGA's silo clients."""
        return int(self.cfg["dim"])

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        out = {"item.weight": ArraySpec((self.n_items, self.dim), "float32")}
        if not self.gpfedrec:
            out["graph.input"] = ArraySpec(self.graph_input_shape(), "float32")
        return out


    def aggregate_phase(self, phase, rnd, results):
        uploads = self.take_uploads()
        if not uploads:
            log(WARNING, "round %d: no valid upload; the tables are unchanged", rnd)
            return {"clients": len(results)}
        t0 = time.perf_counter()
        cids = sorted(uploads)
        every = max(1, int(self.p.graph_update_every))
        rebuild = self.adjacency is None or cids != self.graph_clients or (rnd - 1) % every == 0
        x = (None if self.gpfedrec or not rebuild else
             np.stack([uploads[c].payload["graph.input"].reshape(-1) for c in cids]))
        e = take_tables(uploads, cids, self.n_items * self.dim)   # N × M·dim; the uploads are released
        if rebuild:
            self.adjacency = graph.build_graph(e if self.gpfedrec else x, self.p.graph_mode, self.p.neighborhood_size,
                                               self.p.neighborhood_threshold)
            self.graph_clients, self.graph_round = cids, rnd
        del x
        keep = self.gpfedrec or self.p.graph_mode == "reference"
        if keep:   # the previous r_u of the clients that uploaded are replaced below: let them go first
            release_replaced(self.personal, cids)
        r = graph.propagate(self.adjacency, e)
        del e
        self.global_table = r.mean(0).reshape(self.n_items, self.dim).astype(np.float32)
        if keep:
            for j, c in enumerate(cids):
                self.personal[c] = r[j].reshape(self.n_items, self.dim)
        a = self.adjacency
        return {"clients": len(results), "uploads": len(cids), "graph-round": self.graph_round,
                "neighbours": float(np.mean((a > 0).sum(1))),
                "train-loss": float(np.nanmean([r_.metrics.get("train-loss", np.nan) for r_ in results.values()])),
                # the text encoder's one-time cost (load + encode) summed over the clients' shares
                "encode-s": float(sum(r_.metrics.get("encode-s", 0.0) for r_ in results.values())),
                "server-s": time.perf_counter() - t0}

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        out = {f"personal/{c}": v for c, v in self.personal.items()}
        if self.global_table is not None:
            out["global"] = self.global_table
        if self.adjacency is not None:
            out["adjacency"] = self.adjacency
            out["graph-clients"] = np.asarray(self.graph_clients, np.int64)
            out["graph-round"] = np.asarray([self.graph_round], np.int64)
        return out

    def load_state_dict(self, state):
        self.personal = {int(k.split("/", 1)[1]): v for k, v in state.items() if k.startswith("personal/")}
        self.global_table = state.get("global")
        if "adjacency" in state:
            self.adjacency = state["adjacency"]
            self.graph_clients = [int(c) for c in state["graph-clients"]]
            self.graph_round = int(state["graph-round"][0])


def take_tables(uploads: dict, cids: list[int], width: int) -> np.ndarray:
    """The uploaded item tables stacked in ``cids`` order (N × ``width`` float32), each upload
    dropped from ``uploads`` once copied: the server never holds the uploads and their stack
    whole at once (at 1,600 clients × 12,454 items each is 2.55 GB)."""
    e = np.empty((len(cids), width), np.float32)
    for j, c in enumerate(cids):
        e[j] = uploads.pop(c).payload["item.weight"].reshape(-1)
    return e


def release_replaced(personal: dict[int, np.ndarray], cids: list[int]) -> None:
    """Drop the r_u of ``cids`` (about to be replaced) and copy the others out of the previous
    round's propagated stack, so that stack is freed before the new one is computed. The kept
    values are unchanged (copies)."""
    replaced = set(cids)
    for c in list(personal):
        if c in replaced:
            del personal[c]
        elif personal[c].base is not None:
            personal[c] = personal[c].copy()

