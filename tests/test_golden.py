"""Every preset's metrics and byte counts over 2 in-process rounds equal the golden file written
before the method-table redesign (``tests/golden.py``; one preset per method and harness by default,
all of them with ``COROLLA_ALL_PRESETS=1``, ``tests/sample.py``; regenerate with ``python -m tests.golden``
only for a change that is meant to change numbers, and say so in the commit)."""

import json

import pytest

from tests.golden import GOLDEN, presets, run_preset
from tests.sample import method_group, sample

LINES = {d["preset"]: d for d in json.loads(GOLDEN.read_text())["presets"]} if GOLDEN.is_file() else {}


def test_every_preset_has_a_golden_line():
    missing = sorted(set(presets()) - set(LINES) - {"fedprox-mf-ml100k"})
    assert not missing, f"presets without a golden line: {missing} (python -m tests.golden --only ...)"


@pytest.mark.parametrize("name", sample(sorted(LINES), key=method_group))
def test_preset_reproduces_its_golden_line(name, data_dir, tmp_path):
    want = LINES[name]
    got = run_preset(name, data_dir, tmp_path)
    if "skipped" in want:
        assert got == want
        return
    assert got["bytes_up"] == want["bytes_up"] and got["bytes_down"] == want["bytes_down"], name
    assert got["rounds"] == want["rounds"], name
    assert got == want, name
