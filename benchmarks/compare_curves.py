"""Round-by-round comparison of one of our runs with a reference run's per-round log.

Our run: a run directory (``rounds.jsonl``; the paper-compatible ``compat`` metrics for test and
``valid_compat`` for validation). The reference: a JSON object whose ``rounds`` list holds
``{"round", "test_hr", "test_ndcg", "val_hr", "val_ndcg", "round_s"}`` (what
``benchmarks/fedca_authors.md`` has the authors' FedCA code write; a log whose rounds carry
``client_server_s`` and no ``round_s`` -- the FedCA patch without its ``engine.py`` timing part --
has that time taken as the round's).

Prints, for both, the FedCA code's reported number (the round with the best test HR, ``>=``:
later rounds win ties), the validation-selected test numbers (best valid HR, first round wins;
``valid_selected_last``: later rounds win, the UFGraphFR and GPFedRec code's rule), and the mean
absolute test-HR gap over the rounds they share; ``--csv`` writes every shared round.

Usage::

    python benchmarks/compare_curves.py RUN_DIR REFERENCE.json [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path


def ours(run_dir: Path) -> dict[int, dict[str, float]]:
    out = {}
    for line in (run_dir / "rounds.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "compat" not in r or "valid_compat" not in r:
            continue
        out[int(r["round"])] = {"test_hr": r["compat"]["hr@10"], "test_ndcg": r["compat"]["ndcg@10"],
                                "val_hr": r["valid_compat"]["hr@10"], "val_ndcg": r["valid_compat"]["ndcg@10"],
                                "round_s": r["wall_s"]}
    if not out:
        raise SystemExit(f"{run_dir}: no evaluated round with paper-compatible metrics in rounds.jsonl")
    return out


CURVE_KEYS = ("test_hr", "test_ndcg", "val_hr", "val_ndcg", "round_s")
ROUND_TIME_ALIAS = "client_server_s"   # the FedCA patch's round time where round_s is not written


def reference(path: Path, keys: tuple[str, ...] = CURVE_KEYS) -> dict[int, dict[str, float]]:
    """``{round: {key: value}}`` from a reference run's JSON log; a clear error names what is missing."""
    try:
        data = json.loads(path.read_text())
        return {int(r["round"]): {k: float(r[ROUND_TIME_ALIAS if k == "round_s" and k not in r and ROUND_TIME_ALIAS in r
                                          else k]) for k in keys} for r in data["rounds"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: expected a JSON object with a 'rounds' list of objects with "
                         f"'round' and {', '.join(keys)} ({e!r})") from None


def select(curve: dict[int, dict[str, float]], rounds: list[int]) -> dict[str, object]:
    """The code's selection (best test HR, later rounds win ties) and the validation one."""
    best_test = max(rounds, key=lambda r: (curve[r]["test_hr"], r))
    best_val = max(rounds, key=lambda r: (curve[r]["val_hr"], -r))
    best_val_last = max(rounds, key=lambda r: (curve[r]["val_hr"], r))   # UFGraphFR's/GPFedRec's code: >=
    return {"paper_compat": {"round": best_test, "hr": curve[best_test]["test_hr"],
                             "ndcg": curve[best_test]["test_ndcg"]},
            "valid_selected": {"round": best_val, "hr": curve[best_val]["test_hr"],
                               "ndcg": curve[best_val]["test_ndcg"]},
            "valid_selected_last": {"round": best_val_last, "hr": curve[best_val_last]["test_hr"],
                                    "ndcg": curve[best_val_last]["test_ndcg"],
                                    "val_hr": curve[best_val_last]["val_hr"],
                                    "val_ndcg": curve[best_val_last]["val_ndcg"]},
            "median_round_s": statistics.median(curve[r]["round_s"] for r in rounds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("reference")
    ap.add_argument("--csv", help="write every shared round here")
    args = ap.parse_args()
    a, b = ours(Path(args.run_dir)), reference(Path(args.reference))
    shared = sorted(set(a) & set(b))
    if not shared:
        raise SystemExit(f"{args.run_dir} and {args.reference} share no round")
    out = {"rounds": len(shared), "first": shared[0], "last": shared[-1],
           "ours": select(a, shared), "reference": select(b, shared),
           "mean_abs_test_hr_gap": statistics.fmean(abs(a[r]["test_hr"] - b[r]["test_hr"]) for r in shared),
           "mean_test_hr_gap_ours_minus_reference": statistics.fmean(a[r]["test_hr"] - b[r]["test_hr"]
                                                                     for r in shared)}
    if args.csv:
        tmp = Path(args.csv + ".tmp")
        with tmp.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "ours_test_hr@10", "ours_test_ndcg@10", "ours_valid_hr@10", "ours_round_s",
                        "ref_test_hr@10", "ref_test_ndcg@10", "ref_valid_hr@10", "ref_round_s"])
            for r in shared:
                w.writerow([r] + [f"{a[r][k]:.4f}" for k in ("test_hr", "test_ndcg", "val_hr")]
                           + [f"{a[r]['round_s']:.2f}"]
                           + [f"{b[r][k]:.4f}" for k in ("test_hr", "test_ndcg", "val_hr")]
                           + [f"{b[r]['round_s']:.2f}"])
        tmp.replace(args.csv)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
