"""The tracking sink (``--track tensorboard``): its event files, read back by TensorBoard's own
reader, hold every round's metrics and bytes as ``rounds.jsonl`` has them."""

import json

import pytest

from launcher.inproc import InProcessTransport, partitions
from server_app.app import run_federation


def test_tensorboard_events_read_back(tmp_path, data_dir):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = tmp_path / "tracked"
    run_federation(InProcessTransport(partitions(2, {"data-dir": data_dir})),
                   {"preset": "fedavg-mf-ml100k", "out-dir": str(out), "data-dir": data_dir, "track": "tensorboard",
                    "set": "num-rounds=3 split=loo partition=blocks num-clients=4 protocol=loo dim=8 loss=bpr "
                           "train-samples=per-positive compat-fedcia-metrics=false select-metric=ndcg@10 patience=0"})
    ea = ea_mod.EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    valid = {e.step: e.value for e in ea.Scalars("valid/ndcg@10")}
    test = {e.step: e.value for e in ea.Scalars("test/ndcg@10")}
    up = {e.step: e.value for e in ea.Scalars("bytes/up")}
    for r in rounds:
        assert valid[r["round"]] == pytest.approx(r["valid"]["ndcg@10"], rel=1e-6)
        assert test[r["round"]] == pytest.approx(r["metrics"]["ndcg@10"], rel=1e-6)
        assert up[r["round"]] == sum(p["bytes_up"] for p in r["phases"])
    tags = ea.Tags()
    assert {"config", "summary"} <= {t.split("/")[0] for t in tags.get("tensors", [])}
