"""The per-round progress line: in round order, with the selection metric, elapsed time and an ETA."""

import time

from corolla.config import resolve
from server_app.results import RunRecorder, _clock


def test_clock():
    assert _clock(0) == "0:00" and _clock(75) == "1:15" and _clock(3725) == "1:02:05"


def test_round_lines_in_order_with_eta(tmp_path, monkeypatch):
    cfg = resolve("fedavg-mf-ml100k", {"num-rounds": 4})
    rec = RunRecorder(tmp_path, cfg, "fedavg-mf-ml100k", {})
    rec.t_start = time.time() - 20.0     # 20 s into the run, 2 rounds done -> 10 s a round
    phase = {"name": "train", "bytes_up": 2_000_000, "bytes_down": 500_000, "wall_s": 9.5, "excluded": [{"client": 3}]}
    for r in (1, 2):
        rec.history.append({"round": r, "phases": [phase], "wall_s": 10.0, "valid": {"f1@10": 0.1 * r},
                            "metrics": {"f1@10": 0.2 * r}, "compat": {}})
    line = rec.round_line(rec.history[-1])
    assert line.startswith("round   2/4 up     2.000 MB down     0.500 MB   10.00 s excluded 1")
    assert "valid f1@10=0.2000 test f1@10=0.4000" in line
    assert line.endswith("0:20 elapsed, ETA 0:20")   # 2 rounds left at 10 s each
