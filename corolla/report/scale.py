"""The report's ``scale.html``: how far Corolla goes in logical clients and SuperNodes, from the
result files of ``benchmarks/scale.py`` and ``benchmarks/ray_cluster.py`` in ``docs/results/``:

* ``scale-clients.json`` — per-user methods (one-user harness) against the number of users, with
  the item table uploaded whole or as the rows a client trained (``item-upload``);
* ``scale-fedca.json`` — FedCA exact and in blocks (``fedca-block``) against the users;
* ``scale-nodes.json`` — the README's main job against the number of SuperNodes;
* ``scale-compose.json`` — the same job under ``docker compose up --scale supernode=N``;
* ``ray-cluster.json`` — Flower's simulation on a two-node Ray cluster against one machine.

A file that is absent is named on the page as not recorded; one without the fields its
benchmark writes is an error naming the file and the field.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from corolla.report import plots
from corolla.report.trust import _read

FILES = {"clients": "scale-clients.json", "fedca": "scale-fedca.json", "nodes": "scale-nodes.json",
         "compose": "scale-compose.json", "ray": "ray-cluster.json"}


def _num(x: Any, fmt: str = "{:,.1f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "–"


def _table(head: list[str], rows: list[list[str]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" +
            "".join("<tr>" + "".join(f"<td class='num'>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows) +
            "</table>")


def _load(r: dict[str, Any]) -> str:
    return f"{_num(r.get('loadavg_before'), '{:.2f}')} / {_num(r.get('loadavg_during'), '{:.2f}')}"


def clients_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[r["method"], r["dataset"], f"{r['users']:,}", r["upload"], str(r["nodes"]), _num(r["median_round_s"]),
             _num(r["bytes_up_per_round"] / 1e6), _num(r["bytes_down_per_round"] / 1e6),
             _num(r["server_peak_rss_mb"], "{:,.0f}"), _num(max(r["node_peak_mb_max_process"]), "{:,}"),
             _num(r["state_on_disk_mb"]), _num(r["metrics"].get("hr@10"), "{:.4f}"), _load(r)]
            for r in d["rows"]]


def fedca_rows(d: dict[str, Any]) -> list[list[str]]:
    exact = {r["users"]: r for r in d["rows"] if r["fedca-block"] == 0}
    out = []
    for r in d["rows"]:
        e = exact.get(r["users"])
        delta = f"{r['metrics']['hr@10'] - e['metrics']['hr@10']:+.4f}" if e is not None else "–"
        out.append([f"{r['users']:,}", str(r["aggregated"]), str(r["fedca-block"] or "exact"), str(r["blocks"]),
                    ", ".join(f"{x:.1f}" for x in r["server_aggregation_s"]), _num(r["median_round_s"]),
                    _num(r["state_on_disk_mb"], "{:,.0f}"), _num(r["metrics"]["hr@10"], "{:.4f}"),
                    _num(r["metrics"]["ndcg@10"], "{:.4f}"), delta, _load(r)])
    return out


def nodes_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[str(r["nodes"]), _num(r["median_round_s"], "{:.2f}"), _num(r["command_s"], "{:.0f}"),
             _num(r["superlink_cpu_s"]), _num(r["superlink_peak_rss_mb"], "{:,}"),
             _num(max(r["node_peak_mb_max_process"]), "{:,}"), _num(r["metrics"].get("ndcg@10"), "{:.4f}"), _load(r)]
            for r in d["rows"]]


def compose_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[str(r["supernode_containers"]), _num(r["median_round_s"], "{:.2f}"), _num(r["command_s"], "{:.0f}"),
             _num(r["superlink_peak_mb"], "{:,}"), _num(r["superlink_cpu_percent_mean"]),
             _num(r["node_peak_mb_max_process"][0], "{:,}"), _num(r["supernode_containers_peak_mb_sum"], "{:,}"),
             _num(r["metrics"].get("ndcg@10"), "{:.4f}"), _load(r)] for r in d["rows"]]


def _command(d: dict[str, Any]) -> str:
    cmds = d["command"] if isinstance(d["command"], list) else [d["command"]]
    return "<pre>" + "\n".join(html.escape(c) for c in cmds) + "</pre>"


def page(results_dir: Path, out: Path) -> str:
    """The body of ``scale.html`` (its plot written under ``out/img``)."""
    clients = _read(results_dir / FILES["clients"], ("command", "rows"))
    fedca = _read(results_dir / FILES["fedca"], ("command", "rows"))
    nodes = _read(results_dir / FILES["nodes"], ("command", "rows"))
    compose = _read(results_dir / FILES["compose"], ("command", "rows"))
    ray = _read(results_dir / FILES["ray"], ("cluster", "single_machine", "round_metrics_equal"))
    missing = "<p>Not recorded: no {} in the results.</p>"
    parts = ["<p>Every run goes through a real SuperLink and <code>corolla supernode</code> processes on one "
             "machine; each row records the machine's load (1-minute load average before / mean during the "
             "run).</p>", "<h2>Logical clients: per-user methods</h2>"]
    if clients:
        parts.append(_command(clients))
        parts.append(_table(["method", "dataset", "users", "upload", "nodes", "median round s", "up MB/round",
                             "down MB/round", "ServerApp peak MB", "node process peak MB", "state MB", "HR@10",
                             "load"], clients_rows(clients)))
        img = out / "img" / "scale.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        plots.scale(clients["rows"], nodes["rows"] if nodes else [], img)
        parts.append('<p><img src="img/scale.png" alt="round time and memory against users and nodes"></p>')
    else:
        parts.append(missing.format(FILES["clients"]))
    parts.append("<h2>FedCA: exact and in blocks</h2>")
    parts.append((_command(fedca) + _table(["users", "drawn", "block", "blocks", "server aggregation s",
                                            "median round s", "state MB", "HR@10", "NDCG@10", "ΔHR@10 vs exact",
                                            "load"], fedca_rows(fedca))) if fedca else missing.format(FILES["fedca"]))
    parts.append("<h2>SuperNodes: the README's main job</h2>")
    parts.append((_command(nodes) + _table(["SuperNodes", "median round s", "command s", "SuperLink CPU s",
                                            "SuperLink peak MB", "node process peak MB", "NDCG@10", "load"],
                                           nodes_rows(nodes))) if nodes else missing.format(FILES["nodes"]))
    parts.append("<h3>The same job under docker compose up --scale supernode=N</h3>")
    parts.append((_command(compose) + _table(["SuperNode containers", "median round s", "command s",
                                              "SuperLink container peak MB", "SuperLink mean CPU %",
                                              "largest SuperNode container MB", "all SuperNode containers MB",
                                              "NDCG@10", "load"], compose_rows(compose)))
                 if compose else missing.format(FILES["compose"]))
    parts.append("<h2>Flower's simulation on a Ray cluster</h2>")
    if ray:
        c, s = ray["cluster"], ray["single_machine"]
        parts.append(f"<p>{ray['virtual_nodes']} virtual SuperNodes, {ray['rounds']} rounds of "
                     f"<code>{html.escape(ray['preset'])}</code>. ClientApp actors per network namespace: "
                     f"{html.escape(str(c['actors_per_netns']))} (cluster), {html.escape(str(s['actors_per_netns']))} "
                     f"(one machine). Every round's metrics equal: <b>{'yes' if ray['round_metrics_equal'] else 'NO'}"
                     f"</b> (NDCG@10 {c['metrics'].get('ndcg@10', float('nan')):.4f} / "
                     f"{s['metrics'].get('ndcg@10', float('nan')):.4f}).</p>")
        parts.append("<pre>" + html.escape(c["command"]) + "</pre>")
    else:
        parts.append(missing.format(FILES["ray"]))
    return "\n".join(parts)
