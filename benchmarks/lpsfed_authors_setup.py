"""Prepare a checkout of the LPSFed authors' code (dntjr41/LPSFed) to run here, CPU only.

What it does (every edit is listed in ``benchmarks/lpsfed_authors.md``):

1. writes ``data/<NAME>/train.json`` in the authors' input format (one list of item ids per user,
   ids 0-based and contiguous) from a raw dataset in ``--data-dir`` (default ``$COROLLA_DATA``): ML-100K ``u.data``
   (each user's items in file order) or the LightGCN Gowalla ``train.txt``;
2. applies the minimal edits to the authors' files: a dataset entry for ML-100K (the ML-1M values
   for every hyper-parameter), the dataset, seed, aggregation period and FedAvg switch read from the
   environment, and one ``ROUND {json}`` log line per client and aggregation (loss, margin, the
   epoch's own val/test F1/Recall/NDCG@20 beside the code's running maxima).

Their preprocessing, partition, eigen-decomposition and training are then run unchanged
(commands in the .md). Nothing of their code is part of this repository.

    python benchmarks/lpsfed_authors_setup.py CHECKOUT --dataset ml100k --data-dir $COROLLA_DATA
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

NAMES = {"ml100k": "ML-100K", "gowalla": "Gowalla"}


def ml100k_lists(data_dir: Path) -> list[list[int]]:
    """u.data as the authors' train.json: user u-1's items (item id - 1) in file order."""
    rows = [line.split("\t") for line in (data_dir / "ml-100k" / "u.data").read_text().splitlines()]
    n_users = max(int(r[0]) for r in rows)
    lists: list[list[int]] = [[] for _ in range(n_users)]
    for r in rows:
        lists[int(r[0]) - 1].append(int(r[1]) - 1)
    return lists


def gowalla_lists(data_dir: Path) -> list[list[int]]:
    """LightGCN's Gowalla ``train.txt`` as the authors' train.json. Their split of it (seed 42) is
    their shipped ``data/Gowalla/test_data.json`` exactly, all 29,858 users (checked; joining
    ``test.txt`` as their ``combining_train_test`` would gives 1,112 of 29,858 equal)."""
    lists: dict[int, list[int]] = {}
    for line in (data_dir / "lightgcn" / "gowalla" / "train.txt").read_text().splitlines():
        parts = line.split()
        if parts:
            lists.setdefault(int(parts[0]), []).extend(int(x) for x in parts[1:])
    return [lists.get(u, []) for u in range(max(lists) + 1)]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if new in text:
        return
    if text.count(old) != 1:
        raise SystemExit(f"{path}: expected exactly one {old!r}; is this the authors' commit 715b5f6?")
    path.write_text(text.replace(old, new))


def patch(co: Path) -> None:
    p = co / "src" / "utils" / "params.py"
    edit(p, "model = 1 ", "import os\nmodel = 1 ")
    edit(p, "dataset = 0 ", "dataset = int(os.environ.get('LPSFED_DATASET', 0)) ")
    edit(p, "seed = 42", "seed = int(os.environ.get('LPSFED_SEED', 42))")
    edit(p, "'Yelp2018', 'Tmall_buy'][dataset]", "'Yelp2018', 'Tmall_buy', 'ML-100K'][dataset]")
    # Gowalla: 24070 is the count of train.txt's users with >= 10 items (their cold filter), but the
    # train_data.json their split writes (the one that reproduces the shipped test_data.json) has all
    # 29,858 users, and USER_NUM is the item-node offset of make_subgraph's graph: with 24070, users
    # 24070.. and items 0.. would be one node. RAND_USER_NUM = round(29858 / 4), as make_subgraph uses.
    edit(p, "USER_NUM = [52643, 24070, 5856, 31668, 151194]", "USER_NUM = [52643, 29858, 5856, 31668, 151194, 943]")
    edit(p, "ITEM_NUM = [61351, 28846, 2995, 27205, 42501]", "ITEM_NUM = [61351, 28846, 2995, 27205, 42501, 1682]")
    edit(p, "RAND_USER_NUM = [13161, 6437, 1506, 7917, 48423]", "RAND_USER_NUM = [13161, 7464, 1506, 7917, 48423, 236]")
    edit(p, "ORIGIN_USER_NUM = [52643, 29858, 6022, 31668, 885759]", "ORIGIN_USER_NUM = [52643, 29858, 6022, 31668, 885759, 943]")
    edit(p, "ORIGIN_ITEM_NUM = [91599, 40981, 3706, 36602, 1144124]", "ORIGIN_ITEM_NUM = [91599, 40981, 3706, 36602, 1144124, 1682]")
    edit(p, "[0.05, 0.001], [0.05, 0.001]]", "[0.05, 0.001], [0.05, 0.001], [0.05, 0.0005]]")
    edit(p, "LAMDA_list = [[0.02, 0.02], [0.02, 0.02], [0.02, 0.02], [0.02, 0.02], [0.02, 0.02]]",
         "LAMDA_list = [[0.02, 0.02], [0.02, 0.02], [0.02, 0.02], [0.02, 0.02], [0.02, 0.02], [0.02, 0.02]]")
    edit(p, "LAYER_list = [[0, 2], [0, 2], [0, 2], [0, 2], [0, 2]]", "LAYER_list = [[0, 2], [0, 2], [0, 2], [0, 2], [0, 2], [0, 2]]")
    edit(p, "TEST_USER_BATCH_list = [32, 128, 32, 64, 512]", "TEST_USER_BATCH_list = [32, 128, 32, 64, 512, 32]")
    edit(p, "FREQUENCY_USER_list = [100, 100, 100, 100, 100]", "FREQUENCY_USER_list = [100, 100, 100, 100, 100, 100]")
    edit(p, "FREQUENCY_ITEM_list = [50, 50, 50, 50, 50]", "FREQUENCY_ITEM_list = [50, 50, 50, 50, 50, 50]")
    edit(p, "LOSS_FUNCTION = ['BPR', 'CrossEntropy', 'MSE', 'BC'][3]",
         "LOSS_FUNCTION = os.environ.get('LPSFED_LOSS', 'BC')")
    edit(p, "GLOBAL_UPDATE_EPOCH = 15", "GLOBAL_UPDATE_EPOCH = int(os.environ.get('LPSFED_GLOBAL_UPDATE_EPOCH', 15))")
    edit(p, "FED_METHOD = ['split', 'fedavg', 'lpsfed'][2]", "FED_METHOD = os.environ.get('LPSFED_FED_METHOD', 'lpsfed')")

    s = co / "src" / "utils" / "subgraph_embeddings_gpu.py"
    edit(s, "Dataset = ['Amazon', 'Gowalla', 'ML-1M', 'Yelp2018', 'Tmall_buy'][DATASET]",
         "Dataset = os.environ.get('LPSFED_DATASET_NAME') or ['Amazon', 'Gowalla', 'ML-1M', 'Yelp2018', 'Tmall_buy'][DATASET]")

    e = co / "src" / "test.py"
    # a 32-user sample in which no user has a held-out item (common on ML-100K's small clients)
    # crashes np.mean of an empty list; count it as no result (zeros: the running maxima keep)
    edit(e, "    result = np.array(result)\n",
         "    if not result:\n        return np.zeros(1), np.zeros(1), np.zeros(1)\n    result = np.array(result)\n")

    t = co / "src" / "train_model.py"
    # FED_METHOD == 'fedavg' is defined in params.py but never read: make it the "w/o per" rule
    # (every client takes the plain mean, rho-bar = 1), as the paper's FedAvg row describes.
    edit(t, "            # Update the pooling and prediction weight and bias\n",
         "            if fed_method == 'fedavg':\n"
         "                kl_values = [1.0] * n_clients\n"
         "            # Update the pooling and prediction weight and bias\n")
    # one log line per client and aggregation: the epoch's own metrics and the running maxima
    edit(t, "                # Collect parameters for federated averaging (only at global update epoch)\n",
         "                print('ROUND ' + json.dumps({'epoch': epoch + 1, 'client': i,\n"
         "                    'loss': float(losses[i]), 'margin': float(models[i].avg_margin.item()),\n"
         "                    'val_f1': float(F1_val.max()), 'val_recall': float(RECALL_val.max()), 'val_ndcg': float(NDCG_val.max()),\n"
         "                    'test_f1': float(F1.max()), 'test_recall': float(RECALL.max()), 'test_ndcg': float(NDCG.max()),\n"
         "                    'max_test_recall': float(RECALL_maxes[i]), 'max_test_ndcg': float(NDCG_maxes[i]),\n"
         "                    'max_val_recall': float(RECALL_val_maxes[i]), 'max_val_ndcg': float(NDCG_val_maxes[i]),\n"
         "                    'time_s': time.time() - time_start}), flush=True)\n"
         "                # Collect parameters for federated averaging (only at global update epoch)\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--dataset", choices=sorted(NAMES), required=True)
    ap.add_argument("--data-dir", type=Path, default=os.environ.get("COROLLA_DATA"),
                    help="the dataset folder (layout: corolla/data/sources.py; default $COROLLA_DATA)")
    a = ap.parse_args()
    if a.data_dir is None:
        ap.error("--data-dir: expected the dataset folder (or set COROLLA_DATA)")
    lists = (ml100k_lists if a.dataset == "ml100k" else gowalla_lists)(a.data_dir)
    out = a.checkout / "data" / NAMES[a.dataset]
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.json").write_text(json.dumps(lists))
    patch(a.checkout)
    print(f"{out / 'train.json'}: {len(lists)} users, {sum(map(len, lists))} interactions; edits applied")


if __name__ == "__main__":
    main()
