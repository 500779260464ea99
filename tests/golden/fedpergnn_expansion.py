"""Run the authors' FedPerGNN history and graph expansion unchanged on a tiny matrix and write what
``tests/test_fedpergnn.py`` compares Corolla's matching party with: ``fedpergnn_expansion.json``.

The code: wuch15/FedPerGNN@9e77e2ec6d458bfe539c8db1d00b47eb77db080e, ``const.py``, ``encrypt.py``,
``preprocess.py`` (``generate_history``, l.5-17) and ``expansion.py``
(``graph_embedding_expansion``, l.6-63), imported as they are (they need numpy, tqdm and
pycryptodome). The expansion returns, per user, a HIS_LEN × NEIGHBOR_LEN × HIDDEN tensor of
neighbour user embeddings in a random order; user u's embedding here is (u + 1, 0, …, 0), so
each slot's neighbours are read back as user ids and stored as sorted lists (every list is shorter
than NEIGHBOR_LEN = 100, so nothing is cut and the sets are exact). Python's ``random`` is seeded,
so the histories' shuffles are reproducible.

    python tests/golden/fedpergnn_expansion.py SRC_DIR tests/golden/fedpergnn_expansion.json

SRC_DIR holds the code's files (e.g. ``git --git-dir=<mirror> archive 9e77e2e | tar -x -C SRC_DIR``).
"""
import json
import os
import random
import sys
import tempfile

import numpy as np

# 6 users x 8 items; user 5 shares no item with anyone, item 7 is held by nobody
OTRAINING = [
    [1, 1, 0, 1, 0, 0, 0, 0],
    [1, 0, 1, 1, 0, 0, 0, 0],
    [0, 1, 1, 0, 1, 0, 0, 0],
    [1, 1, 1, 1, 1, 0, 0, 0],
    [0, 0, 0, 0, 1, 0, 0, 0],
    [0, 0, 0, 0, 0, 1, 1, 0],
]


def main(src: str, dst: str) -> None:
    sys.path.insert(0, os.path.abspath(src))
    import const
    from encrypt import generate_key
    from expansion import graph_embedding_expansion
    from preprocess import generate_history

    random.seed(0)
    otr = np.array(OTRAINING, np.float32)
    n_users, n_items = otr.shape
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)                               # the code writes its RSA key pair to the cwd
        try:
            generate_key()
            hist = generate_history(otr)
            embs = np.zeros((n_users + 3, const.HIDDEN), np.float32)
            embs[:, 0] = np.arange(1, n_users + 4)
            out = graph_embedding_expansion(otr, hist, embs)
        finally:
            os.chdir(cwd)
    pad = n_items + 2
    history = [[int(j) for j in row if j != pad] for row in hist]
    neighbours = []
    for u in range(n_users):
        slots = []
        for h in range(len(history[u])):
            ids = sorted(int(v[0]) - 1 for v in out[u, h] if np.any(v != 0))
            slots.append(ids)
        neighbours.append(slots)
    doc = {"source": "wuch15/FedPerGNN@9e77e2ec6d458bfe539c8db1d00b47eb77db080e generate_history + "
                     "graph_embedding_expansion, run by tests/golden/fedpergnn_expansion.py",
           "his_len": int(const.HIS_LEN), "neighbor_len": int(const.NEIGHBOR_LEN), "hidden": int(const.HIDDEN),
           "otraining": OTRAINING, "history": history, "neighbours": neighbours,
           "shape": list(out.shape)}
    with open(dst, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
