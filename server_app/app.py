"""The Flower ServerApp.

Run-config keys (``[tool.flwr.app.config]`` in ``pyproject.toml``):

* ``preset``     a preset name (``corolla presets`` lists them);
* ``set``        overrides, ``"key=value key2=value2"`` (any key of ``corolla.config.SCHEMA``);
* ``out-dir``    where results go (default ``./runs/<preset>-<time>``, made absolute);
* ``data-dir``   dataset folder for the nodes that do not set their own;
* ``resume-dir`` continue the run whose outputs are in this folder (its config is reused);
* ``min-nodes``  wait (up to 120 s) until this many SuperNodes are connected before the handshake;
* ``track``      an experiment-tracking sink (``tensorboard``: event files in ``OUT/tensorboard``);
* ``provenance`` what produced the run (JSON, from ``corolla run``: code, versions, machine,
  command line), ``mode`` how it was started; without them the ServerApp records its own.

``flwr run . <connection> -c 'preset="fedavg-mf-ml100k" set="num-rounds=5"'`` works as for any
Flower app; ``corolla run`` starts the SuperLink and SuperNodes and calls the same code.
"""

from __future__ import annotations

import json
import secrets
import time
import traceback
from logging import ERROR, INFO, WARNING
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from corolla import provenance, tracking
from corolla.config import load_preset, parse_overrides, resolve
from corolla.messages import RunInfo, config_hash
from corolla.round import Phase
from corolla.util import atomic_write_json, dumps
from flower_io.pulls import env_backoff, set_pull_backoff
from server_app.exchange import Exchanger
from server_app.flower_strategy import FlowerStrategy
from server_app.loop import NoClients
from server_app.results import RunRecorder
from server_app.roster import Roster
from server_app.transport import GridTransport, Transport
from strategies.registry import strategy_class

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    # the replies' chunks: first retry after COROLLA_PULL_BACKOFF s (default 0.02), not Flower's 1 s
    set_pull_backoff(env_backoff())
    run_federation(GridTransport(grid), dict(context.run_config))


def prepare(rc: dict[str, Any]) -> tuple[dict[str, Any], Path, str, str | None, dict[str, Any], dict | None]:
    """Resolve (cfg, out dir, run key, preset, paper numbers, checkpoint meta or None)."""
    resume = str(rc.get("resume-dir") or "")
    if resume:
        out = Path(resume).expanduser().resolve()
        saved = json.loads((out / "config.json").read_text())
        cfg, run_key, preset, paper = saved["config"], saved["run_key"], saved["preset"], saved["paper"]
        meta, _ = RunRecorder.read_checkpoint(out)
        return cfg, out, run_key, preset, paper, meta
    preset = str(rc.get("preset") or "") or None
    cfg = resolve(preset, parse_overrides(str(rc.get("set") or "")))
    paper = load_preset(preset).paper if preset else {}
    out = str(rc.get("out-dir") or "")
    out_path = Path(out).expanduser().resolve() if out else \
        Path("runs", f"{preset or cfg['method']}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    run_key = secrets.token_hex(6)
    out_path.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_path / "config.json", {"config": cfg, "run_key": run_key, "preset": preset,
                                                 "paper": paper})
    return cfg, out_path, run_key, preset, paper, None


def run_federation(transport: Transport, rc: dict[str, Any]) -> dict[str, Any]:
    cfg, out, run_key, preset, paper, meta = prepare(rc)
    strategy = strategy_class(cfg)(cfg)
    strategy.roster = roster = Roster()
    run = RunInfo(run_key, config_hash(cfg), str(out / "node-state"), str(rc.get("data-dir") or ""))
    ex = Exchanger(strategy, roster, transport, run, cfg)
    recorder = RunRecorder(out, cfg, preset, paper)
    recorder.run_info = run.encode()
    recorder.nodes_info = roster.record
    recorder.sink = tracking.open_sink(str(rc.get("track") or ""), out)
    if recorder.sink is not None:
        recorder.sink.config(cfg)
    recorder.provenance = {**(json.loads(rc["provenance"]) if rc.get("provenance") else
                              provenance.collect(Path(__file__).resolve().parents[1], ["flwr", "run"])),
                           "mode": str(rc.get("mode") or type(transport).__name__), "config_hash": run.cfg_hash}
    start_round = 1
    if meta is not None:
        _, arrays = RunRecorder.read_checkpoint(out)
        strategy.load_state_dict(arrays)
        recorder.restore(meta)
        ex.restore_round = int(meta["round"])
        start_round = int(meta["round"]) + 1
        log(INFO, "resuming %s after round %d", out, meta["round"])
        if meta.get("stopped_early"):
            start_round = cfg["num-rounds"] + 1
    log(INFO, "Corolla run: preset=%s method=%s out=%s", preset, cfg["method"], out)
    wait_for_nodes(transport, int(rc.get("min-nodes") or 0))
    try:
        if start_round <= cfg["num-rounds"]:
            FlowerStrategy(strategy, ex, recorder).start(start_round=start_round)
        else:
            ex.handshake(transport.node_ids())
        recorder.provenance["nodes"] = len([n for n in roster.nodes if n not in roster.dead_nodes])
        recorder.data_stats = {**roster.data_stats,
                               "clients": client_stats(roster.clients) if cfg.get("report-per-client") else {}}
        if cfg["export-topk"] > 0:
            export_topk(strategy, ex, out, recorder.history[-1]["round"] if recorder.history else 0)
    except NoClients as e:   # bad input (the data, the nodes): one line, no traceback
        log(ERROR, "run failed: %s", e)
        recorder.summary("failed", error=str(e), input_error=True)
        raise
    except BaseException as e:
        log(ERROR, "run failed:\n%s", traceback.format_exc())
        recorder.summary("failed", error=(f"{type(e).__name__}: {e}".splitlines() or [""])[0][:2000])
        raise
    summary = recorder.summary("completed")
    log(INFO, "summary: %s", dumps({k: summary[k] for k in ("rounds_completed", "metrics")}))
    return summary


def client_stats(clients: dict[int, dict[str, int]]) -> dict[str, dict[str, Any]]:
    """The report's data per client, or per subgraph where the clients carry one (one-user
    clients on a spectral partition: their users and training interactions summed, the
    subgraph's items, its nodes)."""
    if not any("group" in v for v in clients.values()):
        return {str(c): v for c, v in sorted(clients.items())}
    out: dict[str, dict[str, Any]] = {}
    for c, v in sorted(clients.items()):
        g = out.setdefault(str(v.get("group", c)), {"clients": 0, "users": 0, "train": 0, "items": v.get("items", 0),
                                                     "nodes": []})
        g["clients"] += 1
        g["users"] += int(v.get("users", 0))
        g["train"] += int(v.get("train", 0))
        if v.get("node") is not None and v["node"] not in g["nodes"]:
            g["nodes"].append(v["node"])
    return out


def wait_for_nodes(transport: Transport, n: int, timeout: float = 120.0) -> None:
    """Wait up to ``timeout`` s until ``n`` SuperNodes (at least one) are connected; the run goes on
    with those there then, and a node that connects later takes its clients at a later round."""
    end = time.monotonic() + timeout
    while len(transport.node_ids()) < max(n, 1) and time.monotonic() < end:
        time.sleep(0.5)
    got = len(transport.node_ids())
    if got < n:
        log(WARNING, "only %d of the %d SuperNodes asked for (min-nodes) connected within %.0f s; the run "
            "starts with them (the others' clients join at a later round)", got, n, timeout)
    else:
        log(INFO, "%d SuperNodes connected", got)


def export_topk(strategy, ex: Exchanger, out: Path, last_round: int) -> None:
    """Ask every available client for its users' top-K with its models after ``last_round`` (the
    last recorded round: a round trained before an early stop is not used) and write ``topk.jsonl``."""
    targets = strategy.available()
    topk = ex.exchange(Phase.TOPK, last_round, targets, strategy.evaluate_download(last_round, targets))
    results = topk.results
    missing = sorted(set(targets) - set(results))
    if missing:   # a partial file would pass for the whole ranking: say which clients gave none, and why
        why = topk.stats.excluded[0] if topk.stats.excluded else "no reply"
        raise RuntimeError(f"export-topk: {len(missing)} of {len(targets)} clients returned no top-K "
                           f"(first {missing[:5]}; first reason: {why}); topk.jsonl not written")
    lines = []
    for cid in sorted(results):
        m: dict[str, Any] = results[cid].metrics
        for row, u in enumerate(m["users"]):
            lines.append(json.dumps({"user": int(u), "client": cid, "items": [int(i) for i in m[f"top/{row}"]]}))
    from corolla.util import atomic_write_text

    atomic_write_text(out / "topk.jsonl", "".join(line + "\n" for line in lines))

