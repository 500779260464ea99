"""The first wait of Flower's object pulls, made settable (flower_io/pulls.py)."""
from __future__ import annotations

import inspect

import pytest

from flower_io import pulls


@pytest.fixture
def kwdefaults():
    from flwr.supercore.inflatable import inflatable_utils as iu
    saved = dict(iu.pull_objects.__kwdefaults__)
    yield iu.pull_objects.__kwdefaults__
    iu.pull_objects.__kwdefaults__.clear()
    iu.pull_objects.__kwdefaults__.update(saved)


def test_the_defaults_read_are_flowers_and_every_caller_uses_them():
    """The change rests on Flower 1.39's code: pull_objects' keyword defaults are the 1 s / 10 s
    constants, and the callers (ServerApp grid, SuperNode, ClientApp) pass no backoff of their own."""
    from flwr.supercore import constant
    from flwr.supercore.inflatable import inflatable_utils as iu
    assert (constant.PULL_INITIAL_BACKOFF, constant.PULL_BACKOFF_CAP) == (pulls.STOCK_INITIAL_S, pulls.STOCK_CAP_S)
    sig = inspect.signature(iu.pull_objects)
    assert sig.parameters["initial_backoff"].kind is inspect.Parameter.KEYWORD_ONLY
    import flwr
    from pathlib import Path
    root = Path(flwr.__file__).parent
    callers = [p for p in root.rglob("*.py") if "pull_objects(" in p.read_text() and p.name != "inflatable_utils.py"]
    assert callers
    for p in callers:
        assert "initial_backoff" not in p.read_text(), p


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


def test_other_flower_version_leaves_flower_alone(kwdefaults, monkeypatch):
    import flwr
    monkeypatch.setattr(flwr, "__version__", "1.40.0", raising=False)
    with pytest.warns(UserWarning, match="1.40.0 is not 1.39.0"):
        assert not pulls.set_pull_backoff(0.02)
    assert kwdefaults["initial_backoff"] == pulls.STOCK_INITIAL_S


def test_bad_values_name_their_source(monkeypatch):
    monkeypatch.setenv(pulls.ENV, "soon")
    with pytest.raises(ValueError, match="COROLLA_PULL_BACKOFF expects seconds"):
        pulls.env_backoff()
    monkeypatch.setenv(pulls.ENV, "0")
    with pytest.raises(ValueError, match="COROLLA_PULL_BACKOFF expects seconds between"):
        pulls.env_backoff()
    monkeypatch.delenv(pulls.ENV)
    assert pulls.env_backoff() == pulls.DEFAULT_PULL_BACKOFF
