"""The node host: the logical clients a node serves and one message's work for them.

A node hosts the logical clients its node config selects:

* ``partition-id`` / ``num-partitions``: contiguous blocks of the run's logical client ids
  (``np.array_split(range(K), num_partitions)[partition-id]``);
* ``clients = "0-9,15"``: an explicit list (ranges allowed);
* ``clients = "auto"``: whatever the server assigns (contiguous blocks over the ``auto`` nodes it
  knows, reassigned when one joins or leaves; ``docker compose up --scale supernode=N``). The
  nodes should share ``state-dir`` so that a reassigned client's state moves with it;
* ``data-file = PATH``: an *edge node* with one user and its own interactions
  (``item,rating[,timestamp]`` per line); it hosts logical client ``client-id`` (node config,
  default ``1000000 + crc32(path content) % 1000000``).

Other node-config keys: ``data-dir``, ``state-dir`` (where per-client state persists across
messages; default: the run's ``state-dir``), ``device`` (``auto``/``cpu``/``cuda[:N]``),
``threads`` (torch threads, default 1), ``auth-key-file`` (the SuperNode's authentication key:
the node proves it in its handshake and signs its secure-aggregation keys with it) and
``trusted-keys`` (the operator's registered node keys, for secure aggregation against a malicious
server: ``client_app/secure.py``).

A phase runs batched where the method's client class has ``batch_<phase>``; should the batch
raise, the failure is logged and each client runs alone from the state it had before the phase
(never from a state the batch saved: no client trains twice in a round). Test-only fault
injection lives in ``tests/faults.py``, not here.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import traceback
import zlib
from typing import Any

import numpy as np

from client_app import registry
from client_app.base import LogicalClient, PhaseResult
from corolla import methods
from corolla.data import build_federation, edge_federation
from corolla.messages import NodeInfo, RunInfo
from corolla.round import DEFAULT_CONTROL, Control
from corolla.state import StateStore, truncate
from corolla.util import id_ranges

log = logging.getLogger("corolla.node")


def parse_id_list(text: str) -> list[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]``."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        a, sep, b = part.partition("-")
        try:
            out.extend(range(int(a), int(b) + 1) if sep else [int(a)])
        except ValueError:
            raise ValueError(f"node config: expected ids like '0-9,15', got {text!r}") from None
    return out


class NodeHost:
    """Everything one node does for one message: find its logical clients, run the phase for each,
    persist their state, build the reply (as plain dicts; Flower I/O is in ``client_app.app``)."""

    def __init__(self, node_config: dict[str, Any], cfg: dict[str, Any], run: RunInfo):
        self.node_config = dict(node_config)
        self.cfg = cfg
        self.run_key = run.run_key
        self.data_dir = self.node_config.get("data-dir") or run.data_dir or None
        state_root = (self.node_config.get("state-dir") or run.state_dir
                      or os.path.join(tempfile.gettempdir(), "corolla-state"))
        self.store = StateStore(state_root, self.run_key)
        self.threads = int(self.node_config.get("threads", 1))
        self._device = None
        self._params = None   # the method's parameters, once per message (``corolla.methods.params``)
        self.edge_file = self.node_config.get("data-file")
        if self.edge_file:
            self.fed = edge_federation(self.edge_file, self.cfg, self.data_dir)
            default = 1_000_000 + zlib.crc32(open(self.edge_file, "rb").read()) % 1_000_000
            self.hosted = {int(self.node_config.get("client-id", default)): np.zeros(1, np.int64)}
        else:
            self.fed = build_federation(self.cfg, self.data_dir)
            self.hosted = {c: self.fed.clients[c] for c in self.hosted_ids(self.fed.num_clients)}

    @property
    def auto(self) -> bool:
        return str(self.node_config.get("clients", "")).strip() == "auto"

    def hosted_ids(self, k: int) -> list[int]:
        nc = self.node_config
        if self.auto:   # the server assigns the clients; the node can serve any of them
            return list(range(k))
        if "clients" in nc:
            ids = parse_id_list(nc["clients"])
            bad = [c for c in ids if not 0 <= c < k]
            if bad:
                raise ValueError(f"node config 'clients': ids {bad} outside 0..{k - 1}")
            return ids
        if "partition-id" in nc and "num-partitions" in nc:
            p, n = int(nc["partition-id"]), int(nc["num-partitions"])
            if not 0 <= p < n:
                raise ValueError(f"node config 'partition-id'={p}: expected 0..{n - 1}")
            return [int(c) for c in np.array_split(np.arange(k), n)[p]]
        raise ValueError("node config: expected 'partition-id' and 'num-partitions', 'clients' (ids, or 'auto' "
                         "for clients assigned by the server), or 'data-file'")

    @property
    def device(self):
        """The torch device of the node's clients; torch is imported (and held to ``threads``)
        only when a client needs it, so that a message that needs none starts fast."""
        if self._device is None:
            import torch

            torch.set_num_threads(self.threads)
            dev = str(self.node_config.get("device", self.cfg.get("device", "auto")))
            if dev == "auto":
                dev = "cuda" if torch.cuda.is_available() else "cpu"
            self._device = torch.device(dev)
        return self._device

    def client(self, cid: int) -> LogicalClient:
        cls = registry.client_class(self.cfg)
        if self._params is None:
            self._params = methods.run_params(self.cfg)
        return cls(self.cfg, self.fed, cid, self.hosted[cid], self.device if cls.uses_torch else None,
                   self.data_dir, self._params)

    def handshake(self, restore_round: int, nonce: str = "") -> NodeInfo:
        truncate(self.store, list(self.hosted), restore_round)
        hosted = {c: {"users": int(len(u)), "train": int(self.fed.count("train", u))} for c, u in self.hosted.items()}
        if self.fed.item_owner is not None:   # subgraph clients: their own item universe
            sizes: dict[int, int] = {}
            for c in self.hosted:
                g = self.fed.group_of(c)
                if g not in sizes:
                    sizes[g] = int(self.fed.owned_items(g).sum())
                hosted[c]["items"] = sizes[g]
                if self.fed.client_group is not None:   # one-user clients: their subgraph, for the report
                    hosted[c]["group"] = g
        key, sig = "", ""
        if self.node_config.get("auth-key-file"):   # prove the key: sign the run and the server's nonce
            import base64

            from corolla.secagg.identity import Signer, handshake_statement
            signer = Signer(str(self.node_config["auth-key-file"]))
            key, sig = signer.public, base64.b64encode(signer.sign(handshake_statement(self.run_key, nonce))).decode()
        return NodeInfo(hosted, int(self.fed.n_items), bool(self.edge_file), self.auto, self.fed.stats, key, sig)

    def run_phase(self, phase: str, rnd: int, targets: list[int], shared: dict[str, np.ndarray],
                  personal: dict[int, dict[str, np.ndarray]], control: dict[int, Control] | None = None):
        """:meth:`_run_phase` with numpy's BLAS held to the node's ``threads`` as torch is (several
        nodes on one machine must not each start one BLAS thread per core)."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=self.threads):
            out = self._run_phase(phase, rnd, targets, shared, personal, control or {})
        try:
            self.store.sync()   # the phase's states are durable before the node replies
        except OSError:
            err = traceback.format_exc(limit=2)
            out = {c: (err if isinstance(r, PhaseResult) else r) for c, r in out.items()}
        return out

    def _client_for(self, cid: int, control: dict[int, Control]) -> LogicalClient:
        lc = self.client(cid)
        lc.control = control.get(cid, DEFAULT_CONTROL)
        return lc

    def _finish(self, cid: int, rnd: int, res: PhaseResult, loaded, state, seconds: float) -> PhaseResult:
        """Persist a client's new state (or its fresh initial one) and stamp its reply."""
        if res.state is not None:
            self.store.save(cid, rnd, res.state)
        elif loaded is None:
            self.store.save(cid, rnd, state)
        res.metrics["compute-s"] = seconds
        res.metrics["state-round"] = loaded[0] if loaded is not None else 0   # 0: a fresh state
        return res

    def _run_phase(self, phase: str, rnd: int, targets: list[int], shared: dict[str, np.ndarray],
                   personal: dict[int, dict[str, np.ndarray]], control: dict[int, Control]):
        """Run ``phase`` for every targeted hosted client; returns ``{cid: PhaseResult | str(error)}``.

        If the method's client class defines ``batch_<phase>(clients, rnd, states, shared,
        personals)`` the hosted clients run that phase together (batched tensors over the node's
        users); should the batch fail, the failure is logged and each client is run alone, from the
        state loaded before the batch, so that the failure is attributed to the client that caused
        it and no client trains twice.
        """
        targets = [c for c in targets if c in self.hosted]
        self.store.refresh()   # one listing of the state directory per phase
        out: dict[int, PhaseResult | str] = {}
        cls = registry.client_class(self.cfg)
        loaded = {}   # each client's state before this phase
        for c in targets:
            try:
                loaded[c] = self.store.load(c, rnd)
            except Exception:  # noqa: BLE001 - an unreadable state fails that client only
                out[c] = traceback.format_exc(limit=6)
        targets = [c for c in targets if c in loaded]
        batch_fn = getattr(cls, f"batch_{phase}", None)
        if batch_fn is not None and len(targets) > 1:
            t0 = time.perf_counter()
            try:
                clients = [self._client_for(c, control) for c in targets]
                states = [loaded[c][1] if loaded[c] is not None else lc.init_state() for c, lc in zip(targets, clients)]
                results = batch_fn(clients, rnd, states, shared, [personal.get(c, {}) for c in targets])
            except Exception:  # one failing client must not take the node down: each runs alone
                log.warning("batch of phase %s failed for clients %s; running each alone:\n%s", phase,
                            id_ranges(targets), traceback.format_exc(limit=4))
            else:
                dt = (time.perf_counter() - t0) / len(targets)
                for cid, st, res in zip(targets, states, results):
                    try:
                        out[cid] = self._finish(cid, rnd, res, loaded[cid], st, dt)
                    except Exception:  # noqa: BLE001 - its state could not be saved: this client fails
                        out[cid] = traceback.format_exc(limit=6)
                return out
        for cid in targets:
            t0 = time.perf_counter()
            try:
                lc = self._client_for(cid, control)
                state = loaded[cid][1] if loaded[cid] is not None else lc.init_state()
                fn = getattr(lc, f"phase_{phase}", None)
                if fn is None:
                    raise ValueError(f"method '{self.cfg['method']}' has no client phase '{phase}'")
                res = fn(rnd, state, shared, personal.get(cid, {}))
                out[cid] = self._finish(cid, rnd, res, loaded[cid], state, time.perf_counter() - t0)
            except Exception:  # one failing logical client must not take the node down
                out[cid] = traceback.format_exc(limit=6)
        return out

