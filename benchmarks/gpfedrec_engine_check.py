"""Drive the authors' GPFedRec engine and Corolla's GPFedRec trainer and graph on identical inputs.

Run it with *their* Python (pandas, scikit-learn, tensorboardX and torch, as their ``train.py``
needs) and a GPFedRec checkout (``--authors-dir``, with ``data/100k/ratings.dat``). Both sides get
the same initial model (the authors' ``MLP`` under ``torch.manual_seed(--seed)``), the same
training rows of every round (their ``SampleGenerator.store_all_train_data(4)``) and the same
mini-batch order (a permutation per user and round, instead of their shuffled DataLoader). Their
side is their ``Engine.fed_train_single_batch`` and ``aggregate_clients_params`` (engine.py), our
side ``corolla.models.ufgraphfr.train_stacked`` and ``corolla.graph``. Each round prints the
largest parameter difference over all users, the differences of the global and personalised
tables, and how many links of the user graph differ (their scikit-learn float32 cosine distances
against our float64 ones: links whose distance lies within rounding of the threshold).

``--mode sync`` starts both sides from *their* state every round (one-round differences);
``--mode free`` lets each run on its own state (how far the two drift apart); ``--eval-every N``
then scores both sides' clients with the authors' ``fed_evaluate`` on their test data (HR@10,
NDCG@10). ``--corolla-init SEED`` starts both from Corolla's initial model of that seed
(``corolla.models.ufgraphfr.shared_init``) instead of the authors' ``MLP`` under ``--seed``.

    /tmp/authors/venv/bin/python benchmarks/gpfedrec_engine_check.py --authors-dir /tmp/authors/gp \\
        --rounds 2 --out docs/results/gpfedrec-engine-check.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
A2C = {"embedding_user.weight": "user.weight", "embedding_item.weight": "item.weight",
       "affine_output.weight": "out.weight", "affine_output.bias": "out.bias",
       **{f"fc_layers.{j}.{s}": f"fc.{j}.{s}" for j in range(3) for s in ("weight", "bias")}}
CONFIG = dict(alias="check", clients_sample_ratio=1.0, num_round=100, local_epoch=1, neighborhood_size=0,
              neighborhood_threshold=1.0, mp_layers=1, similarity_metric="cosine", reg=1.0, lr_eta=80,
              batch_size=256, optimizer="sgd", lr=0.1, dataset="100k", num_users=943, num_items=1682,
              latent_dim=32, num_negative=4, layers=[64, 32, 16, 8], l2_regularization=0., dp=0.,
              use_cuda=False, device_id=0, model_dir="")


def enter_checkout(ap: argparse.ArgumentParser, path: str) -> Path:
    """Check that ``path`` is a GPFedRec checkout, put it (and Corolla) on sys.path and cd into it
    (their modules read relative paths)."""
    authors = Path(path).resolve()
    if not (authors / "engine.py").is_file() or not (authors / "data/100k/ratings.dat").is_file():
        ap.error(f"--authors-dir {authors}: expected a GPFedRec checkout with engine.py and data/100k/ratings.dat")
    sys.path[:0] = [str(authors), str(ROOT)]
    os.chdir(authors)
    return authors


def authors_ratings(checkout: Path = Path(".")):
    """Their train.py's ML-100K frame (GPFedRec's and UFGraphFR's, the same code): the checkout's
    CSV, users and items re-indexed in order of appearance."""
    import pandas as pd

    rating = pd.read_csv(Path(checkout) / "data/100k/ratings.dat", sep=",", header=None,
                         names=["uid", "mid", "rating", "timestamp"], engine="python")
    user_id = rating[["uid"]].drop_duplicates().reindex()
    user_id["userId"] = np.arange(len(user_id))
    rating = pd.merge(rating, user_id, on=["uid"], how="left")
    item_id = rating[["mid"]].drop_duplicates()
    item_id["itemId"] = np.arange(len(item_id))
    return pd.merge(rating, item_id, on=["mid"], how="left")[["userId", "itemId", "rating", "timestamp"]]


def load_corolla_init(engine, seed: int) -> None:
    """Replace the model of their ``MLPEngine`` by Corolla's initial GPFedRec model of ``seed``."""
    import torch

    from corolla.models import ufgraphfr as UF

    c2a = {v: k for k, v in A2C.items()}
    start = UF.shared_init("gpfedrec", CONFIG["num_items"], 384, seed)
    engine.model.load_state_dict({c2a[k]: torch.as_tensor(v) for k, v in start.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors-dir", required=True, help="a GPFedRec checkout (engine.py, mlp.py, data.py, utils.py)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="torch seed of the shared initial model")
    ap.add_argument("--mode", choices=("sync", "free"), default="sync")
    ap.add_argument("--corolla-init", type=int, default=None, metavar="SEED",
                    help="start both sides from Corolla's initial model of this seed")
    ap.add_argument("--eval-every", type=int, default=0, help="score both sides every N rounds (0: never)")
    ap.add_argument("--out", default=None, help="write the per-round records as JSON here")
    args = ap.parse_args(argv)
    out_path = Path(args.out).resolve() if args.out else None
    authors = enter_checkout(ap, args.authors_dir)

    import torch
    from data import SampleGenerator           # noqa: E402  (seeds Python's random with 0, as train.py)
    from mlp import MLPEngine                  # noqa: E402
    from utils import construct_user_relation_graph_via_item, select_topk_neighboehood  # noqa: E402

    from corolla import graph as G
    from corolla.models import ufgraphfr as UF
    from corolla.models.stacked import stack, unstack

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    eng = MLPEngine(dict(CONFIG))
    if args.corolla_init is not None:
        load_corolla_init(eng, args.corolla_init)
    scorer = MLPEngine(dict(CONFIG)) if args.eval_every else None   # their evaluation, our parameters
    sg = SampleGenerator(ratings=authors_ratings())
    test_data = sg.test_data
    n_users, n_items = CONFIG["num_users"], CONFIG["num_items"]
    users = list(range(n_users))
    lrs = UF.learning_rates(CONFIG["lr"], float(CONFIG["lr_eta"]), n_items)
    init = {A2C[k]: v.detach().numpy().copy() for k, v in eng.model.state_dict().items()}
    g = np.random.default_rng(args.seed)

    def authors_round(rnd, data, perms):
        """engine.fed_train_a_round, with ``perms`` for the DataLoader's shuffle."""
        sp = eng.server_model_param
        if rnd == 0:
            sp["embedding_item.weight"] = {u: eng.model.state_dict()["embedding_item.weight"].clone() for u in users}
            sp["embedding_item.weight"]["global"] = eng.model.state_dict()["embedding_item.weight"].clone()
        up = {}
        for u in users:
            mc = copy.deepcopy(eng.model)
            if rnd != 0:
                d = copy.deepcopy(eng.model.state_dict())
                d.update({k: v.clone() for k, v in eng.client_model_params.get(u, {}).items()})
                d["embedding_item.weight"] = sp["embedding_item.weight"]["global"].clone()
                mc.load_state_dict(d)
            lr = CONFIG["lr"]
            opts = (torch.optim.SGD([{"params": mc.fc_layers.parameters()}, {"params": mc.affine_output.parameters()}], lr=lr),
                    torch.optim.SGD(mc.embedding_user.parameters(), lr=lr / 1.0 * CONFIG["lr_eta"] - lr),
                    torch.optim.SGD(mc.embedding_item.parameters(), lr=lr * n_items * CONFIG["lr_eta"] - lr))
            its, rts = torch.LongTensor(data[1][u]), torch.FloatTensor(data[2][u])
            mc.train()
            for perm in perms[u]:
                p = torch.as_tensor(perm)
                for a in range(0, len(its), CONFIG["batch_size"]):
                    sel = p[a:a + CONFIG["batch_size"]]
                    mc, _ = eng.fed_train_single_batch(mc, (torch.zeros(len(sel), dtype=torch.long), its[sel], rts[sel]),
                                                       opts, u)
            eng.client_model_params[u] = {k: v.detach().clone() for k, v in mc.state_dict().items()}
            up[u] = {"embedding_item.weight": eng.client_model_params[u]["embedding_item.weight"].clone()}
        eng.aggregate_clients_params(up)
        return up

    ours = {"states": {u: dict(init) for u in users}, "global": None, "personal": {}}

    def ours_round(data, perms):
        starts, targets, samples = [], [], []
        for u in users:
            st = dict(ours["states"][u])
            if ours["global"] is not None:
                st["item.weight"] = ours["global"]
            starts.append(st)
            targets.append(ours["personal"].get(u, init["item.weight"]))
            samples.append({"item": np.asarray(data[1][u], np.int64), "label": np.asarray(data[2][u], np.float32)})
        names, new = list(starts[0]), []
        for a in range(0, n_users, 64):
            part = list(range(a, min(a + 64, n_users)))
            params = stack([starts[b] for b in part], names, "cpu")
            params, _ = UF.train_stacked("gpfedrec", params, None, torch.as_tensor(np.stack([targets[b] for b in part])),
                                         [samples[b] for b in part], [perms[b] for b in part], None,
                                         CONFIG["batch_size"], lrs, CONFIG["reg"], 0.0)
            new += unstack(params)
        ours["states"] = dict(zip(users, new))
        e = np.stack([ours["states"][u]["item.weight"].reshape(-1) for u in users])
        a = G.build_graph(e, "reference", 0, 1.0)
        r = G.propagate(a, e)
        ours["global"] = r.mean(0).reshape(n_items, 32).astype(np.float32)
        ours["personal"] = {u: r[j].reshape(n_items, 32) for j, u in enumerate(users)}
        return a

    records = []
    for rnd in range(args.rounds):
        t0 = time.perf_counter()
        data = sg.store_all_train_data(CONFIG["num_negative"])
        perms = {u: [g.permutation(len(data[1][u]))] for u in users}
        if args.mode == "sync" and rnd > 0:
            sp = eng.server_model_param["embedding_item.weight"]
            ours["states"] = {u: {A2C[k]: v.numpy().copy() for k, v in eng.client_model_params[u].items()} for u in users}
            ours["global"] = sp["global"].numpy().copy()
            ours["personal"] = {u: sp[u].numpy().copy() for u in users}
        a_ours = ours_round(data, perms)
        up = authors_round(rnd, data, perms)
        a_theirs = select_topk_neighboehood(construct_user_relation_graph_via_item(up, n_items, 32, "cosine"), 0, 1.0)
        diff: dict[str, float] = {}
        for u in users:
            for k, v in eng.client_model_params[u].items():
                diff[A2C[k]] = max(diff.get(A2C[k], 0.0), float(np.abs(v.numpy() - ours["states"][u][A2C[k]]).max()))
        sp = eng.server_model_param["embedding_item.weight"]
        rec = {"round": rnd + 1, "max_param_diff": diff,
               "global_diff": float(np.abs(sp["global"].numpy() - ours["global"]).max()),
               "personal_diff": max(float(np.abs(sp[u].numpy() - ours["personal"][u]).max()) for u in users),
               "graph_links_theirs": int((a_theirs > 0).sum()), "graph_links_ours": int((a_ours > 0).sum()),
               "graph_links_differing": int(((a_theirs > 0) != (a_ours > 0)).sum()),
               "users_with_a_differing_link": int(((a_theirs > 0) != (a_ours > 0)).any(1).sum()),
               "s": round(time.perf_counter() - t0, 1)}
        if args.eval_every and (rnd + 1) % args.eval_every == 0:
            c2a = {v: k for k, v in A2C.items()}
            scorer.client_model_params = {u: {c2a[k]: torch.as_tensor(v) for k, v in ours["states"][u].items()}
                                          for u in users}
            hr, nd, _ = eng.fed_evaluate(test_data)
            hr_o, nd_o, _ = scorer.fed_evaluate(test_data)
            rec.update({"test_hr_theirs": hr, "test_ndcg_theirs": nd, "test_hr_ours": hr_o, "test_ndcg_ours": nd_o})
        records.append(rec)
        print(json.dumps(rec), flush=True)
    if out_path is not None:
        out_path.write_text(json.dumps({"mode": args.mode, "seed": args.seed, "corolla_init": args.corolla_init,
                                        "authors_dir": str(authors),
                                        "rounds": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
