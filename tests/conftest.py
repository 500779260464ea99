import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import cpu_paths  # noqa: E402  (first: before anything loads MKL)

cpu_paths.pin()

import pytest  # noqa: E402

SHARED = ROOT.parent / "shared" / "datasets"
DATA_DIR = os.environ.get("COROLLA_DATA") or (str(SHARED) if SHARED.is_dir() else "")
os.environ.setdefault("COROLLA_OFFLINE", "1")
# the Flower processes the tests start poll for tasks every 0.5 s, not local mode's 0.05 s
# (launcher/cli.py, SUPEREXEC_POLL_S): on 2 cores about ten processes share the CPU in an end-to-end
# test, and the faster polls cost about a quarter of its CPU (docs/results.md, "CI time (2026-11-28)")
os.environ.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.5")


@pytest.fixture(scope="session")
def data_dir():
    if not DATA_DIR or not Path(DATA_DIR, "ml-100k", "u.data").is_file():
        pytest.skip("no dataset directory: set COROLLA_DATA to the dataset folder (layout: corolla/data/sources.py)")
    return DATA_DIR


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    # a per-session cache of prepared federations, never the user's
    monkeypatch.setenv("COROLLA_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
