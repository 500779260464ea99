"""Every preset's metrics and byte counts over 2 in-process rounds equal the golden file written
before the method-table redesign (the metrics of CPU-sensitive models: within two users'
reordering, ``tests/golden.py``; one preset per method and harness by default, all of them with
``COROLLA_ALL_PRESETS=1``, ``tests/sample.py``; regenerate with ``python -m tests.golden`` only for
a change that is meant to change numbers, and say so in the commit)."""

import json

import pytest

from tests.golden import GOLDEN, cpu_sensitive, differences, evaluated_users, presets, rank_swaps, run_preset
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
    users = evaluated_users(tmp_path / name) if cpu_sensitive(name) else 0
    swaps = rank_swaps(name)
    diff = differences(got, want, users, swaps=swaps)
    assert not diff, (f"{name}: " + ("exact" if not users else f"metrics within {swaps}/{users}, the rest exact")
                      + "; " + "; ".join(diff[:8]))


def test_differences_are_exact_but_for_metrics_of_cpu_sensitive_lines():
    line = {"bytes_up": 5, "metrics": {"hr@10": 0.5}, "rounds": [{"round": 1, "valid": {"mrr@10": 0.25}}]}
    moved = {"bytes_up": 5, "metrics": {"hr@10": 0.5 + 1 / 54}, "rounds": [{"round": 1, "valid": {"mrr@10": 0.25 - 2 / 54}}]}
    assert differences(line, line) == []
    assert len(differences(moved, line)) == 2                   # exact: both metrics differ
    assert differences(moved, line, users=54) == []              # within two users' reordering
    assert differences(moved, line, users=55) == ["/rounds[0]/valid/mrr@10: 0.21296296296296297, the line has 0.25"]
    assert differences({**line, "bytes_up": 6}, line, users=54) == ["/bytes_up: 6, the line has 5"]
    assert differences({**line, "rounds": [{"round": 2, "valid": {"mrr@10": 0.25}}]}, line, users=54) == [
        "/rounds[0]/round: 2, the line has 1"]
    assert cpu_sensitive("fedavg-ncf-ml100k") and not cpu_sensitive("fedavg-mf-ml100k")
    assert differences(moved, line, users=108) != [] and differences(moved, line, users=108, swaps=4) == []
    assert rank_swaps("gfcf-local-ml100k") == 4 and rank_swaps("fedavg-ncf-ml100k") == 2
