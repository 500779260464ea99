"""The authors' MetaMF on UFGraphFR's ML-100K leave-one-out protocol: the leaderboard's "authors' code"
value of the MetaMF row of UFGraphFR's Table 4.

The model is the authors' ``MetaMF.py`` (TempSDU/MetaMF at ``bbfdf0b``) imported unchanged from a
checkout; the training loop is ``Run.ipynb``'s (cells 1, 11, 14-17): seeds 1 (random, NumPy, torch),
Xavier-normal Linear weights and zero biases, Adam(lr 1e-4, weight decay 1e-3), batches of 64 rows
shuffled every epoch, ``clip_grad_norm_(·, 5)``, the model's own loss (mean squared error).

Adapted, because the notebook predicts explicit ratings (MAE/MSE) and UFGraphFR's row is top-10
ranking on implicit data (UFGraphFR publishes no MetaMF adaptation of its own):

* the rows of an epoch: every training positive (label 1) and ``--neg`` negatives per positive drawn
  from the items the user never interacted with (label 0), re-drawn every epoch;
* the split and the evaluation are UFGraphFR's own, built with the authors' ``data.py`` of a
  UFGraphFR checkout (``SampleGenerator`` on its ``data/100k/ratings.dat``, ids as its ``train.py``
  assigns them): leave-one-out by time, 99 validation and 99 test negatives, HR@10 / NDCG@10 with
  ties ranked against the positive (its ``metrics.py``), the test metrics at the best validation
  HR@10, the latest of ties. The same split as ``--set ml100k-file=gpfedrec-csv --set
  eval-neg-sampler=python-random`` on Corolla's presets (``benchmarks/authors_loo_check.py``).

Speed (the same function): ``MetaMF.forward`` generates the whole item table (B × 1682 × 32) and picks
one row by a one-hot product; here only the picked item's row of ``emb_layer_1``'s output is generated
(the same weights and bias rows: outputs and gradients equal up to float summation order, 1.2e-7 on a
batch), and Adam is PyTorch's fused CPU kernel (the same update). ``--full-forward`` keeps the code's.

    python benchmarks/metamf_authors_loo.py --metamf-dir /path/to/MetaMF --ufgraphfr-dir /path/to/UFGraphFR \\
        --epochs 3 --json docs/results/metamf-authors-ufgraphfr-ml100k.json

(``--metamf-dir``: a checkout of https://github.com/TempSDU/MetaMF at bbfdf0b; ``--ufgraphfr-dir``: of
https://github.com/trueWangSyutung/UFGraphFR at 853ca8a with its ``data/100k``; one thread, about
10-25 minutes an epoch on this 2-core machine.)

On a dataset whose UFGraphFR split the authors' repository does not ship (its ``data/`` holds only
``100k``; its ``train.py`` reads ``data/lastfm-2k/ratings.dat`` and ``user.dat`` that it does not
publish), ``--preset`` takes the split from a Corolla preset instead: the preset's federation as its
clients see it (training positives, each user's validation and test item, the 99 + 99 negatives, the
preset's seed), everything else unchanged. The Lastfm-2K row's authors' value::

    python benchmarks/metamf_authors_loo.py --metamf-dir /path/to/MetaMF --preset metamf-ufgraphfr-lastfm2k \
        --data-dir $COROLLA_DATA --epochs 3 --eval-users 200 --json docs/results/metamf-authors-ufgraphfr-lastfm2k.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np


def uf_split(uf_dir: Path) -> dict[str, np.ndarray]:
    """UFGraphFR's split, built by its own ``data.py`` (``random.seed(0)`` at its import, as in its
    ``train.py``): training positives, each user's validation and test item and their 99 + 99
    negatives, 0-based ids as ``train.py:162-168`` assigns them."""
    sys.path.insert(0, str(uf_dir))
    import data as ufdata  # the authors' file, unchanged
    from gpfedrec_engine_check import (
        authors_ratings,  # train.py:162-168's id assignment (benchmarks/)
    )

    rating = authors_ratings(uf_dir)
    sg = ufdata.SampleGenerator(ratings=rating)
    n_users = rating.userId.nunique()
    val = sg.val_ratings.set_index("userId").itemId
    te = sg.test_ratings.set_index("userId").itemId
    negs = sg.negatives.set_index("userId").negative_samples
    neg = np.array([negs[u] for u in range(n_users)], np.int64)   # 198 each
    return {"train_u": sg.train_ratings.userId.values.astype(np.int64),
            "train_i": sg.train_ratings.itemId.values.astype(np.int64),
            "val_i": np.array([val[u] for u in range(n_users)], np.int64),
            "test_i": np.array([te[u] for u in range(n_users)], np.int64),
            "val_neg": neg[:, :99], "test_neg": neg[:, 99:],
            "n_users": n_users, "n_items": rating.itemId.nunique()}


def preset_split(preset: str, data_dir: str | None, overrides: dict | None = None) -> dict[str, np.ndarray]:
    """The split of a Corolla preset (its federation, built by Corolla's loader with the preset's
    seed; ``overrides`` as ``--set``), in ``uf_split``'s form: one validation and one test item per
    user, 99 + 99 negatives."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from corolla.config import resolve
    from corolla.data import build_federation

    fed = build_federation(resolve(preset, overrides), data_dir)
    if fed.neg_valid is None or fed.neg_test is None:
        raise SystemExit(f"--preset {preset}: not a leave-one-out preset (no validation/test negatives)")
    held = {}
    for s in ("valid", "test"):
        n = np.diff(fed.indptr[s])
        if not (n == 1).all():
            raise SystemExit(f"--preset {preset}: {s} holds {sorted(set(n.tolist()))} items a user, expected 1")
        held[s] = fed.indices[s].astype(np.int64)
    n_tr = np.diff(fed.indptr["train"])
    return {"train_u": np.repeat(np.arange(fed.n_users, dtype=np.int64), n_tr),
            "train_i": fed.indices["train"].astype(np.int64),
            "val_i": held["valid"], "test_i": held["test"],
            "val_neg": np.asarray(fed.neg_valid, np.int64), "test_neg": np.asarray(fed.neg_test, np.int64),
            "n_users": int(fed.n_users), "n_items": int(fed.n_items)}


def uf_metrics(pos_score, neg_scores, k: int = 10) -> tuple[float, float]:
    """UFGraphFR's ``metrics.py``: rank = 1 + #(negatives scoring ≥ the positive); HR@k, NDCG@k."""
    pos = np.asarray(pos_score, np.float64)[:, None]
    rank = 1 + (np.asarray(neg_scores, np.float64) >= pos).sum(1)
    hit = rank <= k
    return float(hit.mean()), float(np.where(hit, np.log(2) / np.log(1 + rank), 0.0).mean())


def fast_forward(self, user_id, item_id):
    """``MetaMF.forward`` generating only the picked item's row of the item table."""
    import torch
    import torch.nn.functional as F
    mr = self.metarecommender
    cf_vec = torch.matmul(mr.user_embedding(user_id), mr.memory)
    w0, b0 = mr.get_one_layer(mr.hidden_layer_1, mr.weight_layer_1, mr.bias_layer_1, cf_vec,
                              mr.item_emb_size, int(mr.item_emb_size / 4))
    w1, b1 = mr.get_one_layer(mr.hidden_layer_2, mr.weight_layer_2, mr.bias_layer_2, cf_vec,
                              int(mr.item_emb_size / 4), 1)
    hid = F.relu(mr.hidden_layer_3(cf_vec))
    W = mr.emb_layer_1.weight.view(mr.item_num, mr.item_mem_num, -1)[item_id]        # B × k × 512
    bias = mr.emb_layer_1.bias.view(mr.item_num, mr.item_mem_num)[item_id]           # B × k
    left = torch.einsum("bh,bkh->bk", hid, W) + bias
    right = mr.emb_layer_2(hid).view(-1, mr.item_mem_num, mr.item_emb_size)          # B × k × d
    item_emb = torch.matmul(left.unsqueeze(1), right)                               # B × 1 × d
    out = F.relu(torch.matmul(item_emb, w0) + b0)
    return torch.squeeze(torch.matmul(out, w1) + b1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metamf-dir", required=True, type=Path)
    ap.add_argument("--ufgraphfr-dir", type=Path, help="UFGraphFR's checkout: its ML-100K split (data/100k)")
    ap.add_argument("--preset", help="instead of --ufgraphfr-dir: a Corolla leave-one-out preset's split")
    ap.add_argument("--data-dir", help="with --preset: the data directory (default: $COROLLA_DATA)")
    ap.add_argument("--eval-users", type=int, default=0,
                    help="score this many users' candidates at once (0 = all; the same scores, less memory)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--neg", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--full-forward", action="store_true", help="the code's forward (the whole item table)")
    ap.add_argument("--max-batches", type=int, default=0, help="stop each epoch after this many batches (a smoke run; 0 = all)")
    ap.add_argument("--json", required=True, type=Path)
    args = ap.parse_args(argv)
    if (args.ufgraphfr_dir is None) == (args.preset is None):
        ap.error("give one of --ufgraphfr-dir (UFGraphFR's ML-100K split) and --preset (a Corolla preset's split)")
    need = [("--metamf-dir", args.metamf_dir, "MetaMF.py")]
    if args.ufgraphfr_dir is not None:
        need += [("--ufgraphfr-dir", args.ufgraphfr_dir, "data.py"),
                 ("--ufgraphfr-dir", args.ufgraphfr_dir, "data/100k/ratings.dat")]
    for name, d, f in need:
        if not (d / f).is_file():
            ap.error(f"{name} {d}: no {f} there (expected a checkout of the authors' repository)")
    if args.epochs < 1 or args.neg < 1 or args.eval_users < 0:
        ap.error(f"--epochs {args.epochs}, --neg {args.neg}, --eval-users {args.eval_users}: "
                 "at least 1, 1 and 0")
    import torch
    from torch import nn
    torch.set_num_threads(args.threads)
    d = uf_split(args.ufgraphfr_dir) if args.preset is None else preset_split(args.preset, args.data_dir)
    sys.path.insert(0, str(args.metamf_dir))
    from MetaMF import MetaMF  # the authors' file, unchanged
    if not args.full_forward:
        MetaMF.forward = fast_forward
    random.seed(1); np.random.seed(1); torch.manual_seed(1)                          # Run.ipynb cell 1
    U, I = int(d["n_users"]), int(d["n_items"])
    inter = [set() for _ in range(U)]
    for u, i in zip(d["train_u"], d["train_i"]):
        inter[u].add(int(i))
    for u in range(U):
        inter[u] |= {int(d["val_i"][u]), int(d["test_i"][u])}
    pools = [np.array(sorted(set(range(I)) - inter[u]), np.int64) for u in range(U)]

    def weights_init(m):                                                            # Run.ipynb cell 11
        if m.__class__.__name__.find("Linear") != -1:
            nn.init.xavier_normal_(m.weight.data)
            nn.init.constant_(m.bias.data, 0)

    net = MetaMF(U, I)                                                               # the code's defaults
    net.apply(weights_init)
    opt = torch.optim.Adam(net.parameters(), lr=0.0001, weight_decay=0.001, fused=True)
    batch = 64
    g = np.random.default_rng(1)

    def epoch_rows():
        us, its, ys = [d["train_u"]], [d["train_i"]], [np.ones(len(d["train_u"]), np.float32)]
        for u in range(U):
            n = int((d["train_u"] == u).sum())
            if n:
                neg = np.concatenate([g.choice(pools[u], args.neg, replace=False) for _ in range(n)])
                us.append(np.full(len(neg), u)); its.append(neg); ys.append(np.zeros(len(neg), np.float32))
        rows = list(zip(np.concatenate(us).tolist(), np.concatenate(its).tolist(), np.concatenate(ys).tolist()))
        random.shuffle(rows)                                                         # getbatches(shuffle=True)
        return rows

    @torch.no_grad()
    def evaluate():
        net.eval()
        res = []
        for held, negs in ((d["val_i"], d["val_neg"]), (d["test_i"], d["test_neg"])):
            cand = np.c_[negs, held]                                                 # held-out item last
            step = args.eval_users or U
            s = np.concatenate([net(torch.as_tensor(np.repeat(np.arange(a, min(a + step, U)), cand.shape[1])),
                                    torch.as_tensor(cand[a:a + step].reshape(-1))).view(-1, cand.shape[1]).numpy()
                                for a in range(0, U, step)])
            res.append(uf_metrics(s[:, -1], s[:, :-1]))
        net.train()
        return res

    log = {"val": [], "test": [], "loss": [], "epoch_time": [], "neg": args.neg, "fast_forward": not args.full_forward,
           "max_batches": args.max_batches,
           "command": "python benchmarks/metamf_authors_loo.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    best = {"val_hr": -1.0}
    for epoch in range(args.epochs):
        t0 = time.time()
        net.train()
        rows = epoch_rows()
        err, num = 0.0, 0
        for n, k in enumerate(range(0, len(rows), batch)):
            if args.max_batches and n == args.max_batches:
                break
            b = rows[k:k + batch]
            users = torch.tensor([r[0] for r in b]); items = torch.tensor([r[1] for r in b])
            y = torch.tensor([r[2] for r in b])
            opt.zero_grad()
            loss = net.loss(net(users, items), y)
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 5)
            opt.step()
            err += float(loss.detach()) * len(b); num += len(b)
        v, t = evaluate()
        log["val"].append(v); log["test"].append(t); log["loss"].append(err / num); log["epoch_time"].append(time.time() - t0)
        if v[0] >= best["val_hr"]:
            best = {"val_hr": v[0], "val_ndcg": v[1], "test_hr": t[0], "test_ndcg": t[1], "epoch": epoch + 1}
        out = {"metrics": {"hr@10": best["test_hr"], "ndcg@10": best["test_ndcg"]}, "best": best, **log}
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        os.replace(tmp, args.json)                                                   # an epoch's record is never half-written
        print(f"epoch {epoch + 1} loss {err / num:.4f} val {v[0]:.4f}/{v[1]:.4f} test {t[0]:.4f}/{t[1]:.4f} "
              f"{time.time() - t0:.0f}s", flush=True)
    print("BEST", json.dumps(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
