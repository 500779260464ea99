"""``corolla supernode``: Flower's own SuperNode with its fixed waits made settable.

Flower's SuperNode (``flwr/supernode/start_client_internal.py``, the same code in 1.39 and 1.42)
sleeps a hard-coded **3 s** whenever a pull from the SuperLink finds no message
(``time.sleep(3)`` in ``start_client_internal``) and checks for the ClientApp's reply in **0.5 s**
steps (``time.sleep(0.5)`` in ``_push_messages``, twice). On one machine those waits, not the
work, set the floor of a round (``docs/results.md``, "Speed through a real SuperLink").

This wrapper changes nothing else: it has :func:`flower_io.compat.install_waits` replace the
``time`` name *inside that one module* by an object whose ``sleep`` maps the 3 s wait to
``--idle-poll`` and the 0.5 s waits to ``--reply-poll`` (every other attribute is the real
``time`` module), then calls Flower's own ``flower_supernode`` entry point with the remaining
arguments, so every ``flower-supernode`` flag of the installed line works unchanged (1.39:
``--superlink HOST:9092``, the gRPC Fleet API; 1.42: ``--superlink HOST:8000``, HTTP). On a
Flower release the compat layer has not read it warns once and runs the stock SuperNode.

``--pull-backoff`` sets the first retry of Flower's object pulls (1 s in Flower; see
:mod:`flower_io.pulls`) in the SuperNode and, through ``COROLLA_PULL_BACKOFF``, in the ClientApps
its fork server starts.

With ``--clientapp-start fork`` (the default) the SuperNode's SuperExec also forks each
ClientApp from a warm parent instead of starting a fresh interpreter per message
(:mod:`launcher.warm`); ``exec`` is Flower's way.

The idle poll is a trade: each idle SuperNode sends the SuperLink one pull request per idle-poll
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

from flower_io import compat
from flower_io.pulls import DEFAULT_PULL_BACKOFF, ENV as PULL_BACKOFF_ENV, set_pull_backoff

DEFAULT_IDLE_POLL = 0.5        # across machines: 2 pulls/s per idle node (Flower: 1 per 3 s)
DEFAULT_REPLY_POLL = 0.05
LOCAL_IDLE_POLL = 0.05         # what corolla run --mode local and the Docker image use on loopback


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


def _flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _probe(host: str, port: int, tls: bool, cafile: str | None, timeout: float) -> tuple[str, int | None] | None:
    """What answers at host:port: ``("http", status)`` for an HTTP/1.1 server (the status of a
    GET of the HTTP Fleet API's register route: 405 where the route is, since it takes only POST,
    404 where it is not; a GET, unlike an empty POST, leaves no error in the SuperLink's log),
    ``("h2", None)`` for an HTTP/2-only (gRPC) server; None when nothing can be told (not
    listening yet, TLS not verified, ...)."""
    import socket
    import ssl
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    try:
        if tls:
            ctx = ssl.create_default_context(cafile=cafile)
            ctx.set_alpn_protocols(["h2", "http/1.1"])
            try:
                sock = ctx.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, OSError):
                return None
            if sock.selected_alpn_protocol() == "h2":
                return ("h2", None)
        sock.settimeout(timeout)
        sock.sendall(f"GET /v1/fleet/register-node HTTP/1.1\r\nHost: {host}\r\n"
                     "Connection: close\r\n\r\n".encode())
        data = b""
        try:
            while len(data) < 64:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (socket.timeout, OSError):
            pass
        if data.startswith(b"HTTP/1."):
            try:
                return ("http", int(data.split()[1]))
            except (IndexError, ValueError):
                return ("http", None)
        return ("h2", None) if data else None
    finally:
        sock.close()


def fleet_mismatch(rest: list[str], timeout: float = 3.0) -> str | None:
    """One line when ``--superlink`` answers in another Fleet transport than this Flower's
    SuperNode speaks (a Flower 1.42 node at a 1.39 SuperLink, or the other way round), which
    stock Flower reports as a 404 exit or as endless connection retries; None when it matches or
    cannot be told (the SuperLink not up yet: Flower's own retries wait for it)."""
    version = compat.flower_version()
    transport = compat.fleet_transport(version)
    default_port = compat.LINES["1.39"].fleet_port if transport == "grpc" else compat.CONTROL_PORT
    addr = _flag(rest, "--superlink") or f"127.0.0.1:{default_port}"
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return None   # Flower's own error names a malformed address
    seen = _probe(host, int(port), "--insecure" not in rest, _flag(rest, "--root-certificates"), timeout)
    if seen is None:
        return None
    kind, status = seen
    if transport == "http" and kind == "h2":
        return (f"--superlink {addr} speaks gRPC (HTTP/2), not HTTP: it is a Flower 1.39 SuperLink's Fleet API "
                f"(--fleet-api-address); this node runs Flower {version}, whose SuperNode speaks HTTP only: install the "
                f"SuperLink's Flower line on this node (pip install -c constraints/flwr-1.39.txt ...) or run the "
                f"SuperLink on Flower {compat.major_minor(version)} and point the node at its --port (default {compat.CONTROL_PORT})")
    if transport == "http" and status == 404:
        return (f"--superlink {addr} has no HTTP Fleet API (404 on /v1/fleet/register-node: a Flower 1.39 SuperLink's "
                f"Control port?); this node runs Flower {version} (HTTP Fleet): install the SuperLink's Flower line on "
                f"this node (pip install -c constraints/flwr-1.39.txt ...) or run the SuperLink on Flower {compat.major_minor(version)}")
    if transport == "grpc" and kind == "http":
        return (f"--superlink {addr} answers HTTP/1.1, not gRPC: a Flower 1.42 SuperLink's Fleet API (or a SuperLink's "
                f"Control port); this node runs Flower {version}, whose SuperNode speaks gRPC to the SuperLink's "
                f"--fleet-api-address (default port {compat.LINES['1.39'].fleet_port}): install the SuperLink's Flower "
                "line on this node (pip install -c constraints/flwr-1.42.txt ...)")
    return None


def install_waits(idle: float, reply: float) -> bool:
    """Flower's SuperNode waits in this process set to ``idle`` / ``reply`` s
    (:func:`flower_io.compat.install_waits`); False, with one warning, on a Flower not read."""
    return compat.install_waits(idle, reply)


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
    mismatch = fleet_mismatch(rest)
    if mismatch:
        print(f"error: {mismatch}", file=sys.stderr)
        return 2
    if compat.internals(warn=False) is not None:   # the ClientApps' pulls: the fork server and its children inherit it
        os.environ[PULL_BACKOFF_ENV] = str(ours.pull_backoff)
    if ours.clientapp_start == "fork" and compat.forking_supported():
        from launcher import warm
        warm.install()   # first thing: the fork server's imports overlap the SuperNode's own start
    set_pull_backoff(ours.pull_backoff)    # this SuperNode's own pulls
    install_waits(ours.idle_poll, ours.reply_poll)
    compat.run_flower_supernode(with_key_in_node_config(rest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
