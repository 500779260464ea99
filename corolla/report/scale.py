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


def _peak(r: dict[str, Any]) -> str:
    """A node's peak memory: its largest process, and its process group's sum where recorded."""
    top = _num(max(r["node_peak_mb_max_process"]), "{:,}")
    group = r.get("node_peak_mb_group_sum")
    return f"{top} / {_num(max(group), '{:,}')}" if group else top


def clients_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[r["method"], r["dataset"], f"{r['users']:,}", r["upload"], str(r["nodes"]), _num(r["median_round_s"]),
             _num(r["bytes_up_per_round"] / 1e6), _num(r["bytes_down_per_round"] / 1e6),
             _num(r["server_peak_rss_mb"], "{:,.0f}"), _peak(r),
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
                    _num(max(r["node_peak_mb_max_process"]), "{:,}"),
                    _num(r["state_on_disk_mb"], "{:,.0f}"), _num(r["metrics"]["hr@10"], "{:.4f}"),
                    _num(r["metrics"]["ndcg@10"], "{:.4f}"), delta, _load(r)])
    return out


def nodes_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[str(r["nodes"]), _num(r.get("idle_poll_s") or 0.05, "{:g}"), _num(r["median_round_s"], "{:.2f}"),
             _num(r["command_s"], "{:.0f}"), _num(r["superlink_cpu_s"]), _num(r["superlink_peak_rss_mb"], "{:,}"),
             _num(max(r["node_peak_mb_max_process"]), "{:,}"), _num(r["metrics"].get("ndcg@10"), "{:.4f}"), _load(r)]
            for r in d["rows"]]


def compose_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[str(r["supernode_containers"]), _num(r["median_round_s"], "{:.2f}"), _num(r["command_s"], "{:.0f}"),
             _num(r["superlink_peak_mb"], "{:,}"), _num(r["superlink_cpu_percent_mean"]),
             _num(r["node_peak_mb_max_process"][0], "{:,}"), _num(r["supernode_containers_peak_mb_sum"], "{:,}"),
             _num(r["metrics"].get("ndcg@10"), "{:.4f}"), _load(r)] for r in d["rows"]]


#: Each table's columns and its row formatter: the report's HTML and the benchmark's Markdown
#: (``benchmarks/scale.py``) are the same table.
TABLES = {
    "clients": (["method", "dataset", "users", "upload", "nodes", "median round s", "up MB/round", "down MB/round",
                 "ServerApp peak MB", "node peak MB (largest process / group)", "state MB", "HR@10",
                 "load before / during"], clients_rows),
    "fedca": (["users", "drawn", "block", "blocks", "server aggregation s", "median round s", "node peak MB",
               "state MB", "HR@10", "NDCG@10", "ΔHR@10 vs exact", "load before / during"], fedca_rows),
    "nodes": (["SuperNodes", "idle poll s", "median round s", "command s", "SuperLink CPU s", "SuperLink peak MB",
               "node peak MB (largest process)", "NDCG@10", "load before / during"], nodes_rows),
    "compose": (["SuperNode containers", "median round s", "command s", "SuperLink container peak MB",
                 "SuperLink mean CPU %", "largest SuperNode container MB", "all SuperNode containers MB", "NDCG@10",
                 "load before / during"], compose_rows),
}


def html_table(kind: str, d: dict[str, Any]) -> str:
    head, rows = TABLES[kind]
    return _table(head, rows(d))


def markdown_table(kind: str, d: dict[str, Any]) -> str:
    """The same table as Markdown (text columns left, numbers right)."""
    head, rows = TABLES[kind]
    body = rows(d)
    align = ["---:" if body and all(_numeric(r[i]) for r in body) else "---" for i in range(len(head))]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"] +
                     ["| " + " | ".join(r) + " |" for r in body])


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "", 1).lstrip("+-").isdigit() or cell == "–"


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
        parts.append(html_table("clients", clients))
        img = out / "img" / "scale.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        plots.scale(clients["rows"], nodes["rows"] if nodes else [], img)
        parts.append('<p><img src="img/scale.png" alt="round time and memory against users and nodes"></p>')
    else:
        parts.append(missing.format(FILES["clients"]))
    parts.append("<h2>FedCA: exact and in blocks</h2>")
    parts.append((_command(fedca) + html_table("fedca", fedca)) if fedca else missing.format(FILES["fedca"]))
    parts.append("<h2>SuperNodes: the README's main job</h2>")
    parts.append((_command(nodes) + html_table("nodes", nodes)) if nodes else missing.format(FILES["nodes"]))
    parts.append("<h3>The same job under docker compose up --scale supernode=N</h3>")
    parts.append((_command(compose) + html_table("compose", compose))
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
