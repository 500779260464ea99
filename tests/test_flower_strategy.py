"""Every method of the method table driven through Flower's one-step ``Strategy`` API
(``configure_train`` / ``aggregate_train`` / ``configure_evaluate`` / ``aggregate_evaluate``, as a
Flower user's own loop would call them) gives every round the metrics and the strategy state of
Corolla's own loop (``FlowerStrategy.start``), or is refused with one line when its round is more
than one training exchange (``NotOneStep``)."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message

from client_app.app import handle
from corolla import methods
from corolla.config import list_presets, resolve
from corolla.messages import RunInfo, config_hash
from corolla.round import Phase
from launcher.inproc import InProcessTransport, partitions
from server_app.exchange import Exchanger
from server_app.flower_strategy import FlowerStrategy, NotOneStep
from server_app.roster import Roster
from strategies.registry import strategy_class

ROUNDS = 2
SILO = {"split": "loo", "partition": "blocks", "num-clients": 6, "protocol": "loo", "dim": 8, "loss": "bpr",
        "train-samples": "per-positive", "batch-size": 1024, "lr": 0.05, "compat-fedcia-metrics": False,
        "select-metric": "ndcg@10", "patience": 0}
ONE_USER = {"min-user-interactions": 300, "local-epochs": 1, "patience": 0}   # 54 heavy users
ONE_STEP = {"fedavg", "fcf", "fedatt", "fedprox", "local", "fedca", "pfedrec", "gpfedrec", "ufgraphfr", "fedrecon", "metamf",
            "central", "perfedrec", "fedfast", "pfedgraph"}


@functools.lru_cache(maxsize=1)
def _preset_triples() -> dict[tuple, str]:
    out: dict[tuple, str] = {}
    for name in sorted((p.name for p in list_presets()), key=lambda n: ("ml100k" not in n, len(n), n)):
        c = resolve(name)
        out.setdefault((c["method"], c["harness"], c["model"]), name)
    return out


def config_for(m: methods.Method) -> dict:
    """A small run of declaration ``m``: its shortest preset, or a preset of its harness with the
    method and model set, shrunk to seconds."""
    triples = _preset_triples()
    model = m.models[0]
    name = triples.get((m.name, m.harness, model)) or next(
        p for (meth, h, mod), p in triples.items() if h == m.harness and mod == model)
    over = {"method": m.name, "model": model, "num-rounds": ROUNDS, "eval-every": 1}
    if m.harness == "silo" and model in ("mf", "ncf", "lightgcn"):
        over.update(SILO)
        if m.name == "central":   # one logical client holding every user (its declaration's check)
            over["num-clients"] = 1
    elif m.harness == "one-user":
        over.update(ONE_USER)
    else:   # the expanded harness and LGCN's silos: their own data, fewer epochs
        over["local-epochs"] = 1
    return resolve(name, over)


def _declarations():
    seen = {}
    for m in methods.table():
        seen.setdefault((m.name, m.harness, m.models), m)
    return list(seen.values())


class Recorder:
    """The rounds' test metrics as Corolla's loop records them."""

    def __init__(self):
        self.metrics: dict[int, dict] = {}

    def end_round(self, strategy, rnd, phase_stats, train_metrics, evaluation, wall_s, targets):
        if evaluation is not None:
            self.metrics[rnd] = evaluation["test"]["metrics"]
        return False

    def progress(self, *a):
        pass

    def discard(self, *a):
        pass


def _federation(tmp_path, data_dir, cfg, name):
    s = strategy_class(cfg)(cfg)
    s.roster = Roster()
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    ex = Exchanger(s, s.roster, t, RunInfo("k" + name, config_hash(cfg), str(tmp_path / name), data_dir), cfg)
    return s, ex, t


def _answer(t, msgs):
    return [Message(handle(m.content, t.nodes[m.metadata.dst_node_id], t.run_states[m.metadata.dst_node_id]),
                    reply_to=m) for m in msgs]


@pytest.fixture
def task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    # what a ServerApp process has: the identity of its run and node (messages need them)
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


@pytest.mark.parametrize("m", _declarations(), ids=lambda m: f"{m.name}-{m.harness}-{'/'.join(m.models)}")
def test_the_one_step_api_runs_the_method_as_the_loop_or_refuses_it(m, tmp_path, data_dir, task_identity):
    cfg = config_for(m)
    s, ex, t = _federation(tmp_path, data_dir, cfg, "flower")
    ex.handshake(t.node_ids())
    s.setup()
    f = FlowerStrategy(s, ex)
    if s.phases(1) != [Phase.TRAIN]:   # more than one training exchange: refused, in one line
        assert m.name not in ONE_STEP or m.harness == "expanded" or "gfcf" in m.models or m.client.endswith("LPSFedClient")
        with pytest.raises(NotOneStep, match=r"one-step Strategy API runs one training exchange per round"):
            list(f.configure_train(1, None, ConfigRecord(), None))
        return
    assert m.name in ONE_STEP, f"{m.label} runs one-step: add it to FlowerStrategy's docstring and ONE_STEP"
    metrics = {}
    for rnd in range(1, ROUNDS + 1):
        msgs = list(f.configure_train(rnd, None, ConfigRecord(), None))
        assert {x.metadata.message_type for x in msgs} == {"train"}
        f.aggregate_train(rnd, _answer(t, msgs))
        ev = list(f.configure_evaluate(rnd, None, ConfigRecord(), None))
        metrics[rnd] = dict(f.aggregate_evaluate(rnd, _answer(t, ev)))

    ref, ref_ex, _ = _federation(tmp_path, data_dir, cfg, "loop")
    rec = Recorder()
    FlowerStrategy(ref, ref_ex, rec).start(num_rounds=ROUNDS)
    assert metrics == rec.metrics, m.label
    a, b = s.state_dict(), ref.state_dict()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), m.label


def test_secure_aggregation_is_refused_by_the_one_step_api(tmp_path, data_dir, task_identity):
    cfg = resolve("fedavg-mf-ml100k", {**SILO, "num-rounds": 1, "secagg": "secaggplus"})
    s, ex, t = _federation(tmp_path, data_dir, cfg, "secure")
    ex.handshake(t.node_ids())
    s.setup()
    with pytest.raises(NotOneStep, match="secure aggregation adds key exchanges"):
        list(FlowerStrategy(s, ex).configure_train(1, None, ConfigRecord(), None))
