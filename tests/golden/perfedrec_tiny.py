"""Slim the dump of the authors' PerFedRec run on a tiny case into ``perfedrec_tiny.npz``, which
``tests/test_perfedrec.py`` replays against Corolla's PerFedRec server rules.

The dump: sichunluo/PerFedRec@4d0c8f030b0ea639a90889d8d7b42d5a321e2878 (``PerFedRec/``) with
``perfedrec_tiny.patch`` (CPU device, seeding, clients per round and K from the environment, and
lines that only record each round: participants, incoming labels, uploads after the noise, the
global and cluster models, outgoing labels, next participants), run on the first 40 users of
ML-100K (each user's latest interaction the test item; 1,038 items), 16 clients per round, K = 3,
4 rounds, seed 0::

    OMP_NUM_THREADS=1 PFR_SEED=0 PFR_CLIENTS=16 PFR_K=3 python -W ignore PerFedRec.py --dataset tiny --epoch 4

(the run ends with the code's own IndexError in its final summary, which needs 50 rounds). The
dump holds 1,038 × 64 item tables per upload (21 MB); the rules are row-wise, so the npz keeps
the first ``ROWS`` item rows of every table, the participants' own user rows of their uploads and
the whole 40 × 64 global user table (the K-means input).

    python tests/golden/perfedrec_tiny.py tiny_dump.pt tests/golden/perfedrec_tiny.npz
"""
import sys

import numpy as np
import torch

ROWS = 12
U, I = "embedding_dict.user_emb", "embedding_dict.item_emb"


def main(src: str, dst: str) -> None:
    dump = torch.load(src, weights_only=False)
    out = {"k": np.int64(3), "clients": np.int64(16), "rounds": np.int64(len(dump))}
    for r in dump:
        e = r["epoch"]
        part = np.asarray(r["participants"], np.int64)
        out[f"r{e}.participants"] = part
        if r["labels_in"] is not None:
            out[f"r{e}.labels_in"] = np.asarray(r["labels_in"], np.int64)
        out[f"r{e}.labels_out"] = np.asarray(r["labels_out"], np.int64)
        out[f"r{e}.next"] = np.asarray(r["next_participants"], np.int64)
        out[f"r{e}.upload_items"] = np.stack([u[I][:ROWS].numpy() for u in r["uploads"]])
        out[f"r{e}.upload_user_rows"] = np.stack([u[U][c].numpy() for u, c in zip(r["uploads"], part)])
        out[f"r{e}.global_items"] = r["global_after"][I][:ROWS].numpy()
        out[f"r{e}.global_users"] = r["global_after"][U].numpy()
        if r["clusters_after"] is not None:
            out[f"r{e}.cluster_items"] = np.stack([c[I][:ROWS].numpy() for c in r["clusters_after"]])
    np.savez_compressed(dst, **out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
