"""A silo client's full-ranking evaluation scores its users in blocks once users × items is
large (Gowalla's subgraph clients); the per-user metrics do not depend on the blocks."""

from __future__ import annotations

import json

import client_app.base as base
from client_app.base import full_rank_block
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions


def test_the_block_is_every_user_until_the_entries_bound():
    assert full_rank_block(943, 1682) == 943                       # ML-100K: one block
    assert full_rank_block(6040, 3706) == 6040                     # ML-1M: one block
    assert full_rank_block(15000, 40981) == base.FULL_RANK_ENTRIES // 40981   # a Gowalla subgraph client
    assert full_rank_block(3, 10 ** 9) == 1                        # never below one user
    assert full_rank_block(0, 100) == 1


def _run(tmp_path, data_dir, name):
    t = InProcessTransport(partitions(1, {"data-dir": data_dir}))
    run_federation(t, {"preset": "fedavg-mf-ml100k", "set": "num-rounds=1 dim=8",
                       "out-dir": str(tmp_path / name), "data-dir": data_dir})
    return json.loads((tmp_path / name / "rounds.jsonl").read_text().splitlines()[-1])


def test_blocks_give_the_same_metrics_as_one_block(tmp_path, data_dir, monkeypatch):
    whole = _run(tmp_path, data_dir, "whole")
    monkeypatch.setattr(base, "FULL_RANK_ENTRIES", 1682 * 3)      # 3 users a block
    assert full_rank_block(9, 1682) == 3
    blocks = _run(tmp_path, data_dir, "blocks")
    assert whole["valid"] == blocks["valid"] and whole["metrics"] == blocks["metrics"]
    assert whole["metrics"]["ndcg@10"] > 0
