"""The authors' GPFedRec code, unchanged except for its initial model: Corolla's of a given seed.

Their engine (``fed_train_a_round``, ``fed_evaluate``), their data (``SampleGenerator``, Python's
``random.seed(0)`` negatives, the shuffled DataLoader) and their 100 rounds, with ``MLPEngine``'s
model replaced by ``corolla.models.ufgraphfr.shared_init('gpfedrec', …, SEED)`` before round 1.
Prints one ``ROUND {json}`` line per round, the format ``benchmarks/authors_log.py`` converts.
It answers whether a seed's result belongs to its initial model or to our implementation: run
with *their* Python (pandas, scikit-learn, tensorboardX, torch) and a GPFedRec checkout.

    OMP_NUM_THREADS=1 /tmp/authors/venv/bin/python -u benchmarks/gpfedrec_authors_from_init.py \\
        --authors-dir /tmp/authors/gp --init-seed 3 > gp-init3.log
    python benchmarks/authors_log.py gp-init3.log docs/results/gpfedrec-authors-ml100k+corolla-init=3.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpfedrec_engine_check import CONFIG, authors_ratings, enter_checkout, load_corolla_init  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors-dir", required=True, help="a GPFedRec checkout (engine.py, mlp.py, data.py, utils.py)")
    ap.add_argument("--init-seed", type=int, required=True, help="Corolla's seed whose initial model to start from")
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args(argv)
    enter_checkout(ap, args.authors_dir)

    import torch
    from data import SampleGenerator   # noqa: E402  (seeds Python's random with 0, as train.py)
    from mlp import MLPEngine          # noqa: E402

    torch.set_num_threads(1)
    eng = MLPEngine(dict(CONFIG, num_round=args.rounds))
    load_corolla_init(eng, args.init_seed)
    sg = SampleGenerator(ratings=authors_ratings())
    val, test = sg.validate_data, sg.test_data
    for rnd in range(args.rounds):
        t0 = time.perf_counter()
        eng.fed_train_a_round(sg.store_all_train_data(CONFIG["num_negative"]), round_id=rnd)
        hr, nd, _ = eng.fed_evaluate(test)
        vhr, vnd, _ = eng.fed_evaluate(val)
        print("ROUND " + json.dumps({"round": rnd + 1, "test_hr": hr, "test_ndcg": nd, "val_hr": vhr, "val_ndcg": vnd,
                                     "round_s": time.perf_counter() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
