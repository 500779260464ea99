"""``corolla supernode``: Flower's own SuperNode with its fixed waits made settable.

Flower 1.39's SuperNode (``flwr/supernode/start_client_internal.py``) sleeps a hard-coded
**3 s** whenever a pull from the SuperLink finds no message (``time.sleep(3)`` in
``start_client_internal``) and checks for the ClientApp's reply in **0.5 s** steps
(``time.sleep(0.5)`` in ``_push_messages``, twice). On one machine those waits, not the work,
set the floor of a round (measured: ``docs/results.md``, "Below Flower's floor").

This wrapper changes nothing else: it replaces the ``time`` name *inside that one module* by
an object whose ``sleep`` maps the 3 s wait to ``--idle-poll`` and the 0.5 s waits to
``--reply-poll`` (every other attribute is the real ``time`` module), then calls Flower's own
``flower_supernode`` entry point with the remaining arguments, so every ``flower-supernode``
flag works unchanged. The substitution is guarded by an exact version check: on any Flower other
than :data:`FLOWER_VERSION` (or if the module no longer has the waits) it warns and runs the
stock SuperNode.

``--pull-backoff`` sets the first retry of Flower's object pulls (1 s in Flower; see
:mod:`flower_io.pulls`) in the SuperNode and, through ``COROLLA_PULL_BACKOFF``, in the ClientApps
its fork server starts.

With ``--clientapp-start fork`` (the default) the SuperNode's SuperExec also forks each
ClientApp from a warm parent instead of starting a fresh interpreter per message
(:mod:`launcher.warm`); ``exec`` is Flower's way.

The idle poll is a trade: each idle SuperNode sends the SuperLink one pull RPC per idle-poll
interval. On loopback with a handful of nodes 0.05 s costs little (measured in
``docs/results.md``, "SuperLink CPU per idle node"); across machines, with many nodes on one
SuperLink, the default :data:`DEFAULT_IDLE_POLL` keeps that load at a few pulls per second per
node.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from typing import Any

from flower_io.pulls import DEFAULT_PULL_BACKOFF, ENV as PULL_BACKOFF_ENV, set_pull_backoff

FLOWER_VERSION = "1.39.0"      # the Flower whose start_client_internal has exactly these waits
STOCK_IDLE_S, STOCK_REPLY_S = 3.0, 0.5
DEFAULT_IDLE_POLL = 0.5        # across machines: 2 pulls/s per idle node (Flower: 1 per 3 s)
DEFAULT_REPLY_POLL = 0.05
LOCAL_IDLE_POLL = 0.05         # what corolla run --mode local and the Docker image use on loopback


class Waits:
    """Stands in for the ``time`` module inside ``flwr.supernode.start_client_internal``: its
    ``sleep`` maps Flower's two fixed waits to the chosen ones; everything else is ``time``."""

    def __init__(self, idle: float, reply: float):
        self.idle, self.reply = idle, reply

    def map(self, seconds: float) -> float:
        if seconds == STOCK_IDLE_S:
            return self.idle
        if seconds == STOCK_REPLY_S:
            return self.reply
        return seconds

    def sleep(self, seconds: float) -> None:
        time.sleep(self.map(seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def seconds_arg(flag: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects seconds (a number), got {text!r}") from None
        if not 0.001 <= v <= 60:
            raise argparse.ArgumentTypeError(f"{flag} expects seconds between 0.001 and 60, got {v}")
        return v
    return parse


def split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Corolla's two flags out of ``argv``; the rest goes to ``flower-supernode`` untouched."""
    p = argparse.ArgumentParser(prog="corolla supernode", add_help=False)
    p.add_argument("--idle-poll", type=seconds_arg("--idle-poll"), default=DEFAULT_IDLE_POLL)
    p.add_argument("--reply-poll", type=seconds_arg("--reply-poll"), default=DEFAULT_REPLY_POLL)
    p.add_argument("--clientapp-start", choices=("fork", "exec"), default="fork")
    p.add_argument("--pull-backoff", type=seconds_arg("--pull-backoff"), default=DEFAULT_PULL_BACKOFF)
    return p.parse_known_args(argv)


def with_key_in_node_config(rest: list[str]) -> list[str]:
    """``rest`` with ``auth-key-file="<absolute path>"`` added to ``--node-config`` when the
    SuperNode authenticates (``--auth-supernode-private-key``): its ClientApps prove that key in
    the handshake (the run records the node's key fingerprint with its assignment) and sign their
    secure-aggregation round keys with it (``client_app/secure.py``). The key stays where it is: only
    its path travels, within the node."""
    path = None
    for i, a in enumerate(rest):
        if a == "--auth-supernode-private-key" and i + 1 < len(rest):
            path = rest[i + 1]
        elif a.startswith("--auth-supernode-private-key="):
            path = a.split("=", 1)[1]
    if not path:
        return rest
    entry = f'auth-key-file={json.dumps(os.path.abspath(os.path.expanduser(path)))}'
    out = list(rest)
    for i, a in enumerate(out):
        if a == "--node-config" and i + 1 < len(out):
            if "auth-key-file" not in out[i + 1]:
                out[i + 1] = f"{out[i + 1]} {entry}".strip()
            return out
        if a.startswith("--node-config="):
            if "auth-key-file" not in a:
                out[i] = f"{a} {entry}"
            return out
    return [*out, "--node-config", entry]


def waits_unsupported() -> bool:
    """Whether the installed Flower is not :data:`FLOWER_VERSION` (read from its metadata, without
    importing it)."""
    from importlib.metadata import version as dist_version
    return dist_version("flwr") != FLOWER_VERSION


def install_waits(idle: float, reply: float) -> bool:
    """Put :class:`Waits` into Flower's SuperNode loop; False (and a warning) when this Flower is
    not the one whose waits were read, in which case nothing is changed."""
    import flwr
    from flwr.supernode import start_client_internal as sci
    version = getattr(flwr, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("flwr")
    if version != FLOWER_VERSION or getattr(sci, "time", None) is not time:
        warnings.warn(f"corolla supernode: Flower {version} is not {FLOWER_VERSION}, whose SuperNode waits were "
                      "read; running the stock SuperNode (3 s idle poll, 0.5 s reply poll)", stacklevel=2)
        return False
    sci.time = Waits(idle, reply)
    return True


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.split("\n\n")[0] + "\n\nusage: corolla supernode [--idle-poll S] [--reply-poll S] "
              "FLOWER-SUPERNODE-ARGS...\n  --idle-poll S   wait after an empty pull (Flower: 3 s; default "
              f"{DEFAULT_IDLE_POLL})\n  --reply-poll S  step while waiting for the ClientApp's reply (Flower: 0.5 s; "
              f"default {DEFAULT_REPLY_POLL})\n  --pull-backoff S  first retry of an object pull that found a chunk not "
              f"yet uploaded (Flower: 1 s; default {DEFAULT_PULL_BACKOFF}); also the forked ClientApps'\n"
              "  --clientapp-start fork|exec  fork each ClientApp from a process that "
              "has imported Flower and torch (default) or start a fresh one per message (Flower)\n"
              "the rest: flower-supernode --help")
        return 0
    ours, rest = split_args(argv)
    if ours.clientapp_start == "fork" and not waits_unsupported():
        from launcher import warm
        warm.install()   # first thing: the fork server's imports overlap the SuperNode's own start
    if set_pull_backoff(ours.pull_backoff):    # this SuperNode's pulls, and (by the environment) its ClientApps'
        os.environ[PULL_BACKOFF_ENV] = str(ours.pull_backoff)
    install_waits(ours.idle_poll, ours.reply_poll)
    from flwr.supernode.cli import flower_supernode
    sys.argv = ["flower-supernode", *with_key_in_node_config(rest)]
    flower_supernode()
    return 0


if __name__ == "__main__":
    sys.exit(main())
