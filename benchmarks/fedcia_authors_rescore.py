"""Score the FedLightGCN client models that FedCIA's authors' code saved (its early stopper's
``best_model/best_client_model_<k>.pth``) twice on test: the code's way (sigmoid of the propagated
dot products in float32, train and validation items set to -999999999, ``torch.topk``) and
Corolla's (the logits, ``corolla.metrics.top_k``: ties to the smaller item id), both with FedCIA's
metrics (``corolla.metrics.fedcia_set_order``, F1 of the means). Equal numbers mean Corolla's
evaluation adds nothing to a difference between the two implementations. Also counts the items whose
float32 sigmoid is exactly 1.0 (saturated scores would tie in the code's ranking).

    python benchmarks/fedcia_authors_rescore.py /path/to/FedCIA log/FedLightGCN/ml100k

LightGCN only (5 layers, the client's cached ``norm_adj.npz``, as ``model/LightGCN.py``); run with
Corolla's environment (numpy, scipy, torch); the authors' checkout is read, not imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corolla.metrics import fedcia_set_order, top_k  # noqa: E402
from corolla.models.lightgcn import propagate as lightgcn_propagate  # noqa: E402


def propagate(adj: sp.spmatrix, emb: torch.Tensor, layers: int = 5) -> torch.Tensor:
    """``LightGCN.computer``: Corolla's own propagation over the client's cached adjacency."""
    a = adj.tocoo()
    g = torch.sparse_coo_tensor(np.vstack([a.row, a.col]), a.data.astype(np.float32), a.shape,
                                check_invariants=True).coalesce()
    return lightgcn_propagate(g, emb, layers)


def fedcia_metrics(tops: list[list[int]], truths: list[set[int]]) -> dict[str, float]:
    p = np.mean([len(set(t) & s) / 10 for t, s in zip(tops, truths)])
    r = np.mean([len(set(t) & s) / len(s) for t, s in zip(tops, truths)])
    mn = np.array([fedcia_set_order(t, s) for t, s in zip(tops, truths)])
    return {"f1@10": float(2 * p * r / (p + r)), "mrr@10": float(mn[:, 0].mean()), "ndcg@10": float(mn[:, 1].mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("authors_dir", type=Path, help="the FedCIA checkout (its datasets/ml100k_100)")
    ap.add_argument("run", help="the run's folder under the checkout, e.g. log/FedLightGCN/ml100k")
    ap.add_argument("--clients", type=int, default=100)
    a = ap.parse_args()
    data, best = a.authors_dir / "datasets" / f"ml100k_{a.clients}", a.authors_dir / a.run / "best_model"
    if not best.is_dir():
        raise SystemExit(f"{best}: no such folder (the run's early stopper saves its models there)")
    tops: dict[str, list[list[int]]] = {"code": [], "corolla": []}
    truths, saturated, users_n = [], 0, 0
    for k in range(a.clients):
        d = data / str(k)
        tr, va, te = (np.load(d / f"{s}_dataset.npy") for s in ("train", "valid", "test"))
        users = [u for u in range(tr.shape[0]) if te[u].sum() > 0]
        if not users:
            continue
        state = torch.load(best / f"best_client_model_{k}.pth", map_location="cpu")
        emb = torch.cat([state["embedding_user.weight"], state["embedding_item.weight"]])
        out = propagate(sp.load_npz(d / "norm_adj.npz"), emb)
        logits = out[: tr.shape[0]][users] @ out[tr.shape[0]:].T
        masked = torch.tensor((tr[users] > 0) | (va[users] > 0))
        sig = torch.sigmoid(logits)
        saturated += int((sig == 1.0).sum())
        sig[masked] = -999999999.0
        tops["code"] += torch.topk(sig, k=10)[1].tolist()
        lg = logits.double().numpy()
        lg[masked.numpy()] = -np.inf
        tops["corolla"] += top_k(lg, 10).tolist()
        truths += [set(np.flatnonzero(te[u]).tolist()) for u in users]
        users_n += len(users)
    out = {"run": a.run, "users": users_n, "saturated_scores": saturated,
           **{name: fedcia_metrics(t, truths) for name, t in tops.items()}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
