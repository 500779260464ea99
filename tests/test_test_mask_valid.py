"""The ``test-mask-valid`` key: at test, full ranking masks (true) or keeps (false) the user's
validation items; validation and leave-one-out are untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest

from client_app.base import full_rank_metrics
from corolla.config import resolve, validate
from corolla.data.federation import Federation
from corolla.keys import ConfigError
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions


def _fed() -> Federation:
    # one user: train {0}, validation {1}, test {2}
    ptr = {s: np.array([0, 1]) for s in ("train", "valid", "test")}
    idx = {"train": np.array([0]), "valid": np.array([1]), "test": np.array([2])}
    return Federation(1, 4, ptr, idx, [np.array([0])])


def test_a_validation_item_left_in_the_test_ranking_takes_its_place():
    scores = np.array([[9.0, 8.0, 7.0, 1.0]])   # train item, validation item, test item, other
    masked = full_rank_metrics(scores.copy(), _fed(), [0], "test", [1, 2], False)
    kept = full_rank_metrics(scores.copy(), _fed(), [0], "test", [1, 2], False, mask_valid=False)
    assert masked["hr@1"][0] == 1.0 and masked["ndcg@2"][0] == 1.0
    assert kept["hr@1"][0] == 0.0 and kept["hr@2"][0] == 1.0
    assert kept["ndcg@2"][0] == pytest.approx(1 / np.log2(3))
    # validation ranks the same either way (its own items are the truth, train masked)
    v1 = full_rank_metrics(scores.copy(), _fed(), [0], "valid", [1], False)
    v2 = full_rank_metrics(scores.copy(), _fed(), [0], "valid", [1], False, mask_valid=False)
    assert v1 == v2 and v1["hr@1"][0] == 1.0


def test_the_key_is_refused_on_leave_one_out():
    with pytest.raises(ConfigError, match="test-mask-valid"):
        validate(resolve("fedavg-pmf-ml100k", {"test-mask-valid": False}))
    validate(resolve("distfedavg-ml100k", {"test-mask-valid": False}))


def test_a_dist_fedavg_run_changes_its_test_ranking_only(tmp_path, data_dir):
    small = "num-rounds=1 min-user-interactions=200 clients-per-round=6 local-epochs=1"
    out = {}
    for flag in ("true", "false"):
        t = InProcessTransport(partitions(1, {"data-dir": data_dir}))
        run_federation(t, {"preset": "distfedavg-ml100k", "set": f"{small} test-mask-valid={flag}",
                           "out-dir": str(tmp_path / flag), "data-dir": data_dir})
        out[flag] = json.loads((tmp_path / flag / "rounds.jsonl").read_text().splitlines()[-1])
    assert out["true"]["valid"] == out["false"]["valid"]                  # validation untouched
    assert out["true"]["metrics"]["ndcg@10"] > out["false"]["metrics"]["ndcg@10"]   # test: fewer items masked
    assert out["true"]["metrics"]["hr@10"] >= out["false"]["metrics"]["hr@10"]
