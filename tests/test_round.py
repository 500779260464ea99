"""The round contract (``corolla.round``) and the small stages that execute it: each of
``Exchanger.parse``'s checks and ``RoundLoop``'s stages on its own, with fakes; the node host's
batch fallback (a failed batch is logged, no client trains twice)."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from corolla.messages import ClientOut, EvalPart, PhaseReply, PhaseRequest, RunInfo
from corolla.protocol import ArraySpec
from corolla.round import (DEFAULT_CONTROL, Control, Download, Phase, PhaseSpec, SecAggStep, decode_controls,
                           encode_controls, evaluates, step)
from server_app.exchange import Exchanger, PhaseStats
from server_app.loop import Deferred, NoClients, RoundLoop, RoundState
from server_app.roster import Roster
from server_app.transport import REJECTED_PREFIX, TIMEOUT_PREFIX
from strategies.base import ClientResult, CorollaStrategy

RUN = RunInfo("k", "h")


# ------------------------------------------------------------------------- the contract
def test_phases_and_steps_are_typed_and_unknown_names_refused():
    assert step("train") is Phase.TRAIN and step("secagg-unmask") is SecAggStep.UNMASK
    assert Phase.TRAIN == "train" and Phase.TRAIN.trains and not Phase.EVALUATE.trains and not Phase.TOPK.trains
    with pytest.raises(ValueError, match="phase 'upload-me': expected one of train, upload"):
        step("upload-me")


def test_controls_travel_as_typed_fields_only_when_not_default():
    assert encode_controls({1: DEFAULT_CONTROL, 2: Control(upload=False)}) == '{"2": {"upload": false}}'
    assert decode_controls('{"2": {"upload": false}}') == {2: Control(upload=False)}
    for bad in ('{"2": {"upload": 1}}', '{"2": {"evil": true}}', "[1]", 3):
        with pytest.raises(ValueError, match="control"):
            decode_controls(bad)
    req = PhaseRequest(Phase.TRAIN, 1, [1, 2], RUN, control={2: Control(upload=False)})
    back = PhaseRequest.decode(req.encode())
    assert back.control_of(2) == Control(upload=False) and back.control_of(1) == DEFAULT_CONTROL
    assert "control" not in PhaseRequest(Phase.TRAIN, 1, [1], RUN, control={1: Control()}).encode()["config"]


@pytest.mark.parametrize("every,rounds,expected", [(1, 3, [1, 2, 3]), (2, 5, [2, 4, 5]), (10, 3, [3])])
def test_the_evaluation_schedule_is_one_definition(every, rounds, expected):
    from client_app.oneuser import evaluated
    assert [r for r in range(1, rounds + 1) if evaluates(r, rounds, every)] == expected
    assert [r for r in range(1, rounds + 1) if evaluated({"num-rounds": rounds, "eval-every": every}, r)] == expected


class Stub(CorollaStrategy):
    """Two clients per node; records the effect hooks in order."""
    counted_phases = (Phase.TRAIN,)

    def __init__(self, cfg=None):
        from corolla.config import resolve
        super().__init__(resolve("fedavg-mf-ml100k", {"fraction-train": 1.0, "seed": 0, "eval-every": 1,
                                                      "num-rounds": 2, "phase-timeout": 1.0, **(cfg or {})}))
        self.calls: list[tuple] = []

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        return {"w": ArraySpec((3,), "float32")} if phase == Phase.TRAIN and control.upload else {}

    def summary(self):
        pass

    def delivered(self, phase, rnd, cids):
        self.calls.append(("delivered", str(phase), rnd, tuple(cids)))

    def aggregate_phase(self, phase, rnd, results):
        self.calls.append(("aggregate", str(phase), rnd, tuple(sorted(results))))
        return {}

    def evaluated(self, rnd, results):
        self.calls.append(("evaluated", rnd, tuple(sorted(results))))


def _exchanger(strategy=None):
    s = strategy or Stub()
    r = Roster()
    r.n_items = 5
    r.nodes = {10: [0, 1], 11: [2, 3]}
    for node, cids in r.nodes.items():
        for c in cids:
            r.clients[c] = {"users": 1, "train": 4, "node": node}
    s.roster = r
    return Exchanger(s, r, None, RUN, dict(s.cfg)), s


def test_round_spec_states_the_round_as_data():
    s = Stub({"num-rounds": 3, "eval-every": 2})
    spec = s.round_spec(2, 3)
    assert spec.phases == (PhaseSpec(Phase.TRAIN, counted=True),) and spec.evaluate and not spec.eval_fuses_after
    assert not s.round_spec(1, 3).evaluate


# --------------------------------------------------------------------- the exchanger's checks
def _req(cids, ev=None, control=None):
    return PhaseRequest(Phase.TRAIN, 1, cids, RUN, evaluation=ev, control=control or {})


def test_transport_error_rejected_late_and_failed():
    ex, _ = _exchanger()
    for text, dead, flagged in ((f"{REJECTED_PREFIX} too big", False, True), (f"{TIMEOUT_PREFIX} 1 s", False, False),
                                ("error 2: Node Unavailable", True, False)):
        st = PhaseStats("train")
        ex.roster.dead_nodes.clear()
        ex.roster.flags.clear()
        ex.transport_error(Phase.TRAIN, 10, _req([0, 1]), text, st)
        assert [e["client"] for e in st.excluded] == [0, 1]
        assert (10 in ex.roster.dead_nodes) == dead and bool(ex.roster.flags) == flagged


def test_decode_excludes_a_malformed_reply_and_flags_the_node():
    ex, _ = _exchanger()
    st = PhaseStats("train")
    assert ex.decode(Phase.TRAIN, 10, _req([0, 1]), {"results": "nope"}, st) is None
    assert len(st.excluded) == 2 and "malformed" in ex.roster.flags[10][0]


def test_strangers_are_excluded_and_flag_the_node():
    ex, _ = _exchanger()
    st = PhaseStats("train")
    reply = PhaseReply({0: ClientOut({}, {}), 2: ClientOut({}, {}), 9: ClientOut({}, {})})
    ex.strangers(Phase.TRAIN, 10, _req([0, 1]), reply, st)
    assert {e["client"]: e["reason"] for e in st.excluded} == {
        2: "reply for a client hosted by another node; ignored", 9: "reply for a client not asked of this node in "
        "this phase; ignored"} and ex.roster.flags[10]


def test_client_result_checks_the_payload_against_the_control_it_was_sent():
    ex, _ = _exchanger()
    st = PhaseStats("train")
    ok = (({1: ClientOut({"w": np.zeros(3, np.float32)}, {"num-examples": 4})}), {})
    assert ex.client_result(Phase.TRAIN, 10, 1, ok, st) is not None
    # told not to upload (Control(upload=False)): an upload is not what was asked
    assert ex.client_result(Phase.TRAIN, 10, 1, ok, st, Control(upload=False)) is None
    assert "unexpected" in st.excluded[-1]["reason"]
    for mets, why in (({}, "num-examples: missing"), ({"num-examples": -1}, "num-examples: expected"),
                      ({"num-examples": 1, "train-loss": float("nan")}, "finite")):
        part = ({1: ClientOut({"w": np.zeros(3, np.float32)}, mets)}, {})
        assert ex.client_result(Phase.TRAIN, 10, 1, part, st) is None and why in st.excluded[-1]["reason"]
    assert ex.client_result(Phase.TRAIN, 10, 1, ({}, {1: "Traceback\nValueError: boom"}), st) is None
    assert st.excluded[-1]["reason"] == "ValueError: boom"


def test_reply_evaluation_and_the_state_check():
    ex, _ = _exchanger()
    res = ClientResult({}, {"valid/hr@10": [1.0], "test/hr@10": [0.0], "train-loss": 0.3})
    assert ex.reply_evaluation(res).metrics == {"valid/hr@10": [1.0], "test/hr@10": [0.0]}
    assert ex.reply_evaluation(ClientResult({}, {"train-loss": 0.3})) is None
    st = PhaseStats("train")
    ex.state_check(3, 10, 1, ClientResult({}, {"state-round": 2}), st)
    ex.state_check(4, 10, 1, ClientResult({}, {"state-round": 1}), st)   # it trained 3, started 4 from 1
    assert st.state_lost == [1] and ex.trained[1] == 4


def test_evaluations_carried_by_the_message():
    ex, _ = _exchanger()
    st = PhaseStats("train")
    reply = PhaseReply(eval_results={2: ClientOut({}, {"test/hr@10": [1.0]})}, eval_errors={3: "x\nKeyError: k"})
    out = ex.evaluations(11, _req([], EvalPart(1, [2, 3])), reply, st)
    assert set(out) == {2} and st.excluded[0]["client"] == 3


def test_parse_returns_an_outcome_with_the_reply_evaluations():
    ex, s = _exchanger()
    flat = PhaseReply({0: ClientOut({"w": np.ones(3, np.float32)}, {"num-examples": 4, "test/hr@10": [1.0]}),
                       1: ClientOut({"w": np.ones(3, np.float32)}, {"num-examples": 4})}).encode()
    out = ex.parse(Phase.TRAIN, [(10, _req([0, 1]))], [(0, flat)], PhaseStats("train"), 1)
    assert set(out.results) == {0, 1} and set(out.reply_evals) == {0} and out.stats.replies == 1


# -------------------------------------------------------------------------- the loop's stages
class Transport:
    """Every node answers every client with a valid upload and metrics."""

    def __init__(self):
        self.calls = []

    def node_ids(self):
        return [10, 11]

    def exchange(self, msgs, mtype, timeout, limits=None):
        for i, (node, flat) in enumerate(msgs):
            req = PhaseRequest.decode(flat)
            self.calls.append((mtype, req.phase, req.round, tuple(req.clients),
                               req.evaluation.round if req.evaluation else None))
            res = {c: ClientOut({"w": np.ones(3, np.float32)} if req.phase == "train" else {},
                                {"num-examples": 4, **({} if req.phase == "train" else {"test/hr@10": [1.0]})})
                   for c in req.clients}
            ev = {c: ClientOut({}, {"test/hr@10": [1.0], "valid/hr@10": [1.0]})
                  for c in (req.evaluation.clients if req.evaluation else [])}
            yield i, PhaseReply(res, eval_results=ev).encode()


def _loop(cfg=None):
    ex, s = _exchanger(Stub(cfg))
    ex.transport = Transport()
    ex.roster.refresh = lambda *a: None
    return RoundLoop(s, ex), s, ex


def test_start_refuses_a_federation_without_clients():
    ex, s = _exchanger()
    ex.roster = Roster()
    ex.transport = type("T", (), {"node_ids": lambda self: [], "exchange": lambda *a: iter(())})()
    with pytest.raises(NoClients, match="no node hosts any logical client"):
        RoundLoop(s, ex).start()


def test_request_hands_the_evaluation_download_over_once():
    loop, s, _ = _loop()
    ev = loop.request(1, "before", replied={0})
    assert ev.targets == [1, 2, 3] and s.calls == [("delivered", "evaluate", 1, (1, 2, 3))]


def test_a_deferred_round_is_recorded_before_the_next_round_aggregates():
    """Round 1's evaluation travels with round 2's train message; the strategy learns that it
    arrived (``evaluated``) before it folds round 2 in, so round 1's checkpoint is round 1's."""
    loop, s, ex = _loop()
    rec = []

    class R:
        def end_round(self, strategy, rnd, *a):
            rec.append((rnd, list(strategy.calls)))
            return False

        def progress(self, *a):
            pass
    loop.recorder = R()
    loop.run(2)
    train_msgs = [c for c in ex.transport.calls if c[1] == "train"]
    assert [c[4] for c in train_msgs] == [None, None, 1, 1]           # round 2's messages carry round 1's evaluation
    assert [c[0] for c in ex.transport.calls].count("evaluate") == 2   # the last round's evaluation: its own exchange
    rnd1_calls = rec[0][1]
    assert rec[0][0] == 1 and ("evaluated", 1, (0, 1, 2, 3)) in rnd1_calls
    assert ("aggregate", "train", 2, (0, 1, 2, 3)) not in rnd1_calls   # round 2 not folded in yet
    order = [c[0] for c in s.calls]
    assert order.index("evaluated") < [i for i, c in enumerate(s.calls) if c[:3] == ("aggregate", "train", 2)][0]


def test_evaluate_round_defers_fuses_or_exchanges():
    loop, s, ex = _loop()
    r = RoundState(1, [0, 1, 2, 3], 0.0)
    stop, d = loop.evaluate_round(s.round_spec(1, 2), r, 2)
    assert not stop and isinstance(d, Deferred) and d.ev.targets == [0, 1, 2, 3]
    stop, d = loop.evaluate_round(s.round_spec(2, 2), RoundState(2, [0, 1, 2, 3], 0.0), 2)
    assert not stop and d is None and ex.transport.calls[-1][0] == "evaluate"   # the last round: its own exchange


# ------------------------------------------------------------------------ the node's batch fallback
def test_a_failed_batch_is_logged_and_no_client_trains_twice(tmp_path, data_dir, caplog):
    from client_app import host as H
    from client_app.base import PhaseResult
    from corolla.config import resolve

    cfg = resolve("fedavg-mf-ml100k", {"split": "loo", "partition": "blocks", "num-clients": 4, "protocol": "loo",
                                       "dim": 4})
    node = H.NodeHost({"partition-id": 0, "num-partitions": 1, "data-dir": data_dir}, cfg,
                      RunInfo("batch", "h", str(tmp_path)))
    trained: dict[int, list[int]] = {}

    class Client(H.registry.client_class(cfg)):
        @staticmethod
        def batch_train(clients, rnd, states, shared, personals):
            for c, st in zip(clients, states):   # the batch saves one client, then fails on another
                if c.cid == 0:
                    node.store.save(0, rnd, {"w": np.full(2, 99.0)})
            raise RuntimeError("one client's data broke the batch")

        def init_state(self):
            return {"w": np.zeros(2)}

        def phase_train(self, rnd, state, shared, personal):
            trained.setdefault(self.cid, []).append(float(state["w"][0]))
            return PhaseResult({}, {"num-examples": 1}, {"w": state["w"] + 1})
    orig = H.registry.client_class
    H.registry.client_class = lambda c: Client
    try:
        with caplog.at_level(logging.WARNING, logger="corolla.node"):
            out = node.run_phase(Phase.TRAIN, 1, [0, 1, 2, 3], {}, {})
    finally:
        H.registry.client_class = orig
    assert "batch of phase train failed for clients 0-3" in caplog.text and "broke the batch" in caplog.text
    assert trained == {0: [0.0], 1: [0.0], 2: [0.0], 3: [0.0]}   # each once, from its state before the phase
    assert all(isinstance(r, PhaseResult) for r in out.values())
    assert float(node.store.load(0, 1)[1]["w"][0]) == 1.0          # not the batch's 99, not trained twice


def _run_with_client(tmp_path, data_dir, client_cls):
    """A 2-round in-process run of a small FedAvg-MF federation (4 clients, 2 nodes) whose nodes
    host ``client_cls(base)`` instead of the method's client class."""
    from client_app import host as H
    from launcher.inproc import InProcessTransport, partitions
    from server_app.app import run_federation

    sets = "num-rounds=2 eval-every=1 patience=0 split=loo partition=blocks num-clients=4 protocol=loo dim=4"
    orig = H.registry.client_class
    H.registry.client_class = lambda c: client_cls(orig(c))
    try:
        return run_federation(InProcessTransport(partitions(2, {"data-dir": data_dir})),
                              {"preset": "fedavg-mf-ml100k", "set": sets, "out-dir": str(tmp_path / "run"),
                               "data-dir": data_dir})
    finally:
        H.registry.client_class = orig


def _raising(ids):
    """A client class whose training raises for the clients ``ids`` (every other one trains)."""
    def make(base):
        class Client(base):
            @staticmethod
            def batch_train(clients, rnd, states, shared, personals):
                if any(c.cid in ids for c in clients):
                    raise RuntimeError("the batch holds a broken client")   # the host retries one by one
                return base.batch_train(clients, rnd, states, shared, personals)

            def phase_train(self, rnd, state, shared, personal):
                if self.cid in ids:
                    raise RuntimeError(f"indices should be on the same device (client {self.cid})")
                return super().phase_train(rnd, state, shared, personal)
        return Client
    return make


def test_a_phase_where_every_client_raised_stops_the_run(tmp_path, data_dir):
    """Every client raising in its own code is one defect (a device mismatch, found on a GPU this
    way): the run stops at that phase with the reasons, instead of recording the untrained model
    as every round's result."""
    import json

    from server_app.loop import EveryClientRaised

    with pytest.raises(EveryClientRaised, match=r"round 1, phase train: every one of the 4 logical clients asked "
                                                r"raised: .*same device.*\(1 client\)"):
        _run_with_client(tmp_path, data_dir, _raising({0, 1, 2, 3}))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "every one of the 4 logical clients" in summary["error"]


def test_a_phase_where_some_clients_raised_goes_on_without_them(tmp_path, data_dir):
    s = _run_with_client(tmp_path, data_dir, _raising({0, 2}))
    assert s["status"] == "completed" and s["rounds_completed"] == 2
    import json
    rounds = [json.loads(x) for x in open(tmp_path / "run" / "rounds.jsonl")]
    assert sorted(x["client"] for x in rounds[0]["phases"][0]["excluded"]) == [0, 2]


@pytest.mark.parametrize("phase_timeout,handshake_timeout,expected", [(1.0, 600.0, 600.0), (900.0, 600.0, 900.0)])
def test_first_contact_waits_for_the_handshake_timeout_not_a_short_phase_timeout(phase_timeout, handshake_timeout,
                                                                                 expected):
    # a short phase-timeout (to notice a lost node quickly) must not bound a node's start; a long one
    # still lengthens the handshake's wait
    ex, _ = _exchanger(Stub({"phase-timeout": phase_timeout, "handshake-timeout": handshake_timeout}))
    waits: list[tuple[str, float]] = []

    class T(Transport):
        def exchange(self, msgs, mtype, timeout, limits=None):
            waits.append((mtype, timeout))
            if mtype != "query.handshake":
                return super().exchange(msgs, mtype, timeout, limits)
            return iter([(i, f"{TIMEOUT_PREFIX} {timeout:.0f} s") for i in range(len(msgs))])  # as GridTransport

    ex.transport = T()
    ex.exchange(Phase.TRAIN, 1, [0, 1, 2, 3], Download())    # a round's phase: phase-timeout
    assert [t for _, t in waits] == [phase_timeout]
    ex.roster = Roster()
    ex.handshake([10, 11])
    assert waits[1:] == [("query.handshake", expected)]
    assert ex.roster.dead_nodes == {10, 11}     # no reply by then: left out, with the key to raise named
    assert ex.roster.failures[10] == f"no reply within {expected:.0f} s to its handshake (handshake-timeout)"
    assert str(NoClients(ex.roster.failures)) == (f"no node could host a logical client: no reply within {expected:.0f} s "
                                                  "to its handshake (handshake-timeout) (nodes 10, 11)")


def test_a_run_resumed_from_a_config_without_handshake_timeout_keeps_its_phase_timeout():
    ex, _ = _exchanger()
    ex.cfg = {k: v for k, v in ex.cfg.items() if k != "handshake-timeout"}   # an older run's config.json
    assert ex.handshake_timeout() == ex.cfg["phase-timeout"] == 1.0
