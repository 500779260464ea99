"""Write UFGraphFR's Lastfm-2K files for the authors' code (``benchmarks/ufgraphfr_authors.md``).

Their repository ships ``data/lastfm-2k/user.dat`` but not ``ratings.dat`` (a large blob that a
plain clone of the history does not carry here). This writes both into an authors' checkout from
the HetRec 2011 data, as Corolla's ``lastfm-2k-tagged`` preset reads it:

* ``ratings.dat``: ``uid,mid,rating,timestamp``, one row per tag assignment of the users with at
  least 5 rows (UFGraphFR's Table 3: 185,650 rows, 1,600 users, 12,454 items), in the HetRec file's
  order, raw ids, rating 1, timestamp the row's date ``yyyymmdd`` (the authors' millisecond
  timestamps file is not in the offline data; their ``rank(method='first')`` then takes among a
  user's rows of the latest date the first in the file, as Corolla's split does);
* ``user.dat``: the authors' file, rebuilt byte for byte
  (:func:`corolla.data.loaders.load_lastfm_tagged_user_file`; it checks the git blob id).

Usage::

    python benchmarks/ufgraphfr_authors_lastfm_data.py --data-dir $COROLLA_DATA --out UFGraphFR/data/lastfm-2k
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import numpy as np

from corolla.data.loaders import load_lastfm_tagged, load_lastfm_tagged_user_file
from corolla.data.splits import filter_interactions

USER_DAT_BLOB = "5b2ef274f35561d149d41c4f2675d40e9a6c750f"   # UF 853ca8a data/lastfm-2k/user.dat


def ratings_lines(data_dir) -> list[str]:
    kept = filter_interactions(load_lastfm_tagged(data_dir), 0.0, 5)   # min-user-interactions = 5, file order kept
    uid, iid = np.asarray(kept.user_ids)[kept.user], np.asarray(kept.item_ids)[kept.item]
    return [f"{u},{i},1,{t}" for u, i, t in zip(uid.tolist(), iid.tolist(), kept.ts.tolist())]


def user_dat_bytes(data_dir) -> bytes:
    f = load_lastfm_tagged_user_file(data_dir)
    body = ("\n".join(f"{u},{t}" for u, t in zip(f.ids.tolist(), f.columns["tag"].tolist())) + "\n").encode()
    blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
    if blob != USER_DAT_BLOB:
        raise SystemExit(f"user.dat rebuilt with git blob {blob}, expected the authors' {USER_DAT_BLOB}: "
                         "the HetRec file is not the one the authors used")
    return body


def write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA"),
                    help="folder holding hetrec2011-lastfm-2k/ (default $COROLLA_DATA)")
    ap.add_argument("--out", required=True, type=Path, help="the checkout's data/lastfm-2k folder")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    user_dat = user_dat_bytes(a.data_dir)      # checked first: nothing is written for another HetRec file
    lines = ratings_lines(a.data_dir)
    write(a.out / "ratings.dat", ("\n".join(lines) + "\n").encode())
    write(a.out / "user.dat", user_dat)
    print(f"{a.out}: ratings.dat {len(lines)} rows, user.dat (git blob {USER_DAT_BLOB[:7]})")


if __name__ == "__main__":
    main()
