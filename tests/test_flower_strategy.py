"""A Corolla method driven through Flower's ``Strategy`` API (configure/aggregate train and
evaluate) equals the same round of Corolla's own loop."""

import numpy as np
from flwr.app import ConfigRecord, Message

from client_app.app import handle
from corolla.config import resolve
from corolla.messages import RunInfo, config_hash
from launcher.inproc import partitions
from server_app.exchange import Exchanger
from server_app.flower_strategy import FlowerStrategy
from server_app.loop import RoundLoop
from server_app.roster import Roster
from strategies.registry import strategy_class
from launcher.inproc import InProcessTransport

SMALL = {"num-rounds": 1, "split": "loo", "partition": "blocks", "num-clients": 6, "protocol": "loo", "dim": 8,
         "loss": "bpr", "train-samples": "per-positive", "batch-size": 1024, "lr": 0.05,
         "compat-fedcia-metrics": False, "select-metric": "ndcg@10", "patience": 0, "fused-evaluation": False}


def setup(tmp_path, data_dir, name):
    cfg = resolve("fedavg-mf-ml100k", SMALL)
    s = strategy_class(cfg)(cfg)
    s.roster = Roster()
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    ex = Exchanger(s, s.roster, t, RunInfo("k" + name, config_hash(cfg), str(tmp_path / name), data_dir), cfg)
    ex.handshake(t.node_ids())
    s.setup()
    return s, ex, t


def test_flower_api_round_equals_corolla_loop(tmp_path, data_dir, monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    # what a ServerApp process has: the identity of its run and node (messages need them)
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
    s, ex, t = setup(tmp_path, data_dir, "flower")
    f = FlowerStrategy(s, ex)
    msgs = list(f.configure_train(1, None, ConfigRecord(), None))
    assert {m.metadata.message_type for m in msgs} == {"train"} and len(msgs) == 2
    replies = [Message(handle(m.content, t.nodes[m.metadata.dst_node_id], t.run_states[m.metadata.dst_node_id]),
                       reply_to=m) for m in msgs]
    arrays, mets = f.aggregate_train(1, replies)
    assert mets["clients"] == 6 and "item.weight" in arrays
    ev = list(f.configure_evaluate(1, arrays, ConfigRecord(), None))
    ev_replies = [Message(handle(m.content, t.nodes[m.metadata.dst_node_id], t.run_states[m.metadata.dst_node_id]),
                          reply_to=m) for m in ev]
    test = f.aggregate_evaluate(1, ev_replies)

    ref, ref_ex, _ = setup(tmp_path, data_dir, "loop")
    loop = RoundLoop(ref, ref_ex)
    loop.run(1)
    assert np.array_equal(s.global_params["item.weight"], ref.global_params["item.weight"])
    pooled = loop.finish(loop.request(1, "before"), *[ref_ex.exchange("evaluate", 1, ref.available(),
                                                                     *ref.evaluate_download(1, ref.available()))[0]],
                         {})
    assert dict(test) == pooled["test"]["metrics"]
