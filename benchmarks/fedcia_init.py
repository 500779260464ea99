"""FedCIA's one-user WAA runs from one initial state in both implementations: is a difference
between Corolla's curve and the authors' code's the implementation or the random draws?

On FedCIA's 943-client split (``partition = user``, the silo harness) a run of FedAvg-MF is fixed
by three draws: the item table every client starts from (the code's ``server_model``, loaded by
``client_init``), each client's user vector, and each client's training triples (the code's
``UniformSample``, drawn once; Corolla's ``train-samples = fixed-triples``). With one mini-batch a
round (``batch-size`` 4096 against at most 607 triples a client) nothing else is random. This
script writes Corolla's seed-S draws in the code's order: its client ``i`` is user row ``i`` of the
shipped ``datasets/ml100k_943/i`` and its items are the split's columns, the same indices as
Corolla's ``split = fedcia`` (checked on every client: :func:`check_split`).

``benchmarks/fedcia_authors_from_init.py``, run inside the authors' checkout with their
environment, starts the code's own ``entry.fedavg`` loop from that file; nothing else in their code
changes. Usage (``docs/results.md``, "The authors' FedCIA code, run here")::

    python benchmarks/fedcia_init.py --data-dir $COROLLA_DATA --preset fedavg-mf-ml100k-943 \\
        --seed 43 --check-split /path/to/FedCIA/datasets/ml100k_943 corolla-init-s43.npz
    cd /path/to/FedCIA && OMP_NUM_THREADS=1 python /path/to/benchmarks/fedcia_authors_from_init.py \\
        --config config/corolla/fedmf_943_init43.ini --init /path/to/corolla-init-s43.npz

The ``.npz`` holds ``item`` (items x d), ``user`` (clients x d), ``pos`` / ``neg`` (every client's
triples, concatenated) and ``offsets`` (clients + 1: client ``i``'s triples are
``offsets[i]:offsets[i+1]``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def initial_state(cfg: dict, fed) -> dict[str, np.ndarray]:
    """Every client's initial state as Corolla's FedAvg client draws it, stacked in client order."""
    from client_app.mf import FedAvgClient

    users, pos, neg, offsets, item = [], [], [], [0], None
    for cid, members in enumerate(fed.clients):
        if len(members) != 1:
            raise SystemExit(f"client {cid}: {len(members)} users; expected one user per client (partition = user)")
        st = FedAvgClient(cfg, fed, cid, members, "cpu").init_state()
        if item is None:
            item = st["item.weight"]
        elif not np.array_equal(item, st["item.weight"]):
            raise SystemExit(f"client {cid}: its initial item table differs from client 0's (expected one shared draw)")
        if np.any(st["samples/user"] != 0):
            raise SystemExit(f"client {cid}: a triple for another row than its one user")
        users.append(st["user.weight"][0])
        pos.append(st["samples/pos"])
        neg.append(st["samples/neg"])
        offsets.append(offsets[-1] + len(st["samples/pos"]))
    return {"item": np.asarray(item, np.float32), "user": np.stack(users).astype(np.float32),
            "pos": np.concatenate(pos).astype(np.int64), "neg": np.concatenate(neg).astype(np.int64),
            "offsets": np.asarray(offsets, np.int64)}


def check_split(fed, split_dir: Path) -> None:
    """Client ``i``'s train / valid / test items in the code's ``split_dir/i/*_dataset.npy`` equal
    Corolla's user ``i``'s (a clear error naming the first that does not)."""
    for cid, members in enumerate(fed.clients):
        for part in ("train", "valid", "test"):
            f = split_dir / str(cid) / f"{part}_dataset.npy"
            if not f.is_file():
                raise SystemExit(f"--check-split {split_dir}: no {f} (expected the code's datasets/ml100k_943)")
            theirs = np.flatnonzero(np.load(f)[0] > 0)
            ours = np.sort(fed.rows(part, int(members[0])))
            if not np.array_equal(theirs, ours):
                raise SystemExit(f"client {cid}, {part}: the code has {len(theirs)} items, Corolla {len(ours)}; "
                                 "expected the same split")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="fedavg-mf-ml100k-943")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--check-split", type=Path, default=None,
                    help="the code's datasets/ml100k_943: check that every client's items are Corolla's")
    ap.add_argument("out")
    a = ap.parse_args(argv)
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve(a.preset, {"seed": a.seed})
    if cfg["model"] != "mf" or cfg["partition"] != "user" or cfg["train-samples"] != "fixed-triples":
        raise SystemExit(f"--preset {a.preset}: expected model mf, partition user, train-samples fixed-triples; got "
                         f"{cfg['model']}, {cfg['partition']}, {cfg['train-samples']}")
    fed = build_federation(cfg, a.data_dir)
    if a.check_split is not None:
        check_split(fed, a.check_split)
    st = initial_state(cfg, fed)
    np.savez(a.out, **st)
    print(f"{a.out}: {a.preset} seed {a.seed}: {len(st['user'])} clients, {len(st['pos'])} triples, "
          f"item table {st['item'].shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
