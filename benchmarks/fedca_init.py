"""FedCA from a given initial model, in either implementation: does a run's result belong to its
initial tables or to the implementation?

On FedCA's harness every client starts from one shared item table and one shared user vector
(the code's ``train.py:90`` table and its template model's user vector; Corolla's ``shared_init``
and ``user-init = shared``), so a run's initial model is one random draw. Three commands:

* ``export``: Corolla's seed-S initial tables of a FedCA preset, rows in the FedCA code's item
  order, for the code's ``FEDCA_INIT`` patch (``benchmarks/fedca_authors.md``, "Initial tables");
* ``run``: ``corolla run`` (in process) with every one-user client starting from given initial
  tables (``--init``: an ``.npz`` with ``item`` rows in the FedCA code's item order and ``user``, as
  the code's ``FEDCA_SAVE_INIT`` patch writes them) instead of the seeded draw; everything else
  (negatives, order, aggregation draws) is the preset's. ``--dump-ranks FILE`` appends, for every
  evaluation, each evaluated user's test item, hit and NDCG@10 (ties against the positive where
  the preset counts them so); any one-user method whose client calls ``evaluate_stacked``;
* ``groups``: test HR@10 (and NDCG@10 where our dump has it) per dumped round, split into the users
  whose test item is the most common one and the rest, and the whole as it would be with that item's
  users all missing, from a ``--dump-ranks`` file or the code's ``FEDCA_DUMP`` directory.

The FedCA code's item ids (``utils.py`` ``loadData``): ratings > 0, users with at least 10 of
them, then each item's first appearance in the file (:func:`code_item_order`). Corolla's dense
ids are the kept raw ids in ascending order; the two are mapped by raw id.

Usage (``docs/results.md``, "FedCA on FilmTrust")::

    python benchmarks/fedca_init.py export --data-dir $COROLLA_DATA --preset fedca-pmf-filmtrust --seed 0 init-s0.npz
    python benchmarks/fedca_init.py run --data-dir $COROLLA_DATA --init theirs-s0.npz -- \\
        --preset fedca-pmf-filmtrust --mode inproc --nodes 1 --data-dir $COROLLA_DATA --out runs/X
    python benchmarks/fedca_init.py groups ranks.jsonl     # or the code's dump directory
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def code_item_order(raw_user: np.ndarray, raw_item: np.ndarray, rating: np.ndarray, min_rates: int = 10) -> np.ndarray:
    """The raw item ids in the FedCA code's id order: of the ratings > 0 of users with at least
    ``min_rates`` of them, the items in order of first appearance (file order)."""
    keep = np.asarray(rating) > 0
    u, i = np.asarray(raw_user)[keep], np.asarray(raw_item)[keep]
    users, counts = np.unique(u, return_counts=True)
    keep = np.isin(u, users[counts >= min_rates])
    i = i[keep]
    _, first = np.unique(i, return_index=True)
    return i[np.sort(first)]


def permutation(code_order: np.ndarray, corolla_ids: np.ndarray) -> np.ndarray:
    """``perm[j]`` = Corolla's dense index of the code's item ``j``; a clear error when the two
    id sets differ."""
    code_order, corolla_ids = np.asarray(code_order), np.asarray(corolla_ids)
    if len(code_order) != len(corolla_ids) or not np.array_equal(np.sort(code_order), np.sort(corolla_ids)):
        raise SystemExit(f"the FedCA code's items ({len(code_order)}) and the run's ({len(corolla_ids)}) differ: "
                         "expected the same raw item ids (same dataset file and filter)")
    return np.searchsorted(corolla_ids, code_order)


def _interactions(cfg, data_dir):
    from corolla.data import loaders
    from corolla.data.federation import filter_and_check

    raw = loaders.load(cfg, data_dir)
    kept = filter_and_check(raw, cfg)
    order = code_item_order(raw.user_ids[raw.user], raw.item_ids[raw.item], raw.rating)
    return permutation(order, np.asarray(kept.item_ids)), kept.n_items


def _load_init(path: str, n_items: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        z = np.load(path)
        item, user = np.asarray(z["item"], np.float32), np.asarray(z["user"], np.float32).reshape(1, -1)
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"--init {path}: expected an .npz with 'item' (items x dim) and 'user' (1 x dim) ({e!r})") from None
    if item.shape != (n_items, dim) or user.shape != (1, dim):
        raise SystemExit(f"--init {path}: expected 'item' {n_items} x {dim} and 'user' 1 x {dim}, "
                         f"got {item.shape} and {user.shape}")
    return item, user


def _check_shared(cfg) -> None:
    """The initial model is one item table and one user vector only on the one-user harness with a shared user vector."""
    if cfg.get("harness") != "one-user" or cfg.get("user-init") != "shared":
        raise SystemExit(f"--preset: expected a one-user-harness preset with user-init = shared, got "
                         f"harness={cfg.get('harness')!r}, user-init={cfg.get('user-init')!r}")


def export(args) -> int:
    from corolla.config import resolve
    from corolla.models.factory import one_user_init, shared_init

    cfg = resolve(args.preset, {"seed": args.seed})
    _check_shared(cfg)
    perm, n_items = _interactions(cfg, args.data_dir)
    item = shared_init(cfg, n_items)["item.weight"]
    np.savez(args.out, item=item[perm].astype(np.float32), user=one_user_init(cfg, 0).astype(np.float32))
    print(f"{args.out}: {args.preset} seed {args.seed}, {n_items} items in the FedCA code's order")
    return 0


def dump_ranks(path: str) -> None:
    """Wrap the one-user evaluation so that every call appends its users' test items, hits and
    NDCG@10 to ``path`` (in every loaded ``client_app`` module that calls it: PMF, NCF, PerFedRec, ...)."""
    import importlib
    import json
    import pkgutil

    import client_app
    import client_app.oneuser as oneuser

    evaluate = oneuser.evaluate_stacked

    def dumping(clients, score):
        out = evaluate(clients, score)
        fed = clients[0].fed
        users = [int(c.users[0]) for c in clients]
        held = [fed.rows("test", u) for u in users]

        def metric(o, name):
            return o.get(f"test/ties:{name}", o.get(f"test/{name}", [None]))[0]

        with open(path, "a") as f:
            f.write(json.dumps({"users": users, "test_item": [int(h[0]) if len(h) else -1 for h in held],
                                "hit": [metric(o, "hr@10") for o in out],
                                "ndcg": [metric(o, "ndcg@10") for o in out]}) + "\n")
        return out

    for m in pkgutil.iter_modules(client_app.__path__):
        mod = importlib.import_module(f"client_app.{m.name}")
        if getattr(mod, "evaluate_stacked", None) is evaluate:
            mod.evaluate_stacked = dumping


def rounds_from_dump(path: Path) -> dict[int, dict[str, dict[int, float]]]:
    """``{round: {"item": {user: test item}, "hit": {user: 0/1}[, "ndcg": {user: NDCG@10}]}}``: from
    our ``--dump-ranks`` file (a line with every user opens a round; a shorter one -- the aggregated
    clients' evaluation with their personalised tables -- amends it) or from the code's
    ``ranks-rN.json`` files."""
    import json

    out: dict[int, dict[str, dict[int, float]]] = {}
    if path.is_dir():
        for f in sorted(path.glob("ranks-r*.json")):
            d = json.loads(f.read_text())
            hits = {int(u) for u in d["hits"]}
            out[int(d["round"])] = {"item": dict(enumerate(d["test_item"])),
                                    "hit": {u: float(u in hits) for u in range(len(d["test_item"]))}}
        return out
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    n = max((len(d["users"]) for d in lines), default=0)
    r = 0
    for d in lines:
        if len(d["users"]) == n:
            r += 1
            out[r] = {"item": dict(zip(d["users"], d["test_item"])), "hit": dict(zip(d["users"], d["hit"]))}
            if "ndcg" in d:
                out[r]["ndcg"] = dict(zip(d["users"], d["ndcg"]))
        elif r:
            out[r]["hit"].update(zip(d["users"], d["hit"]))
            if "ndcg" in d and "ndcg" in out[r]:
                out[r]["ndcg"].update(zip(d["users"], d["ndcg"]))
    return out


def group_split(rnd: dict[str, dict[int, float]], metric: str = "hit") -> tuple[int, int, float, float, float]:
    """(most common test item, its holders, ``metric`` (``hit``: HR@10, ``ndcg``: NDCG@10) averaged
    over the holders, over the rest, over all)."""
    from collections import Counter

    items, val = rnd["item"], rnd[metric]
    top, n = Counter(items.values()).most_common(1)[0]
    g = [val[u] or 0.0 for u in items if items[u] == top]
    o = [val[u] or 0.0 for u in items if items[u] != top]
    return top, n, sum(g) / len(g), (sum(o) / len(o)) if o else float("nan"), (sum(g) + sum(o)) / len(items)


def groups(args) -> int:
    res = rounds_from_dump(Path(args.dump))
    if not res:
        raise SystemExit(f"{args.dump}: expected a --dump-ranks file or a directory of ranks-rN.json files, found no round")
    ndcg = all("ndcg" in r for r in res.values())
    names = ["HR@10"] + (["NDCG@10"] if ndcg else [])
    head = ["round", "most common test item: users"]
    for m in names:
        head += [f"{m} all", f"{m} of its users", f"{m} of the others", f"{m} all, its users missing"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = []
    for r in sorted(res):
        n_all, cells = len(res[r]["item"]), []
        for key in ["hit"] + (["ndcg"] if ndcg else []):
            top, n, vg, vo, tot = group_split(res[r], key)
            cells += [f"{tot:.4f}", f"{vg:.4f}", f"{vo:.4f}", f"{vo * (n_all - n) / n_all:.4f}"]
        cells = [str(r), f"item {top}: {n}", *cells]
        print("| " + " | ".join(cells) + " |")
        rows.append(cells)
    if args.csv:
        import csv
        import io

        from corolla.util import atomic_write_text

        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([head, *rows])
        atomic_write_text(args.csv, buf.getvalue())
    return 0


def run(args) -> int:
    import client_app.pmf as pmf
    from corolla.config import resolve
    from inproc_args import corolla_run_args
    from launcher.cli import main as corolla_main

    rest, preset = corolla_run_args(args.corolla_args, "the clients must run in this process")
    cfg = resolve(preset)
    if args.init:
        _check_shared(cfg)
        perm, n_items = _interactions(cfg, args.data_dir)
        code_item, user = _load_init(args.init, n_items, int(cfg["dim"]))
        item = np.empty_like(code_item)
        item[perm] = code_item

        def init_state(self):
            return {"user.weight": user.copy(), "item.weight": item.copy()}

        pmf.OneUserClient.init_state = init_state   # every one-user client of this process (in-process runs)
    if args.dump_ranks:
        if "--nodes" not in rest or rest[rest.index("--nodes") + 1:rest.index("--nodes") + 2] != ["1"]:
            raise SystemExit("--dump-ranks: expected --nodes 1 after -- (a round's evaluation is then one batch of every user)")
        dump_ranks(args.dump_ranks)
    return corolla_main(["run", *rest])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="Corolla's seeded initial tables in the FedCA code's item order")
    e.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA"))
    e.add_argument("--preset", required=True)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("out")
    r = sub.add_parser("run", help="corolla run from given initial tables (rows in the FedCA code's item order)")
    r.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA"))
    r.add_argument("--init", help="initial tables (.npz: 'item' in the FedCA code's item order, 'user'); default: the preset's seeded draw")
    r.add_argument("--dump-ranks", metavar="FILE", help="append each evaluation's users, test items, hits "
                                                        "and NDCG@10 to FILE")
    r.add_argument("corolla_args", nargs=argparse.REMAINDER)
    g = sub.add_parser("groups", help="test HR@10 (and NDCG@10 where dumped) of the most common test item's users and "
                                      "of the rest, per dumped round")
    g.add_argument("dump", help="a --dump-ranks file or the FedCA code's FEDCA_DUMP directory")
    g.add_argument("--csv", metavar="FILE", help="also write the table to FILE as CSV")
    args = ap.parse_args(argv)
    return {"export": export, "run": run, "groups": groups}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
