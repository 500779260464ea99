"""Time the two Laplace samplers of ``corolla/noise.py`` on one GF-CF filter's shape (1682 x 1682).

Median of ``--repeats`` draws each (after one warm-up draw: the first allocation of 11 MB pays for
its page faults), with the 1-minute load average beside it. ``--json`` keeps the numbers.

    python benchmarks/laplace_sampler.py --repeats 9 --json docs/results/laplace-sampler.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from corolla.noise import SAMPLERS, laplace_noise  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1682)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    shape = (args.items, args.items)
    g = np.random.default_rng(0)
    load = float(Path("/proc/loadavg").read_text().split()[0])
    res = {"shape": list(shape), "repeats": args.repeats, "loadavg_1min": load, "median_s": {}}
    for sampler in SAMPLERS:
        laplace_noise(g, 0.001, shape, sampler)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            laplace_noise(g, 0.001, shape, sampler)
            times.append(time.perf_counter() - t0)
        res["median_s"][sampler] = round(statistics.median(times), 4)
    res["speedup"] = round(res["median_s"]["numpy"] / res["median_s"]["exponential"], 2)
    print(json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
