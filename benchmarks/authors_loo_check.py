"""Check that our leave-one-out data equals the one-user codes' (GPFedRec / PFedRec / UFGraphFR).

Runs the authors' ``data.py`` (``SampleGenerator`` on ``--authors-ratings``) in *their* Python
environment, maps its re-indexed users and items back to raw MovieLens ids, and compares, user by
user, the validation and test items and the 99 + 99 evaluation negatives with
``corolla.data.federation.build_federation`` under the given ``--set`` options. Prints and
optionally writes (``--out``) the counts of users that differ.

    python benchmarks/authors_loo_check.py --authors-dir /tmp/authors/gp \\
        --authors-python /tmp/authors/venv/bin/python --data-dir $COROLLA_DATA \\
        --set ml100k-file=gpfedrec-csv --set eval-neg-sampler=python-random
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

AUTHORS_SNIPPET = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, pandas as pd
from data import SampleGenerator   # seeds Python's random with 0 at import, as train.py does
rating = pd.read_csv(sys.argv[1] + '/' + sys.argv[2], sep=',', header=None,
                     names=['uid', 'mid', 'rating', 'timestamp'], engine='python')
user_id = rating[['uid']].drop_duplicates().reindex(); user_id['userId'] = np.arange(len(user_id))
rating = pd.merge(rating, user_id, on=['uid'], how='left')
item_id = rating[['mid']].drop_duplicates(); item_id['itemId'] = np.arange(len(item_id))
rating = pd.merge(rating, item_id, on=['mid'], how='left')
uid = dict(zip(user_id.userId, user_id.uid)); mid = dict(zip(item_id.itemId, item_id.mid))
rating = rating[['userId', 'itemId', 'rating', 'timestamp']]
sg = SampleGenerator(ratings=rating)
out = {}
for name, data in (('valid', sg.validate_data), ('test', sg.test_data)):
    users, items, nusers, nitems = (t.tolist() for t in data)
    out[name] = {str(uid[u]): [int(mid[i])] for u, i in zip(users, items)}
    for u, i in zip(nusers, nitems):
        out[name][str(uid[u])].append(int(mid[i]))
print(json.dumps(out))
"""


def main(argv=None) -> int:
    from corolla.config import parse_overrides, resolve
    from corolla.data.federation import build_federation

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors-dir", required=True, help="a checkout of GPFedRec, PFedRec or UFGraphFR")
    ap.add_argument("--authors-python", required=True, help="a Python with pandas and torch for their data.py")
    ap.add_argument("--authors-ratings", default="data/100k/ratings.dat",
                    help="the ratings file inside --authors-dir (PFedRec: data/ml-100k/ratings.dat)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--preset", default="gpfedrec-ml100k")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    res = subprocess.run([a.authors_python, "-c", AUTHORS_SNIPPET, str(Path(a.authors_dir).resolve()),
                          a.authors_ratings],
                         capture_output=True, text=True, cwd=a.authors_dir)
    if res.returncode != 0:
        raise SystemExit(f"the authors' data.py failed:\n{res.stderr[-2000:]}")
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    overrides = parse_overrides(a.set)
    cfg = resolve(a.preset, overrides)
    fed = build_federation(cfg, a.data_dir, use_cache=False)
    raw_item = np.arange(1, fed.n_items + 1)          # ML-100K: dense item k is movie k + 1
    report = {"preset": a.preset, "set": overrides, "users": fed.n_users}
    for split, neg in (("valid", fed.neg_valid), ("test", fed.neg_test)):
        ptr, idx = fed.indptr[split], fed.indices[split]
        item_diff = neg_diff = 0
        for u in range(fed.n_users):
            t = theirs[split][str(int(fed.user_ids[u]))]
            item_diff += [int(raw_item[i]) for i in idx[ptr[u]:ptr[u + 1]]] != t[:1]
            neg_diff += [int(x) for x in raw_item[neg[u]]] != t[1:]
        report[f"{split}_items_differ"] = item_diff
        report[f"{split}_negatives_differ"] = neg_diff
    print(json.dumps(report))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
