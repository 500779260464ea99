"""GridTransport's reply polling (server_app/transport.py): every 0.05 s while replies come or the
phase is young, every 0.2 s after 5 s without a reply, back to 0.05 s once one arrives."""
from __future__ import annotations

from types import SimpleNamespace

from server_app import transport


class Clock:
    def __init__(self):
        self.t = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(round(s, 3))
        self.t += s


class Grid:
    """Two messages; the reply to the first arrives at t = 6 s, to the second at t = 12 s."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.given: set[str] = set()

    def push_messages(self, msgs):
        return ["m0", "m1"]

    def pull_messages(self, ids):
        out = []
        for mid, at in (("m0", 6.0), ("m1", 12.0)):
            if mid in ids and mid not in self.given and self.clock.t >= at:
                self.given.add(mid)
                out.append(SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=mid), has_error=lambda: True,
                                           error=SimpleNamespace(code=0, reason="test")))
        return out


def test_polls_fast_then_slow_then_fast_again(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(transport, "time", clock)
    monkeypatch.setattr(transport, "Message", lambda **kw: kw)
    monkeypatch.setattr(transport, "to_records", lambda c: c)
    t = transport.GridTransport(Grid(clock))
    got = list(t.exchange([(1, {}), (2, {})], "train", timeout=60))
    assert [n for n, _ in got] == [0, 1]
    first_slow = clock.sleeps.index(0.2)
    assert set(clock.sleeps[:first_slow]) == {0.05} and 4.9 <= sum(clock.sleeps[:first_slow]) <= 5.1
    # after the reply at 6 s: fast again for 5 s, then slow until the second reply at 12 s
    after = clock.sleeps[first_slow:]
    k = next(i for i, s in enumerate(after) if s == 0.05)
    assert set(after[:k]) == {0.2} and 0.05 in after and after[-1] == 0.2
