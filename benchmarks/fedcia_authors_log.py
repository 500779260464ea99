"""Turn a log of FedCIA's authors' code (``entry.base`` / ``entry.fedavg``; its ``output.log`` or
the captured stdout) into a result file the leaderboard's "authors' code" column reads.

The code logs, for every round (0-based ``epoch``), ``Finish valid valid set epoch N in S s, f1:
[x], mrr: [y], ndcg: [z].`` (validation, FedCIA's metrics, ``S`` the round's seconds so far), and
once at the end ``f1: [x], mrr: [y], ndcg: [z].``: the test metrics of the models its early
stopper saved at the best validation F1@10 (a strict ``>``, so the first of equal rounds;
``utils/utils.py``, ``EarlyStopper_base``). The one-shot GF-CF entries (``entry.fedcia_gsp``,
``entry.base_gsp``) log no rounds, only two such lines: validation, then test. How the code was
run: ``benchmarks/fedcia_authors.md``.

Usage::

    python benchmarks/fedcia_authors_log.py LOG CONFIG.ini OUT.json --command "python -m entry.fedavg ..."

``OUT.json``: ``{"source", "code", "command", "config", "rounds": [{"round", "val_f1",
"val_mrr", "val_ndcg", "round_s"}], "selected_round", "rounds_completed", "stopped_early",
"metrics": {"f1@10", "mrr@10", "ndcg@10"}}`` (rounds 1-based, as Corolla's); a one-shot run has
``"rounds": []``, ``"one_shot": true`` and its validation metrics under ``"valid"``.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
from pathlib import Path

CODE = "https://github.com/Mingzhe-Han/FedCIA @ bbc4224a5fdb5953f76f1ee5aac0bf39fe41bd22"
_NUM = r"\[([-+0-9.eE]+)\]"
_VALID = re.compile(r"Finish valid valid set epoch (\d+) in ([0-9.]+)s, f1: " + _NUM + r", mrr: " + _NUM
                    + r", ndcg: " + _NUM)
_TEST = re.compile(r"INFO - f1: " + _NUM + r", mrr: " + _NUM + r", ndcg: " + _NUM)


def parse(text: str) -> dict:
    """Rounds, selection and test metrics of one log (pure; raises ``ValueError`` naming what is
    missing)."""
    tests = _TEST.findall(text)
    if not _VALID.search(text):
        if len(tests) != 2:
            raise ValueError("no 'Finish valid valid set epoch N ...' line, and not the two final lines (valid, "
                             f"test) of a one-shot GF-CF run either (found {len(tests)}): not a log of FedCIA's code?")
        (vf, vm, vn), (f1, mrr, ndcg) = ([float(x) for x in t] for t in tests)
        return {"rounds": [], "one_shot": True, "valid": {"f1@10": vf, "mrr@10": vm, "ndcg@10": vn},
                "metrics": {"f1@10": f1, "mrr@10": mrr, "ndcg@10": ndcg}}
    rounds = []
    for m in _VALID.finditer(text):
        epoch = int(m.group(1))
        if epoch != len(rounds):
            raise ValueError(f"round {epoch} follows round {len(rounds) - 1}: one run per log expected")
        rounds.append({"round": epoch + 1, "round_s": float(m.group(2)), "val_f1": float(m.group(3)),
                       "val_mrr": float(m.group(4)), "val_ndcg": float(m.group(5))})
    if len(tests) != 1:
        raise ValueError(f"expected one final 'f1: [..], mrr: [..], ndcg: [..]' test line, found {len(tests)} "
                         f"(a run that has not finished?)")
    best, best_f1 = 0, 0.0                 # the stopper's best starts at 0 and needs a strict '>'
    for r in rounds:
        if r["val_f1"] > best_f1:
            best, best_f1 = r["round"], r["val_f1"]
    f1, mrr, ndcg = (float(x) for x in tests[0])
    return {"rounds": rounds, "selected_round": best, "rounds_completed": len(rounds),
            "stopped_early": "early stop at epoch" in text,
            "metrics": {"f1@10": f1, "mrr@10": mrr, "ndcg@10": ndcg}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("config", type=Path, help="the .ini the run used")
    ap.add_argument("out", type=Path)
    ap.add_argument("--command", required=True, help="the command line that produced the log")
    a = ap.parse_args()
    for p in (a.log, a.config):
        if not p.is_file():
            raise SystemExit(f"{p}: no such file")
    try:
        res = parse(a.log.read_text(errors="replace"))
    except ValueError as e:
        raise SystemExit(f"{a.log}: {e}") from None
    cfg = configparser.ConfigParser()
    cfg.read(a.config)
    out = {"source": a.log.name, "code": CODE, "command": a.command,
           "config": {s: dict(cfg[s]) for s in cfg.sections()}, **res}
    tmp = a.out.with_suffix(a.out.suffix + ".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
