"""Turn an authors'-code stdout log with ``ROUND {json}`` lines (the one-line patch described in
``benchmarks/ufgraphfr_authors.md``) into the reference JSON of ``compare_curves.py`` and
``round_times.py``: ``{"source": LOG, "rounds": [{"round", "test_hr", "test_ndcg", "val_hr",
"val_ndcg", "round_s"}, ...]}``.

Usage::

    python benchmarks/authors_log.py LOG OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def convert(log: Path) -> dict:
    rounds = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("ROUND "):
            rounds.append(json.loads(line[len("ROUND "):]))
    if not rounds:
        raise SystemExit(f"{log}: no 'ROUND {{...}}' line")
    return {"source": str(log), "rounds": rounds}


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: python benchmarks/authors_log.py LOG OUT.json")
    out = Path(sys.argv[2])
    out.write_text(json.dumps(convert(Path(sys.argv[1])), indent=1))


if __name__ == "__main__":
    main()
