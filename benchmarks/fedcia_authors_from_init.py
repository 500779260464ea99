"""The authors' FedCIA FedAvg loop (``entry.fedavg``, ``flalgorithm/fedavg.py``) from a given initial
state: the item table, every client's user vector and every client's training triples of an
``.npz`` written by ``benchmarks/fedcia_init.py``. Their code is imported unchanged; after it has
built its clients (and drawn its own state), this script writes the given state over the draws
and calls its ``fit``. Run it from the root of the authors' checkout, with their environment
(``benchmarks/fedcia_authors.md``); it imports nothing of Corolla's::

    cd FedCIA && OMP_NUM_THREADS=1 python /path/to/benchmarks/fedcia_authors_from_init.py \\
        --config config/corolla/fedmf_943_init43.ini --init /path/to/corolla-init-s43.npz

The log goes where the code's own runs write theirs (``log/<name>/<output>/output.log``), and
``benchmarks/fedcia_authors_log.py`` turns it into a result file.
"""

from __future__ import annotations

import argparse
import configparser
import os
import sys

import numpy as np


def overwrite(fed, z) -> None:
    """Write the state of ``z`` over the draws of the code's ``Fedavg`` object ``fed``."""
    import torch

    item, user, pos, neg, off = (np.asarray(z[k]) for k in ("item", "user", "pos", "neg", "offsets"))
    n = fed.client_num
    if user.shape[0] != n or len(off) != n + 1:
        raise SystemExit(f"--init: {user.shape[0]} clients' user vectors and {len(off) - 1} triple ranges; "
                         f"the config has client_num = {n}")
    w = fed.server_model.embedding_item.weight
    if tuple(item.shape) != tuple(w.shape):
        raise SystemExit(f"--init: item table {item.shape}, the code's model has {tuple(w.shape)}")
    with torch.no_grad():
        w.copy_(torch.from_numpy(item))
        for i in range(n):
            fed.client_model[i].embedding_user.weight.copy_(torch.from_numpy(user[i:i + 1]))
            p, q = pos[off[i]:off[i + 1]], neg[off[i]:off[i + 1]]
            if len(p) != fed.dataset_list[i].trainnum:
                raise SystemExit(f"--init: client {i} has {len(p)} triples, its split {fed.dataset_list[i].trainnum} "
                                 "training interactions")
            fed.dataset_list[i].S = torch.from_numpy(np.stack([np.zeros_like(p), p, q], 1)).long()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--init", required=True)
    a = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    if not os.path.isfile(os.path.join("flalgorithm", "fedavg.py")):
        raise SystemExit("run from the root of the authors' FedCIA checkout (no flalgorithm/fedavg.py here)")
    from flalgorithm.fedavg import Fedavg  # the authors' code

    config = configparser.ConfigParser()
    if not config.read(a.config):
        raise SystemExit(f"--config {a.config}: not readable")
    fed = Fedavg(config)
    overwrite(fed, np.load(a.init))
    fed.logger.info(f"initial state from {a.init}")
    fed.fit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
