"""The first wait of Flower's object pulls, made settable (flower_io/pulls.py). The pins of
Flower's pull functions per line, and the stock behaviour on another Flower: tests/test_compat.py."""
from __future__ import annotations

import pytest

from flower_io import pulls


@pytest.fixture
def kwdefaults():
    from flwr.supercore.inflatable import inflatable_utils as iu
    funcs = (iu.pull_objects, iu.pull_and_inflate_object_from_tree)
    saved = [dict(f.__kwdefaults__) for f in funcs]
    yield iu.pull_objects.__kwdefaults__
    for f, kw in zip(funcs, saved):
        f.__kwdefaults__.clear()
        f.__kwdefaults__.update(kw)


def test_set_pull_backoff_changes_only_the_two_defaults(kwdefaults):
    before = dict(kwdefaults)
    assert pulls.set_pull_backoff(0.02, 1.0)
    assert kwdefaults["initial_backoff"] == 0.02 and kwdefaults["backoff_cap"] == 1.0
    assert {k: v for k, v in kwdefaults.items() if k not in ("initial_backoff", "backoff_cap")} == \
        {k: v for k, v in before.items() if k not in ("initial_backoff", "backoff_cap")}
    assert pulls.pull_backoff() == 0.02


def test_pulls_retry_after_the_set_backoff(kwdefaults):
    """A chunk that is not there yet is asked for again after ``initial`` s, not Flower's 1 s."""
    import time

    from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError, pull_objects
    pulls.set_pull_backoff(0.02)
    calls = []

    def fetch(object_id):
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ObjectUnavailableError(object_id)
        return b"x"

    t0 = time.monotonic()
    assert pull_objects(["a"], fetch) == {"a": b"x"}
    assert len(calls) == 3 and time.monotonic() - t0 < 0.5   # 0.02 + 0.04 s, with jitter


def test_set_values_are_checked_before_flower_is_touched(kwdefaults):
    stock = dict(kwdefaults)
    with pytest.raises(ValueError, match="the pull backoff expects seconds between"):
        pulls.set_pull_backoff(0)
    with pytest.raises(ValueError, match="the pull backoff cap expects seconds"):
        pulls.set_pull_backoff(0.02, "later")
    assert kwdefaults == stock


def test_bad_values_name_their_source(monkeypatch):
    monkeypatch.setenv(pulls.ENV, "soon")
    with pytest.raises(ValueError, match="COROLLA_PULL_BACKOFF expects seconds"):
        pulls.env_backoff()
    monkeypatch.setenv(pulls.ENV, "0")
    with pytest.raises(ValueError, match="COROLLA_PULL_BACKOFF expects seconds between"):
        pulls.env_backoff()
    monkeypatch.delenv(pulls.ENV)
    assert pulls.env_backoff() == pulls.DEFAULT_PULL_BACKOFF
