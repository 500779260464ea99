"""Where a round's time goes through a local SuperLink: a timeline of one ``corolla run --mode local``.

Copies the app's code to a temporary folder, adds timestamps there (never in the checkout) at the
ServerApp's exchange (messages encoded and pushed, each reply pulled) and in each forked ClientApp
(started, Flower's ``pull_task_input`` done, Corolla's handler begun, computed, reply encoded,
Flower's ``push_message`` begun and done), runs the job with 2 SuperNodes on the interpreter given
(so on that interpreter's Flower line) and prints the median of each step over rounds 3.. (the
first exchanges carry the handshake and the processes' first imports). ``--json`` keeps the
medians and the raw timeline.

    /path/to/venv-1.42/bin/python benchmarks/round_timeline.py --data-dir $COROLLA_DATA --rounds 10 \\
        --json docs/results/round-timeline-flwr1.42.json

Steps per ClientApp (per node and round), in order: the server's encode + push of the round's
messages, push -> child forked (the SuperNode's pull and the SuperExec's hand-off), child start ->
message pulled (Flower's ``pull_task_input``: message, context, run and FAB through the SuperNode's
runtime API), FAB check + app load, decode + compute (train and the fused evaluation), reply
encode, Flower's ``push_message`` (the reply's objects into the SuperNode), and per round: the
last reply pushed -> the ServerApp holding both replies (SuperNode -> SuperLink -> ServerApp).
``--per-exchange`` runs the preset with its own rounds and reports every exchange instead (a one-shot
preset such as GF-CF's upload):

    /path/to/venv-1.42/bin/python benchmarks/round_timeline.py --data-dir $COROLLA_DATA \\
        --preset fedcia-gfcf-ml100k --per-exchange --json docs/results/gfcf-timeline-flwr1.42.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("corolla", "flower_io", "server_app", "strategies", "client_app", "launcher")

TRACE = '''import os, time
def tr(what):
    with open(os.environ["COROLLA_TIMELINE"], "a") as f:
        f.write(f"{time.time():.4f} {os.getpid()} {what}\\n")
'''

# (file, text there now, text with timestamps): each must match exactly once, or the tool says which
EDITS = [
    ("flower_io/compat.py",
     '''    from flwr.supernode.cli.flwr_clientapp import flwr_clientapp
    sys.argv = ["flwr-clientapp", *argv]''',
     '''    from flwr.supernode.cli.flwr_clientapp import flwr_clientapp
    from flower_io.timeline import tr
    import flwr.supernode.runtime.run_clientapp as rc
    tr("child start")
    def wrap(name):
        f = getattr(rc, name)
        def g(*a, **k):
            tr(name + " begin"); r = f(*a, **k); tr(name + " end"); return r
        setattr(rc, name, g)
    for n in ("pull_task_input", "push_message"):
        wrap(n)
    sys.argv = ["flwr-clientapp", *argv]'''),
    ("server_app/transport.py",
     '''        msgs = [Message(content=to_records(c), dst_node_id=n, message_type=message_type) for n, c in messages]
        ids = list(self.grid.push_messages(msgs))''',
     '''        from flower_io.timeline import tr
        tr("server encode")
        msgs = [Message(content=to_records(c), dst_node_id=n, message_type=message_type) for n, c in messages]
        ids = list(self.grid.push_messages(msgs))
        tr("server pushed")'''),
    ("server_app/transport.py",
     '''                for rep in self.grid.pull_messages(order[a:a + self.pull_batch]):
                    mid''',
     '''                for rep in self.grid.pull_messages(order[a:a + self.pull_batch]):
                    tr("server got reply")
                    mid'''),
    ("client_app/app.py",
     '''    req = PhaseRequest.decode(flat)
    kind = step''',
     '''    from flower_io.timeline import tr
    tr("handle begin")
    req = PhaseRequest.decode(flat)
    kind = step'''),
    ("client_app/app.py",
     '''
    return reply.encode()''',
     '''
    tr("handle end")
    out = reply.encode()
    tr("encoded")
    return out'''),
]

STEPS = ("server encode+push", "push -> child forked", "child: start -> message pulled",
         "child: FAB check + app load", "child: decode + compute (train + evaluate)", "child: encode reply",
         "child: push reply to SuperNode", "last reply pushed -> ServerApp has both replies", "round")


def instrumented_copy(dest: Path) -> Path:
    """The app's packages with the timestamps of :data:`EDITS` (and ``launcher/flwr_app.toml``,
    ``pyproject.toml``) in ``dest``."""
    for p in PACKAGES:
        shutil.copytree(ROOT / p, dest / p, ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", ".gitignore", "README.md", "LICENSE"):
        if (ROOT / f).is_file():
            shutil.copy2(ROOT / f, dest / f)
    (dest / "flower_io" / "timeline.py").write_text(TRACE)
    for rel, old, new in EDITS:
        path = dest / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"round_timeline: {rel} no longer holds the line it instruments "
                             f"({old.strip().splitlines()[0]!r}); update EDITS")
        path.write_text(text.replace(old, new))
    return dest


def exchange_steps(events: list[tuple[float, int, str]], first: int = 3, stop: int | None = None) -> list[dict]:
    """Every step of :data:`STEPS` for each exchange ``first`` <= i < ``stop`` (0-based; ``stop``
    None: to the last) that holds a whole ClientApp: the ClientApp steps per node (a list), the
    last two as one value."""
    events = sorted(events)
    enc = [t for t, _, w in events if w == "server encode"]
    ends = enc[1:] + [max(t for t, _, _ in events) + 1.0]
    out = []
    for i in range(first, len(enc) if stop is None else min(stop, len(enc))):
        a, b = enc[i], ends[i]
        window = [(t, p, w) for t, p, w in events if a <= t < b]
        seen: dict[int, dict[str, float]] = collections.defaultdict(dict)
        for t, p, w in window:
            seen[p].setdefault(w, t)
        pushed = [t for t, _, w in window if w == "server pushed"]
        replies = [t for t, _, w in window if w == "server got reply"]
        kids = [k for k in seen.values() if "child start" in k and "push_message end" in k and "encoded" in k]
        if not pushed or not replies or not kids:
            continue
        row: dict = {STEPS[0]: [pushed[0] - a] * len(kids)}
        row[STEPS[1]] = [k["child start"] - pushed[0] for k in kids]
        row[STEPS[2]] = [k["pull_task_input end"] - k["child start"] for k in kids]
        row[STEPS[3]] = [k["handle begin"] - k["pull_task_input end"] for k in kids]
        row[STEPS[4]] = [k["handle end"] - k["handle begin"] for k in kids]
        row[STEPS[5]] = [k["encoded"] - k["handle end"] for k in kids]
        row[STEPS[6]] = [k["push_message end"] - k["push_message begin"] for k in kids]
        row[STEPS[7]] = max(replies) - max(k["push_message end"] for k in kids)
        row[STEPS[8]] = (b - a) if i + 1 < len(enc) else max(replies) - a
        out.append(row)
    return out


def medians(events: list[tuple[float, int, str]]) -> dict[str, float]:
    """The median of every step (:data:`STEPS`) over the rounds after the first two exchanges
    (the last exchange, the final evaluation's, is left out: no next round bounds it)."""
    rows: dict[str, list[float]] = collections.defaultdict(list)
    n = sum(1 for _, _, w in events if w == "server encode")
    for ex in exchange_steps(events, 3, n - 1):
        for s, v in ex.items():
            rows[s].extend(v if isinstance(v, list) else [v])
    return {s: round(statistics.median(rows[s]), 3) for s in STEPS if rows[s]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--preset", default="fedavg-mf-ml100k")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--per-exchange", action="store_true",
                    help="every exchange's steps, the handshake's included, with the preset's own num-rounds "
                         "(a one-shot preset such as fedcia-gfcf-ml100k)")
    args = ap.parse_args(argv)
    if not args.per_exchange and args.rounds < 6:
        ap.error(f"--rounds {args.rounds}: at least 6 (rounds 3.. are measured)")
    with tempfile.TemporaryDirectory(prefix="corolla-timeline-") as tmp:
        app = instrumented_copy(Path(tmp) / "app")
        log = Path(tmp) / "timeline.log"
        out = Path(tmp) / "run"
        env = dict(os.environ, COROLLA_TIMELINE=str(log), COROLLA_OFFLINE="1",
                   PYTHONPATH=os.pathsep.join([str(app), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        cmd = [sys.executable, "-m", "launcher.cli", "run", "--preset", args.preset, "--data-dir", args.data_dir,
               "--out", str(out), "--quiet", "--mode", "local", "--nodes", "2"]
        if not args.per_exchange:
            cmd += ["--set", f"num-rounds={args.rounds}", "--set", "patience=0"]
        t0 = time.time()
        p = subprocess.run(cmd, cwd=app, env=env, capture_output=True, text=True)
        t1 = time.time()
        if p.returncode != 0:
            raise SystemExit(f"round_timeline: the run failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        events = [(float(t), int(pid), w) for t, pid, w in (line.split(" ", 2) for line in log.read_text().splitlines())]
    steps = {} if args.per_exchange else medians(events)
    per = exchange_steps(events, first=0) if args.per_exchange else []
    enc = sorted(t for t, _, w in events if w == "server encode")
    last = max(t for t, _, w in events if w == "server got reply")
    from importlib.metadata import version
    res = {"flwr": version("flwr"), "preset": args.preset, "rounds": None if args.per_exchange else args.rounds,
           "cores": os.cpu_count(),
           "command_s": round(t1 - t0, 2), "first_message_s": round(enc[0] - t0, 2),
           "after_last_reply_s": round(t1 - last, 2), "median_s": steps,
           "exchanges": [{s: [round(x, 3) for x in v] if isinstance(v, list) else round(v, 3) for s, v in ex.items()}
                         for ex in per],
           "timeline": [[round(t - t0, 4), pid, w] for t, pid, w in sorted(events)]}
    print(f"Flower {res['flwr']}, {args.preset}, {res['rounds'] or 'its own'} rounds: command {res['command_s']} s, first message "
          f"{res['first_message_s']} s after the start, {res['after_last_reply_s']} s after the last reply")
    if steps:
        print("| step (median over rounds 3..) | s |\n|---|---:|")
    for s, v in steps.items():
        print(f"| {s} | {v:.3f} |")
    for n, ex in enumerate(per):
        print(f"\nexchange {n} (s; per node where several)")
        for s, v in ex.items():
            print(f"| {s} | {' / '.join(f'{x:.3f}' for x in v) if isinstance(v, list) else f'{v:.3f}'} |")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
