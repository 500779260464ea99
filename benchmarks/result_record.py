"""A result file's provenance as the docs write it, shared by the benchmark scripts.

A run's ``summary.json`` records the command that made it as it was typed on that machine
(``/path/to/python -m launcher.cli run ... --data-dir /some/datasets --out /scratch/runs/X``).
A result file under ``docs/results/`` is read on other machines, so :func:`portable` rewrites
that command the way the docs give it (``corolla run ... --data-dir $COROLLA_DATA --out
runs/X``), and :func:`record_summary` writes a summary there with that command and an optional
note, atomically, in the format of the files already there (one-space indent, sorted keys).
``benchmarks/sweep.py --record [--note TEXT]`` uses it; so does this script's command line, for a
run made without sweep or a note written after the fact::

    python benchmarks/result_record.py --note "why this run was made" runs/NAME        # -> docs/results/NAME.json
    python benchmarks/result_record.py --note "a corrected note" docs/results/NAME.json # in place
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from corolla.util import atomic_write_text  # noqa: E402


def split_comment(command: str) -> tuple[str, str]:
    """``command`` split before its trailing shell comment: the whitespace and ``#`` that start it
    outside any quotes, and the rest of the line (``("a 'b # c'", "")``, ``("a", "  # c")``)."""
    quote, blank, i = None, False, 0      # blank: the last character was an unquoted, unescaped space
    while i < len(command):
        ch = command[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = None
        elif ch == "#" and blank:
            start = len(command[:i].rstrip())
            return command[:start], command[start:]
        elif ch == "\\":
            i += 1
        elif ch in "'\"":
            quote = ch
        blank = quote is None and ch.isspace()
        i += 1
    return command, ""


def portable(command: str | None) -> str | None:
    """A run's command as the docs write it: ``corolla run ...`` for the launcher however it was
    called (``python benchmarks/X.py run ...`` where a benchmark script wrapped the run, its
    ``--dump-ranks`` file by name), ``--data-dir $COROLLA_DATA`` and ``--out`` / ``--resume
    runs/<the run folder's name>``; a trailing ``  # comment`` is kept as it is."""
    if not command:
        return command
    body, comment = split_comment(command)
    words = shlex.split(body)
    for i, w in enumerate(words):
        if w == "run" and i > 0:
            script = words[i - 1] if words[i - 1].endswith(".py") else None   # a benchmark wrapping the run
            words = (["python", f"benchmarks/{Path(script).name}"] if script else ["corolla"]) + words[i:]
            break
    if "--dump-ranks" in words[:-1]:
        j = words.index("--dump-ranks") + 1
        words[j] = Path(words[j]).name
    for flag, value in (("--data-dir", None), ("--out", "runs/"), ("--resume", "runs/")):
        if flag in words[:-1]:
            j = words.index(flag) + 1
            words[j] = "$COROLLA_DATA" if value is None else value + Path(words[j]).name
    return " ".join(w if re.fullmatch(r"[\w@%+=:,./$-]+", w) else shlex.quote(w) for w in words) + comment


def record_summary(summary: dict, dst: str | Path, note: str | None = None) -> dict:
    """Write ``summary`` to ``dst`` with its ``provenance.command`` made portable and, given a
    ``note``, ``provenance.note`` set; returns what was written. ``summary`` is not changed."""
    doc = json.loads(json.dumps(summary))
    prov = doc.get("provenance")
    if not isinstance(prov, dict):
        raise ValueError(f"record_summary: {dst}: the summary has no provenance block to record "
                         "(expected a corolla run's summary.json)")
    prov["command"] = portable(prov.get("command"))
    if note is not None:
        if not note.strip():
            raise ValueError(f"record_summary: {dst}: --note is empty; give the sentence the "
                             "result file should carry, or leave --note out")
        prov["note"] = note
    atomic_write_text(dst, json.dumps(doc, indent=1, sort_keys=True))
    return doc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Record a run's summary under docs/results/ with a "
                                 "portable command, or rewrite a recorded file's command and note.")
    ap.add_argument("paths", nargs="+", metavar="PATH",
                    help="a run folder (its summary.json goes to docs/results/<folder name>.json) "
                         "or a result file (rewritten in place)")
    ap.add_argument("--note", help="the provenance note to set")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for p in map(Path, args.paths):
        if p.is_dir():
            src, dst = p / "summary.json", Path(args.results) / f"{p.name}.json"
            if not src.exists():
                raise SystemExit(f"result_record: {p}: expected a run folder with summary.json; none there")
        elif p.suffix == ".json" and p.exists():
            src = dst = p
        else:
            raise SystemExit(f"result_record: {p}: expected a run folder or an existing .json result file")
        try:
            doc = record_summary(json.loads(src.read_text()), dst, args.note)
        except ValueError as e:
            raise SystemExit(str(e))
        print(f"{dst}: {doc['provenance']['command']}")


if __name__ == "__main__":
    main()
