"""strategies/owed.py: what a personalised strategy owes its clients, until it has reached them."""

import numpy as np

from corolla.round import Phase
from strategies.owed import Owed


def _a(x):
    return np.full(2, float(x), np.float32)


def test_training_consumes_and_an_unconfirmed_evaluation_is_owed_again():
    o = Owed()
    o.owe(1, {"q": _a(1)})
    o.owe(2, {"q": _a(2)})
    assert set(o.select([1, 2, 3])) == {1, 2}
    o.handed(Phase.TRAIN, [1])
    assert 1 not in o and 2 in o
    o.handed(Phase.EVALUATE, [2])
    assert 2 not in o and 2 in o.in_flight
    o.settle({})                                   # client 2 did not reply: owed again
    np.testing.assert_array_equal(o.pending[2]["q"], _a(2))
    o.handed(Phase.EVALUATE, [2])
    o.settle({2: object()})                        # it replied: done
    assert len(o) == 0 and o.in_flight == {}


def test_a_newer_aggregate_wins_over_one_that_was_in_flight():
    o = Owed()
    o.owe(5, {"q": _a(1)})
    o.handed(Phase.EVALUATE, [5])
    o.owe(5, {"q": _a(9)})                         # the next round's aggregate, before the evaluation ended
    o.settle({})
    np.testing.assert_array_equal(o.pending[5]["q"], _a(9))


def test_only_the_selected_keys_travel_and_the_rest_stays_owed():
    o = Owed()
    o.owe(0, {"theta": _a(1), "target.theta": _a(2)})
    only_theta = lambda k: not k.startswith("target.")   # noqa: E731
    assert set(o.select([0], only_theta)[0]) == {"theta"}
    o.handed(Phase.EVALUATE, [0], only_theta)
    assert set(o.pending[0]) == {"target.theta"} and set(o.in_flight[0]) == {"theta"}
    o.handed(Phase.EVALUATE, [0], lambda k: False)   # a download that carried nothing of it
    assert set(o.pending[0]) == {"target.theta"}
    o.settle({})
    assert set(o.pending[0]) == {"theta", "target.theta"}


def test_the_checkpoint_holds_what_is_owed_and_what_is_in_flight():
    o = Owed()
    o.owe(3, {"q": _a(3)})
    o.owe(4, {"q": _a(4)})
    o.handed(Phase.EVALUATE, [4])
    p = Owed()
    p.load_state_dict({**o.state_dict(), "other/key": _a(0)})
    assert p.clients() == [3, 4] and p.in_flight == {}
    np.testing.assert_array_equal(p.pending[4]["q"], _a(4))
