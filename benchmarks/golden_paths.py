"""How far a golden line moves under each of OpenBLAS's x86 kernel sets, on this machine.

``tests/golden.py`` lets the metrics of CPU-sensitive presets move by a few users' reordered
candidates (``RANK_SWAPS``, ``RANK_SWAPS_BY_MODEL``). That allowance was set from what other
machines gave; this measures it on one machine by running the preset's golden run
(``tests.golden.run_preset``) once per ``OPENBLAS_CORETYPE`` (each in a fresh process, since
OpenBLAS reads the variable when it loads) and printing, per kernel set, the largest metric
difference from the line in users' worth (|got − line| · evaluated users) and how many metric
values are off by at least one user. Anything outside the metrics that differs is printed as
``inf`` (the golden test keeps it exact).

Usage (``docs/results.md``, "Float32 comparisons across CPU paths")::

    python benchmarks/golden_paths.py --data-dir $COROLLA_DATA gfcf-local-ml100k
    python benchmarks/golden_paths.py --data-dir $COROLLA_DATA --coretypes Haswell,Sandybridge fedavg-ncf-ml100k

A kernel set the CPU cannot run (SkylakeX without AVX-512, say) is not a valid choice: OpenBLAS
falls back or the process fails; the default list is the AVX2-and-older sets every x86-64 CPU
with AVX2 can take.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORETYPES = ("Haswell", "Sandybridge", "Nehalem", "Prescott")


def deviations(got, want, users: int, path: str = "", in_metrics: bool = False) -> list[tuple[float, str]]:
    """(users' worth, path) for every value of ``got`` that differs from ``want``; non-metric
    differences (and a different shape) count as ``inf``."""
    from tests.golden import METRIC_KEYS

    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [(math.inf, f"{path or '/'}: keys differ")]
        return [d for k in want for d in deviations(got[k], want[k], users, f"{path}/{k}",
                                                      in_metrics or k in METRIC_KEYS or k == "metrics_paper_compat")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [(math.inf, f"{path}: length differs")]
        return [d for i, (a, b) in enumerate(zip(got, want)) for d in deviations(a, b, users, f"{path}[{i}]", in_metrics)]
    if got == want:
        return []
    if in_metrics and isinstance(got, float) and isinstance(want, float):
        return [(abs(got - want) * users, path)]
    return [(math.inf, path)]


def one(preset: str, data_dir: str) -> dict:
    """The preset's golden run in this process, against its line."""
    from tests.golden import GOLDEN, evaluated_users, run_preset

    lines = {d["preset"]: d for d in json.loads(GOLDEN.read_text())["presets"]}
    if preset not in lines:
        raise SystemExit(f"preset {preset!r}: no golden line in {GOLDEN}")
    with tempfile.TemporaryDirectory() as tmp:
        got = run_preset(preset, data_dir, Path(tmp))
        if "skipped" in got:
            return {"preset": preset, "skipped": got["skipped"]}
        users = evaluated_users(Path(tmp) / preset)
    devs = sorted(deviations(got, lines[preset], users), reverse=True)
    return {"preset": preset, "coretype": os.environ.get("OPENBLAS_CORETYPE"), "users": users,
            "largest": devs[0][0] if devs else 0.0, "where": devs[0][1] if devs else "",
            "at_least_one_user": sum(1 for d, _ in devs if d >= 1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="+")
    ap.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA", str(ROOT.parent / "shared" / "datasets")))
    ap.add_argument("--coretypes", default=",".join(CORETYPES), help="comma-separated OPENBLAS_CORETYPE values")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # the child process
    a = ap.parse_args()
    if a.one:
        sys.path.insert(0, str(ROOT))
        from tests import cpu_paths

        cpu_paths.pin()   # the golden lines' pins; OPENBLAS_CORETYPE set by the parent wins
        os.environ.setdefault("COROLLA_OFFLINE", "1")
        print(json.dumps(one(a.presets[0], a.data_dir)))
        return
    print("| preset | OPENBLAS_CORETYPE | evaluated users | largest difference (users) | where | values ≥ 1 user |")
    print("|---|---|---|---|---|---|")
    for preset in a.presets:
        for ct in [c.strip() for c in a.coretypes.split(",") if c.strip()]:
            env = {**os.environ, "OPENBLAS_CORETYPE": ct}
            p = subprocess.run([sys.executable, __file__, "--one", "--data-dir", a.data_dir, preset], env=env,
                               cwd=ROOT, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"{preset} with OPENBLAS_CORETYPE={ct} failed:\n{p.stderr[-2000:]}")
            r = json.loads(p.stdout.strip().splitlines()[-1])
            if "skipped" in r:
                print(f"| {preset} | {ct} | – | skipped: {r['skipped']} | | |")
                continue
            print(f"| {preset} | {ct} | {r['users']} | {r['largest']:.2f} | `{r['where']}` | {r['at_least_one_user']} |",
                  flush=True)


if __name__ == "__main__":
    main()
