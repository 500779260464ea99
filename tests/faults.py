"""Test-only fault injection (not in the product: no node config of a real deployment can make a
node upload garbage). :func:`install` wraps ``client_app.host.NodeHost`` so that the logical
clients a node's config lists under ``fault-nan = "3,4"`` upload NaN in their first payload array
and those under ``fault-shape = "5"`` upload it with one row missing.

In process, a test calls :func:`install` (or uses the ``faulty`` fixture of the tests that need
it); through real SuperNodes, the test puts ``tests/fault_hook`` on the SuperNodes' PYTHONPATH,
whose ``sitecustomize`` installs it in every ClientApp process as ``client_app.host`` is imported.
"""
from __future__ import annotations

import numpy as np

KEYS = ("fault-nan", "fault-shape")


def _ids(text) -> set[int]:
    from client_app.host import parse_id_list
    return set(parse_id_list(str(text or "")))


def corrupt(node_config: dict, cid: int, payload: dict) -> None:
    """Corrupt ``payload`` in place as ``node_config`` asks for client ``cid``."""
    if not payload:
        return
    first = sorted(payload)[0]
    if cid in _ids(node_config.get("fault-nan")):
        payload[first] = np.full_like(payload[first], np.nan)
    if cid in _ids(node_config.get("fault-shape")):
        payload[first] = payload[first][:-1]


def install(host_module=None) -> None:
    """Wrap ``NodeHost._finish`` (idempotent)."""
    if host_module is None:
        import client_app.host as host_module
    cls = host_module.NodeHost
    if getattr(cls._finish, "_faulty", False):
        return
    real = cls._finish

    def _finish(self, cid, rnd, res, loaded, state, seconds):
        out = real(self, cid, rnd, res, loaded, state, seconds)
        corrupt(self.node_config, cid, out.payload)
        return out

    _finish._faulty = True
    cls._finish = _finish
