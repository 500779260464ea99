"""Evaluation pooling: the per-user metric values the logical clients report, pooled over clients
(in id order) into the protocol's metrics (``corolla.metrics.aggregate``), per split; with
``report-per-client`` also each client's metrics and their unweighted mean; with ``groups`` (one-user
clients on a spectral partition: each client's subgraph) each subgraph's metrics over its users
and their unweighted mean, LPSFed's Table 1 aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np

from corolla import metrics as M
from strategies.base import ClientResult


def pool_metrics(results: dict[int, ClientResult], ks: list[int], per_client: bool = False,
                 groups: dict[int, int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    groups = groups or {}
    for split in ("valid", "test"):
        per_user: dict[str, list[float]] = {}
        for cid in sorted(results):
            for k, v in results[cid].metrics.items():
                if k.startswith(split + "/"):
                    per_user.setdefault(k[len(split) + 1:], []).extend(v)
        plain = {k: np.asarray(v) for k, v in per_user.items() if not k.startswith("ties:")}
        mets, compat = M.aggregate(plain, ks)
        ties = {k[len("ties:"):]: float(np.mean(v)) for k, v in per_user.items() if k.startswith("ties:")}
        users = len(next(iter(plain.values()))) if plain else 0
        out[split] = {"metrics": mets, "compat": compat or ties, "users": users}
        if per_client:
            members: dict[int, list[int]] = {}
            for cid in sorted(results):
                members.setdefault(groups.get(cid, cid), []).append(cid)
            clients = {}
            for key in sorted(members):
                vals: dict[str, list[float]] = {}
                for cid in members[key]:
                    for k, v in results[cid].metrics.items():
                        if k.startswith(split + "/") and not k.startswith(split + "/ties:"):
                            vals.setdefault(k[len(split) + 1:], []).extend(v)
                if vals:
                    arr = {k: np.asarray(v) for k, v in vals.items()}
                    clients[str(key)] = {**M.aggregate(arr, ks)[0], "users": len(next(iter(arr.values())))}
            out[split]["per_client"] = clients
            out[split]["unweighted_mean"] = {
                k: float(np.mean([m[k] for m in clients.values()]))
                for k in mets if clients and all(k in m for m in clients.values())}
    return out
