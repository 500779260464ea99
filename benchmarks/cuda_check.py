"""Every preset's golden run on a CUDA device: does each method train there, and to its numbers?

``tests/test_golden.py`` pins every preset's 2-round in-process run on the CPU (metrics and bytes).
A node picks CUDA whenever torch sees one (``device = "auto"``, ``client_app/host.py``), so a GPU
machine runs every method's tensors there; no CI machine has one. This script reruns the golden
lines with ``device=cuda`` and reports, per preset: the error if the run failed, the logical
clients excluded in any phase (a client that raises is excluded and the run goes on, so a
device mismatch would otherwise look like a finished run), whether the bytes up and down equal the
golden line's (they must: the messages do not depend on the device), and the largest relative
difference of a metric to the golden line (float32 kernels differ between CPU and CUDA, so ranks
can swap; expected small, not zero).

    python -m benchmarks.cuda_check --data-dir $COROLLA_DATA --workers 12 --limit 280 --out cuda.jsonl

Presets run in parallel subprocesses (one CUDA context each), the one-per-(method, harness) sample
of ``tests/test_golden.py`` first, then the rest, until ``--limit`` seconds; each result is a JSON
line appended as soon as it is known, so a stopped check keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _max_rel(a, b) -> float:
    """Largest |a − b| / max(|b|, 1e-3) over the numbers of two metric dicts (nested)."""
    if isinstance(b, dict) and isinstance(a, dict):
        return max([_max_rel(a.get(k), v) for k, v in b.items()] or [0.0])
    if isinstance(b, (int, float)) and isinstance(a, (int, float)):
        return abs(a - b) / max(abs(b), 1e-3)
    return 0.0 if a == b else float("inf")


def check_one(name: str, data_dir: str, device: str) -> dict:
    """The golden run of ``name`` on ``device``, compared with its golden line."""
    sys.path.insert(0, str(ROOT))
    from tests import golden

    want = {d["preset"]: d for d in json.loads(golden.GOLDEN.read_text())["presets"]}.get(name)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.environ.get("COROLLA_CACHE")
        os.environ["COROLLA_CACHE"] = cache or str(Path(tmp) / "cache")
        try:
            got = golden.run_preset(name, data_dir, Path(tmp), extra=f"device={device}")
        except Exception as e:  # noqa: BLE001
            return {"preset": name, "error": f"{type(e).__name__}: {e}"[:500], "s": round(time.perf_counter() - t0, 1)}
        finally:
            if cache is None:
                os.environ.pop("COROLLA_CACHE")
        excluded = []
        for line in (Path(tmp) / name / "rounds.jsonl").read_text().splitlines() if (Path(tmp) / name / "rounds.jsonl").is_file() else []:
            for ph in json.loads(line)["phases"]:
                excluded += [f"r{json.loads(line)['round']} {ph['name']}: {x['reason']}" for x in ph.get("excluded", [])]
    out = {"preset": name, "s": round(time.perf_counter() - t0, 1), "excluded": len(excluded),
           "first_exclusion": excluded[0][:300] if excluded else None}
    if "skipped" in got:
        return {**out, "skipped": got["skipped"]}
    if want and "skipped" not in want:
        out["bytes_equal"] = got["bytes_up"] == want["bytes_up"] and got["bytes_down"] == want["bytes_down"]
        out["max_rel_metric_diff"] = _max_rel(got["metrics"], want["metrics"])
        out["metrics_equal"] = got["metrics"] == want["metrics"]
    return out


def order() -> list[str]:
    """The golden file's presets: the sampled ones first (one per method and harness), then the rest."""
    sys.path.insert(0, str(ROOT))
    from tests import golden
    from tests.sample import method_group, sample

    names = sorted(d["preset"] for d in json.loads(golden.GOLDEN.read_text())["presets"])
    first = sample(names, key=method_group)
    return first + [n for n in names if n not in first]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA", str(ROOT.parent / "shared" / "datasets")))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--limit", type=float, default=600.0, help="seconds: start no preset after this")
    ap.add_argument("--grace", type=float, default=60.0, help="seconds after --limit: stop what still runs")
    ap.add_argument("--out", default="cuda-check.jsonl")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(check_one(a.one, a.data_dir, a.device)), flush=True)
        return
    todo = list(a.only or order())
    t0, running = time.monotonic(), []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(a.out, "a") as fh:
        while todo or running:
            while todo and len(running) < a.workers and time.monotonic() - t0 < a.limit:
                name = todo.pop(0)
                running.append((name, subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.cuda_check", "--one", name, "--device", a.device,
                     "--data-dir", a.data_dir], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)))
            if time.monotonic() - t0 >= a.limit:
                todo.clear()
            if time.monotonic() - t0 >= a.limit + a.grace:   # still running: record and stop them
                for name, p in running:
                    p.kill()
                    fh.write(json.dumps({"preset": name, "error": f"still running at {a.limit + a.grace:.0f} s"}) + "\n")
                running = []
            for name, p in list(running):
                if p.poll() is None:
                    continue
                running.remove((name, p))
                out, err = p.communicate()
                line = out.strip().splitlines()[-1] if out.strip() else json.dumps(
                    {"preset": name, "error": f"exit {p.returncode}: {err.strip()[-500:]}"})
                fh.write(line + "\n")
                fh.flush()
                print(line, flush=True)
            time.sleep(0.2)


if __name__ == "__main__":
    main()
