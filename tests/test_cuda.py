"""Every method on a CUDA device: the golden runs of ``tests/test_golden.py`` (one preset per method
and harness) with ``device=cuda`` (``benchmarks/cuda_check.py``). A node picks CUDA whenever torch
sees one, so on a GPU machine every method's tensors live there; a tensor left on the CPU makes
each client raise, and the run used to go on with every client excluded. Skipped where torch sees
no CUDA device (every CI machine): run it on a GPU machine with ``python -m pytest -q tests/test_cuda.py``;
its last run and results are in ``docs/results.md``, "Every preset on a CUDA device"."""

import json

import pytest

from tests.golden import GOLDEN
from tests.sample import method_group, sample

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
LINES = sorted(d["preset"] for d in json.loads(GOLDEN.read_text())["presets"]) if GOLDEN.is_file() else []


@pytest.mark.parametrize("name", sample(LINES, key=method_group))
def test_preset_trains_on_cuda_with_the_golden_messages(name, data_dir):
    from benchmarks.cuda_check import check_one

    got = check_one(name, data_dir, "cuda")
    assert "error" not in got, got
    if "skipped" in got:
        pytest.skip(got["skipped"])
    assert got["excluded"] == 0, got["first_exclusion"]   # no client raised on the device
    assert got["bytes_equal"], got                        # the same messages as on the CPU
