"""What the LPSFed authors' code trains on and what its reported number measures (issue 29).

Run inside a checkout prepared by ``lpsfed_authors_setup.py`` whose ``data/<NAME>/4_clients`` holds
a partition made by their ``make_subgraph.py`` and ``subgraph_embeddings_gpu.py``. It calls their own
functions as ``src/train_model.py`` does (``read_subgraph``, ``read_data``, ``dataset_preprocessing``
twice: test, then validation; ``testset_preprocessing``; ``test_model``) and reports:

1. **ids** — per client: the model's user/item table sizes, the subgraph's training pairs, how many
   pairs are left after the second ``dataset_preprocessing`` call (it re-maps the already mapped
   training pairs: local item ids read as global ids) and how many of those are edges of the
   subgraph; whose held-out list each model user is scored against (the test lists come from a second,
   unseeded clustering: list *u* belongs to another user than model user *u*); how many test items
   survive the mapping's filter;
2. **the reported metric without a model** — their ``test_model`` (a random sample of
   ``TEST_USER_BATCH`` users per evaluation, train items masked, Recall/NDCG@20) on scores that
   carry no learning: uniform random scores, and each item's count in the training pairs the code
   trains on (popularity); evaluated as often as their run evaluates (``N_EPOCH`` = 200 times per
   client), aggregated as their code reports (per client the maximum over evaluations) and as
   Corolla's ``metrics_paper_compat`` does (the unweighted mean over clients).

    cd CHECKOUT/src && LPSFED_DATASET=5 LPSFED_DATASET_NAME=ML-100K \\
        python /path/to/benchmarks/lpsfed_authors_probe.py --seeds 0 1 2 --json OUT.json

Nothing here changes their code; the scores replace the model only inside this script.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path


class Scores:
    """Stands in for their model in ``test_model``: ``model(users, None, None, ...)`` returns
    ``(_, ratings, _, top_items)`` with ratings users × items."""

    def __init__(self, n_items, item_scores, torch, rng):
        self.n_items, self.item_scores, self.torch, self.rng, self.device = n_items, item_scores, torch, rng, "cpu"

    def __call__(self, users, pos, neg, *_):
        t = self.torch
        n = len(users)
        if self.item_scores is None:
            r = t.from_numpy(self.rng.random((n, self.n_items))).float()
        else:   # popularity, ties broken at random
            r = t.from_numpy(self.item_scores[None, :] + 1e-3 * self.rng.random((n, len(self.item_scores)))).float()
        return None, r, None, t.topk(r, k=min(20, r.shape[1]), dim=1).indices


def true_pair(t: dict, u: int, k: int) -> bool:
    """Is model pair (u, k) an edge of the client's subgraph (``t``: its users, items, edges)?"""
    return u < len(t["users"]) and k < len(t["items"]) and (t["users"][u], t["items"][k]) in t["edges"]


def id_trace(train_datas, test_global, removed_test, after_first, truth):
    out = []
    for i, t in enumerate(truth):
        final = train_datas[i][1]
        out.append({"client": i, "model_users": t["n_users"], "model_items": t["n_items"],
                    "subgraph_pairs": t["pairs"],
                    "pairs_true_after_first_mapping": sum(true_pair(t, u, k) for u, k in after_first[i]),
                    "pairs_trained_on": len(final), "pairs_trained_on_that_are_edges": sum(true_pair(t, u, k) for u, k in final),
                    "test_lists": len(test_global[i]), "test_items": sum(len(x) for x in test_global[i]),
                    "test_items_kept": sum(len(x) for x in removed_test[i])})
    return out


def owners(i, truth, test_global, data_dir: Path, clients_dir: Path):
    """The global user each test list belongs to (its test items and train+val items identify it)."""
    gtest = json.loads((data_dir / "test_data.json").read_text())
    gtrain = [set(x) for x in json.loads((data_dir / "train_data.json").read_text())]
    gtest_s = [set(x) for x in gtest]
    tr = json.loads((clients_dir / f"train_data{i}.json").read_text())
    va = json.loads((clients_dir / f"val_data{i}.json").read_text())
    by_item: dict[int, list[int]] = {}   # candidate owners through one of the list's items
    for u, items in enumerate(gtest):
        for x in items:
            by_item.setdefault(x, []).append(u)
    found = []
    for j, lst in enumerate(test_global[i]):
        need_t, need_r = set(lst), set(tr[j]) | set(va[j])
        pool = by_item.get(lst[0], []) if lst else range(len(gtest))
        cand = [u for u in pool if need_t <= gtest_s[u] and need_r <= gtrain[u]]
        found.append(cand[0] if len(cand) == 1 else None)
    users = truth[i]["users"]
    return {"test_owner_identified": sum(o is not None for o in found),
            "test_list_is_the_model_users_own": sum(1 for u in range(min(len(found), len(users))) if found[u] == users[u]),
            "test_users_in_the_training_subgraph": sum(1 for o in found if o in set(users))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--evaluations", type=int, default=None, help="per client (default: their N_EPOCH)")
    ap.add_argument("--no-owners", action="store_true", help="skip matching test lists to users (slow on Gowalla)")
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    sys.path.insert(0, ".")
    import networkx as nx
    import numpy as np
    import torch
    from test import test_model
    from utils.fed_data_preprocessing import (
        dataset_preprocessing,
        testset_preprocessing,
    )
    from utils.params import (
        DATASET,
        KEEP_PORB,
        N_EPOCH,
        NUM_CLIENTS,
        TEST_USER_BATCH,
        TOP_K,
        USER_NUM,
    )
    from utils.read_subgraph_data import read_data, read_subgraph

    data_dir = Path("../data") / DATASET
    cdir = data_dir / f"{NUM_CLIENTS}_clients"
    train_datas, test_datas, val_datas, truth = [], [], [], []
    for i in range(NUM_CLIENTS):
        tr = list(read_subgraph(str(cdir / f"subgraphs{i}.gml"), USER_NUM))
        g = nx.read_gml(str(cdir / f"subgraphs{i}.gml"))
        edges = set()
        for u, v in g.edges():
            if g.nodes[u]["bipartite"] == 1:
                u, v = v, u
            edges.add((int(u), int(v) - USER_NUM))
        truth.append({"edges": edges, "items": list(tr[4]), "n_users": tr[2], "n_items": tr[3], "pairs": len(tr[1]),
                      # dataset_preprocessing's user order: enumerate(set()) of the user-sorted pairs
                      "users": list({x[0] for x in sorted(tr[1], key=lambda x: x[0])})})
        train_datas.append(tr)
        test_datas.append(read_data(str(cdir / f"test_data{i}.json"))[0])
        val_datas.append(read_data(str(cdir / f"val_data{i}.json"))[0])
    test_global = copy.deepcopy(test_datas)
    removed_test = dataset_preprocessing(NUM_CLIENTS, train_datas, test_datas)       # train_model.py, first call
    after_first = [list(t[1]) for t in train_datas]
    dataset_preprocessing(NUM_CLIENTS, train_datas, val_datas)                         # second call: re-maps train pairs
    para_test = testset_preprocessing(NUM_CLIENTS, train_datas, removed_test, TOP_K, TEST_USER_BATCH, KEEP_PORB)
    ids = id_trace(train_datas, test_global, removed_test, after_first, truth)
    if not a.no_owners:
        for i in range(NUM_CLIENTS):
            ids[i].update(owners(i, truth, test_global, data_dir, cdir))
    n_eval = a.evaluations or N_EPOCH
    runs = []
    for scorer in ("random", "popularity"):
        for s in a.seeds:
            np.random.seed(s)   # test_model's user sample uses NumPy's global generator
            rng = np.random.default_rng(s)
            t0 = time.perf_counter()
            rec_max, ndcg_max = [], []
            for i in range(NUM_CLIENTS):
                n_items = train_datas[i][3]
                pop = None
                if scorer == "popularity":
                    pop = np.zeros(n_items)
                    for _, k in train_datas[i][1]:
                        if k < n_items:
                            pop[k] += 1
                m = Scores(n_items, pop, torch, rng)
                best_r = best_n = 0.0
                for _ in range(n_eval):
                    _, r, nd = test_model(m, para_test[i])
                    best_r, best_n = max(best_r, float(np.max(r))), max(best_n, float(np.max(nd)))
                rec_max.append(best_r)
                ndcg_max.append(best_n)
            runs.append({"scorer": scorer, "seed": s, "per_client_recall@20_max": rec_max, "per_client_ndcg@20_max": ndcg_max,
                         "recall@20": float(np.mean(rec_max)), "ndcg@20": float(np.mean(ndcg_max)),
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(json.dumps({k: v for k, v in runs[-1].items() if not k.startswith("per_")}), flush=True)
    summary = {}
    for scorer in ("random", "popularity"):
        rs = [r for r in runs if r["scorer"] == scorer]
        summary[scorer] = {m: {"mean": float(np.mean([r[m] for r in rs])), "sd": float(np.std([r[m] for r in rs], ddof=1)) if len(rs) > 1 else 0.0}
                           for m in ("recall@20", "ndcg@20")}
    a.json.write_text(json.dumps({"dataset": DATASET, "test_user_batch": TEST_USER_BATCH, "evaluations_per_client": n_eval,
                                  "command": " ".join(sys.argv), "ids": ids, "runs": runs, "summary": summary}, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
