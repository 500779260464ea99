"""Where a round's memory goes: the traced (NumPy and Python) allocations of an in-process run, per
stage of each round.

Runs a preset in process (``launcher.inproc``: the server, the transport and every node's clients
in this one process, as ``corolla run --mode inproc``) under ``tracemalloc`` and records, for each
round, the peak of traced memory inside each stage — the strategy building the downloads
(``configure``), the exchange (messages both ways and the clients' work), the strategy's
aggregation (``aggregate``) — and what is held when each stage ends. Torch's own buffers are not
traced (the clients' training tensors); everything the server holds is NumPy. With
``--per-table`` the numbers are also given in units of one full set of the clients' item tables
(clients × items × dim × 4 bytes): the unit the one-user graph methods (GPFedRec, UFGraphFR) move.

Usage::

    python benchmarks/round_memory.py --data-dir $COROLLA_DATA --preset gpfedrec-lastfm2k \\
        --rounds 3 --set max-users=200 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 1e6


class Probe:
    """Peak and held traced memory per (round, stage)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.round = 0

    def _start(self) -> tuple[float, float]:
        tracemalloc.reset_peak()
        return tracemalloc.get_traced_memory()[0], time.perf_counter()

    def _record(self, name: str, before: float, t0: float) -> None:
        cur, peak = tracemalloc.get_traced_memory()
        self.rows.append({"round": self.round, "stage": name, "held_before_mb": before / MB,
                          "peak_mb": peak / MB, "held_after_mb": cur / MB, "s": time.perf_counter() - t0})

    def stage(self, name: str, fn):
        def wrapped(*a, **kw):
            before, t0 = self._start()
            out = fn(*a, **kw)
            self._record(name, before, t0)
            return out
        return wrapped

    def stream(self, name: str, fn):
        """``fn`` returns a generator (the transport's replies, one per node): the stage lasts until
        the caller has consumed it, so the server's handling of each reply as it arrives
        (``accept``: held or folded uploads) is inside it, and replies are not listed."""
        def wrapped(*a, **kw):
            before, t0 = self._start()
            yield from fn(*a, **kw)
            self._record(name, before, t0)
        return wrapped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--per-table", action="store_true",
                    help="also give each number in full sets of the clients' item tables (N × M × dim × 4 bytes)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if not Path(a.data_dir).is_dir():
        ap.error(f"--data-dir {a.data_dir}: no such directory (expected the datasets folder)")
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds}: expected at least 1")

    from corolla.config import parse_overrides, resolve
    from launcher.inproc import InProcessTransport, partitions
    from server_app import loop as loop_mod
    from server_app.app import run_federation

    overrides = parse_overrides(a.set)
    overrides["num-rounds"] = a.rounds
    cfg = resolve(a.preset, overrides)
    probe = Probe()
    # the round loop's stages, wrapped where the loop calls them
    orig_begin = loop_mod.RoundLoop.begin_round

    def begin(self, rnd):
        probe.round = rnd
        return orig_begin(self, rnd)

    loop_mod.RoundLoop.begin_round = begin
    orig_init = loop_mod.RoundLoop.__init__

    seen = {}

    def init(self, strategy, ex, recorder=None):
        orig_init(self, strategy, ex, recorder)
        seen["strategy"] = strategy
        strategy.configure_phase = probe.stage("configure", strategy.configure_phase)
        strategy.aggregate_phase = probe.stage("aggregate", strategy.aggregate_phase)
        ex.transport.exchange = probe.stream("exchange", ex.transport.exchange)

    loop_mod.RoundLoop.__init__ = init
    with tempfile.TemporaryDirectory(prefix="round-memory-") as tmp:
        out = Path(tmp) / "run"
        nodes = partitions(a.nodes, {"data-dir": a.data_dir, "state-dir": str(out / "node-state")})
        rc = {"preset": a.preset, "set": " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items()),
              "out-dir": str(out), "data-dir": a.data_dir, "mode": "inproc"}
        tracemalloc.start()
        t0 = time.perf_counter()
        summary = run_federation(InProcessTransport(nodes), rc)
        wall = time.perf_counter() - t0
        tracemalloc.stop()
    overall = max(r["peak_mb"] for r in probe.rows) * MB
    roster = seen["strategy"].roster
    unit = len(roster.clients) * roster.n_items * cfg["dim"] * 4 / MB if a.per_table else None
    print(f"{a.preset} {' '.join(a.set)}: {a.rounds} rounds, {wall:.1f} s"
          + (f"; one set of item tables = {unit:.1f} MB" if unit else ""))
    print("| round | stage | held before MB | peak MB | held after MB | s |" + (" peak / tables |" if unit else ""))
    print("|---:|---|---:|---:|---:|---:|" + ("---:|" if unit else ""))
    for r in probe.rows:
        print(f"| {r['round']} | {r['stage']} | {r['held_before_mb']:.1f} | {r['peak_mb']:.1f} | "
              f"{r['held_after_mb']:.1f} | {r['s']:.1f} |" + (f" {r['peak_mb'] / unit:.2f} |" if unit else ""))
    print(f"largest stage peak: {overall / MB:.1f} MB" + (f" ({overall / MB / unit:.2f} sets of tables)" if unit else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"preset": a.preset, "set": a.set, "rounds": a.rounds, "nodes": a.nodes,
                                            "wall_s": wall, "table_set_mb": unit, "peak_mb": overall / MB,
                                            "stages": probe.rows,
                                            "command": _command(sys.argv[1:] if argv is None else argv, a.data_dir)},
                                           indent=1))
    return 0


def _command(args: list[str], data_dir: str) -> str:
    """The command line as a result file keeps it: the data folder named ``$COROLLA_DATA`` when it is
    that variable's folder, so the file names no path of the machine it ran on."""
    env = os.environ.get("COROLLA_DATA")
    same = env and Path(env).resolve() == Path(data_dir).resolve()
    return "python benchmarks/round_memory.py " + " ".join("$COROLLA_DATA" if same and x == data_dir else x for x in args)


if __name__ == "__main__":
    sys.exit(main())
