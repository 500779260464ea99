"""The in-process transport of the tests (kept in ``launcher.inproc``, which the CLI's
``--mode inproc`` uses too), and the client states a run left on its nodes."""

import json
from pathlib import Path

from launcher.inproc import InProcessTransport, partitions

__all__ = ["InProcessTransport", "partitions", "client_states"]


def client_states(run_dir, cids, rnd: int) -> list[dict]:
    """Each client's state after round ``rnd`` as the run at ``run_dir`` left it in its node
    state (``OUT/node-state``, the run's key from ``OUT/config.json``); every one must exist."""
    from corolla.state import StateStore

    run_dir = Path(run_dir)
    store = StateStore(run_dir / "node-state", json.loads((run_dir / "config.json").read_text())["run_key"])
    out = []
    for c in cids:
        got = store.load(c, rnd)
        assert got is not None and got[0] == rnd, f"client {c}: no state of round {rnd} ({got and got[0]})"
        out.append(got[1])
    return out
