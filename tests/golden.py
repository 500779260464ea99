"""Golden runs: every preset, 2 rounds in process, its metrics and byte counts.

``tests/golden/presets.json`` was written by this module at a commit before the method-table
redesign (issue 23); ``tests/test_golden.py`` reruns every line and requires the same metrics and
bytes (on CPU-sensitive models, metrics within two users' reordering: :data:`CPU_SENSITIVE_MODELS`),
so a refactoring that changes any preset's numbers cannot land unnoticed.

Each preset runs with ``num-rounds=2 eval-every=1 patience=0`` on 2 in-process nodes; presets too
large for a CI core are reduced by the overrides in :data:`REDUCE` (the same overrides before and
after, so the comparison is exact). Presets whose dataset is not in the offline data directory
(ML-1M's ratings) are listed with the reason instead of a result.

    python -m tests.golden --data-dir $COROLLA_DATA            # rewrite the golden file
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "presets.json"
COMMON = "num-rounds=2 eval-every=1 patience=0"
# presets sized for a GPU or for minutes of CPU per round: fewer clients, epochs or steps
REDUCE = {
    # FedCIA uploads an M x M similarity per client (11 MB at M = 1,682): 10 of the 100 clients a
    # round, a few fine-tuning steps; one-user FedCIA (943 clients) 16 a round with SVD factors
    "fedcia-mf-ml100k": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-hetero-arch-ml100k": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-hetero-size-ml100k": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-hetero-arch-ml100k-cpu": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-hetero-size-ml100k-cpu": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-mf-ml100k-cpu": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-lightgcn-ml100k": "local-epochs=1 finetune-steps=5 clients-per-round=10",
    "fedcia-mf-ml100k-943": "local-epochs=1 finetune-steps=5 clients-per-round=16 fedcia-upload=svd svd-rank=8",
    "fedcia-mlp-ml100k-943": "local-epochs=1 finetune-steps=5 clients-per-round=16 fedcia-upload=svd svd-rank=8",
    # Gowalla's LGCN bases take minutes per client on a CPU: the same configuration on ML-100K
    "lpsfed-gowalla": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "fedavg-lgcn-gowalla": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "lpsfed-ml100k": "local-epochs=1",
    "lpsfed-code-ml100k": "local-epochs=1",
    "fedavg-lgcn-code-ml100k": "local-epochs=1",
    "lpsfed-code-gowalla": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "fedavg-lgcn-code-gowalla": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    # Yelp2018's and Amazon-Book's train.txt are not in the offline data (issue 39): the same reduction
    "lpsfed-yelp2018": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "fedavg-lgcn-yelp2018": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "lpsfed-amazonbook": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "fedavg-lgcn-amazonbook": "local-epochs=1 dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "distfedavg-ml100k": "local-epochs=1",
    "distfedavg-filmtrust": "local-epochs=1",
    "distfedavg-lastfm2k": "local-epochs=1",
    "fedmedian-ml100k": "local-epochs=1",
    # FedCIA Table 1's FedLightGCN / FedNCF / LightGCN-without-aggregation rows and Table 3's
    # one-user WAA / IM rows (issue 39): 10 (16) clients a round, as the FedCIA presets above
    "fedavg-lightgcn-ml100k": "clients-per-round=10",
    "lightgcn-local-ml100k": "clients-per-round=10",
    "fedavg-mlp-ml100k": "clients-per-round=10",
    "fedavg-mf-ml100k-943": "clients-per-round=16",
    "fedavg-mlp-ml100k-943": "clients-per-round=16",
    "local-mf-ml100k-943": "clients-per-round=16",
    "local-mlp-ml100k-943": "clients-per-round=16",
    # PFedRec and GPFedRec on FedCIA Table 1's protocol (943 one-user clients, full ranking)
    "pfedrec-fedcia-ml100k": "clients-per-round=16",
    "gpfedrec-fedcia-ml100k": "clients-per-round=16",
    # FedCIA Table 3's GGA column (GPFedRec's graph over the 943 one-user MF / MLP clients)
    "gga-mlp-ml100k-943": "clients-per-round=16",
    "gga-mf-ml100k-943": "clients-per-round=16",
    "gpfedrec-mlp-ml100k-943": "clients-per-round=16",
    # LPSFed Table 1's FedMF, PFedRec and FedPerGNN rows on Gowalla (issue 39): the same
    # configuration on ML-100K, as the LPSFed Gowalla presets above
    "fedmf-lpsfed-gowalla": "dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "fedmf-oneuser-lpsfed-gowalla": "dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "pfedrec-lpsfed-gowalla": "dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
    "fedpergnn-lpsfed-gowalla": "dataset=ml-100k split=ratio split-ratios=0.81,0.09,0.1",
}
# Presets added after the golden file was first written (issues 38 and 39: the six baselines, the
# centralised references, FedCA Table 1's FilmTrust and NCF rows (PFedRec's with its NCF score function too),
# UFGraphFR's Lastfm-2K rows, FedLightGCN on UFGraphFR's harness): their
# lines were written when they were added, on the heaviest users only (a minute a preset in full on
# 2 cores, Lastfm-2K's 12,454-item tables 2 minutes a round for 90 users: 20 of them; every code path is kept), the same reduction before and after.
HEAVY_USERS = {"ml-100k": "min-user-interactions=300", "lastfm-2k-tagged": "min-user-interactions=300 max-users=20 local-epochs=1",
               "filmtrust": "min-user-interactions=150"}
ADDED = [f"central-{m}-{p}-ml100k" for m in ("mf", "ncf", "sgl") for p in ("fedca", "ufgraphfr")] + [
    f"{m}-{b}-{d}" for m in ("perfedrec", "fedfast", "pfedgraph") for b in ("pmf", "ncf") for d in ("ml100k", "filmtrust")
] + [f"{m}-ncf-{d}" for m in ("local", "fcf", "fedavg", "fedatt") for d in ("ml100k", "filmtrust")] + [
    f"{m}-pmf-filmtrust" for m in ("local", "fcf", "fedavg", "fedatt")] + [
    "fedca-ncf-filmtrust", "pfedrec-filmtrust", "fedrecon-ufgraphfr-ml100k", "metamf-ufgraphfr-ml100k",
    "fedncf-ufgraphfr-ml100k", "fedmf-ufgraphfr-lastfm2k", "fedncf-ufgraphfr-lastfm2k", "pfedrec-ufgraphfr-lastfm2k",
    "gpfedrec-lastfm2k", "ufgraphfr-lastfm2k", "ufgraphfr-lite-lastfm2k", "fedrecon-ufgraphfr-lastfm2k",
    "metamf-ufgraphfr-lastfm2k", "fedpergnn-ufgraphfr-ml100k", "fedpergnn-ufgraphfr-lastfm2k"] + [
    f"central-{m}-ufgraphfr-lastfm2k" for m in ("mf", "ncf", "sgl")] + [
    "fedlightgcn-ufgraphfr-ml100k", "fedlightgcn-ufgraphfr-lastfm2k", "fedncf-sgd-ufgraphfr-ml100k",
    "fedncf-sgd-ufgraphfr-lastfm2k", "pfedrec-ncf-ml100k", "pfedrec-ncf-filmtrust"]


def reduce_for(name: str, dataset: str) -> str:
    """The golden run's overrides of preset ``name`` (of ``dataset``) beyond :data:`COMMON`."""
    if name in ADDED:
        return HEAVY_USERS[dataset]
    return REDUCE.get(name, "")
OFFLINE_MISSING = {"ml-1m": ("ml-1m", "ratings.dat")}


def presets() -> list[str]:
    from corolla.config import preset_names

    return preset_names()


def _round_floats(x):
    """Floats to 12 significant digits: what a refactoring must keep, without the last bits of
    summation order that JSON would otherwise carry."""
    if isinstance(x, float):
        return float(f"{x:.12g}") if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {k: _round_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round_floats(v) for v in x]
    return x


# Float32 kernels round differently across CPUs even on the pinned AVX2 paths (``tests/cpu_paths.py``):
# seen on 2026-11-28, the lines written on an Intel Xeon gave other MRR/NDCG on an AMD EPYC for four
# NCF presets (one or two users' candidates reordered). For the models whose float32 paths are
# sensitive to that (MLP towers, graph propagation, GF-CF's filter) a line's metrics may move by what
# RANK_SWAPS users' reordered candidates can move a mean over users (each user's value of every
# metric lies in [0, 1]); everything else of the line stays exact (``docs/results.md``, "Float32
# comparisons across CPU paths").
# GF-CF's filter takes the first k rows of a full SVD's Vh in float32 (the sum R F over the filter's
# 1,682-wide rows on ML-100K, many near-tied scores): on 2026-12-01 an AMD EPYC with AVX2 but no AVX-512 gave
# gfcf-local-ml100k's metrics up to 2.62 users' worth from its line (paper-compatible MRR@10 +0.0057
# over 459 users; every other metric within 1.6, bytes exact), so GF-CF lines get RANK_SWAPS_BY_MODEL.
# On that machine OpenBLAS's four x86 kernel sets give 1.72-2.62 users' worth (benchmarks/golden_paths.py).
CPU_SENSITIVE_MODELS = ("ncf", "mlp", "lgcn", "lightgcn", "gfcf")
RANK_SWAPS = 2
RANK_SWAPS_BY_MODEL = {"gfcf": 4}
METRIC_KEYS = ("metrics", "valid_metrics", "valid")


def cpu_sensitive(name: str) -> bool:
    from corolla.config import resolve

    return resolve(name).get("model") in CPU_SENSITIVE_MODELS


def rank_swaps(name: str) -> int:
    """How many users' reordered candidates a CPU-sensitive line's metrics may move by."""
    from corolla.config import resolve

    return RANK_SWAPS_BY_MODEL.get(resolve(name).get("model"), RANK_SWAPS)


def evaluated_users(run_dir: Path) -> int:
    """The fewest users evaluated on valid or test in any round of the run at ``run_dir``."""
    counts = [min(r["users"].values()) for r in map(json.loads, open(run_dir / "rounds.jsonl")) if r.get("users")]
    return min(counts) if counts else 0


def differences(got, want, users: int = 0, path: str = "", in_metrics: bool = False,
                swaps: int = RANK_SWAPS) -> list[str]:
    """Where line ``got`` differs from ``want``: exact everywhere, except metric values when
    ``users`` > 0, which may differ by up to ``swaps`` / users."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{path or '/'}: keys {sorted(set(got) ^ set(want))} differ"]
        return [d for k in want
                for d in differences(got[k], want[k], users, f"{path}/{k}", in_metrics or k in METRIC_KEYS, swaps)]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} entries, the line has {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(got, want))
                for d in differences(a, b, users, f"{path}[{i}]", in_metrics, swaps)]
    if got == want:
        return []
    if (in_metrics and users > 0 and isinstance(got, float) and isinstance(want, float)
            and abs(got - want) <= swaps / users + 1e-12):
        return []
    return [f"{path}: {got!r}, the line has {want!r}"]


def run_preset(name: str, data_dir: str, out: Path, extra: str = "") -> dict:
    """One golden line: the preset's 2-round in-process run (or why it cannot run offline);
    ``extra``: overrides added after the line's own (``benchmarks/cuda_check.py``: the device)."""
    sys.path.insert(0, str(ROOT))
    from corolla.config import resolve
    from server_app.app import run_federation
    from launcher.inproc import InProcessTransport, partitions

    from corolla.config import parse_overrides

    overrides = f"{COMMON} {reduce_for(name, resolve(name)['dataset'])} {extra}".strip()

    cfg = resolve(name, parse_overrides(overrides))
    need = OFFLINE_MISSING.get(cfg["dataset"])
    if need and not Path(data_dir, *need).is_file():
        return {"preset": name, "skipped": f"{'/'.join(need)} is not in the offline data directory"}
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": name, "set": overrides, "out-dir": str(out / name), "data-dir": data_dir})
    rounds = [json.loads(x) for x in open(out / name / "rounds.jsonl")]
    return _round_floats({
        "preset": name, "set": overrides,
        "metrics": s["metrics"], "valid_metrics": s.get("valid_metrics"),
        "metrics_paper_compat": s.get("metrics_paper_compat"),
        "bytes_up": s["bytes_up"], "bytes_down": s["bytes_down"],
        "rounds": [{"round": r["round"], "metrics": r.get("metrics"), "valid": r.get("valid"),
                    "phases": [{k: p[k] for k in ("name", "bytes_up", "bytes_down", "replies")}
                               for p in r["phases"]]} for r in rounds],
    })


def main() -> None:
    ap = argparse.ArgumentParser(description="write tests/golden/presets.json")
    ap.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA", str(ROOT.parent / "shared" / "datasets")))
    ap.add_argument("--only", nargs="*", help="presets to (re)write; default all")
    a = ap.parse_args()
    from tests import cpu_paths

    cpu_paths.pin()   # the kernels the golden lines were written with (before anything loads MKL)
    os.environ.setdefault("COROLLA_OFFLINE", "1")
    old = {d["preset"]: d for d in json.loads(GOLDEN.read_text())["presets"]} if GOLDEN.is_file() else {}
    lines = dict(old)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["COROLLA_CACHE"] = str(Path(tmp) / "cache")
        for name in (a.only or presets()):
            t0 = time.perf_counter()
            lines[name] = run_preset(name, a.data_dir, Path(tmp))
            print(f"{name}: {time.perf_counter() - t0:.1f} s {lines[name].get('metrics', lines[name].get('skipped'))}",
                  flush=True)
            GOLDEN.parent.mkdir(parents=True, exist_ok=True)   # after every preset: a stop loses one
            GOLDEN.write_text(json.dumps({"common": COMMON, "presets": [lines[k] for k in sorted(lines)]},
                                         indent=1) + "\n")


if __name__ == "__main__":
    main()
