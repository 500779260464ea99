"""The report's ``trust.html``: what secure aggregation costs and what the reliability drills
recorded, from their result files in ``docs/results/``:

* ``secagg-cost.json`` (``benchmarks/secagg_cost.py``): per method and node count, bytes and
  seconds of each SecAgg+ phase against the plain round, the aggregate's distance to the plain sum
  against the quantisation bound, and the metrics of both;
* ``churn.json`` (``benchmarks/churn.py``): per round, nodes alive, replies, exclusions, wall;
* ``hostile-node.json`` (``benchmarks/hostile_node.py``): each trick, the exclusions and flags it
  caused, and the metrics beside the all-honest run.

A file that is absent is named on the page as not recorded; a file that is there but not in the
shape its benchmark writes is an error naming the file and the missing field.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from corolla.keys import ConfigError
from corolla.report import plots

FILES = {"secagg": "secagg-cost.json", "churn": "churn.json", "hostile": "hostile-node.json"}
ADDED_PHASES = ("secagg-setup", "secagg-share", "secagg-confirm", "secagg-unmask")


def _read(path: Path, fields: tuple[str, ...]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"result file {path}: not JSON ({e})") from None
    missing = [f for f in fields if not isinstance(d, dict) or f not in d]
    if missing:
        raise ConfigError(f"result file {path}: no {', '.join(repr(m) for m in missing)} (expected what "
                          f"the benchmark named in its 'command' writes)")
    return d


def _phase(row: dict[str, Any], which: str, name: str) -> dict[str, Any]:
    return next((p for p in row.get(f"phases_{which}", []) if p.get("name") == name), {})


def summed_phase(row: dict[str, Any]) -> str:
    """The phase whose upload is summed securely: the one between key sharing and unmasking
    (``train`` for FedAvg, ``upload`` for FedCIA GF-CF)."""
    names = [p.get("name") for p in row.get("phases_secure", [])]
    i = names.index("secagg-share") + 1 if "secagg-share" in names else -1
    return names[i] if 0 < i < len(names) else ""


def secagg_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (method, nodes): the numbers the page's table and plot show."""
    out = []
    for r in d["rows"]:
        summed = summed_phase(r)
        metric = "ndcg@10" if "ndcg@10" in r.get("metrics_plain", {}) else next(iter(r.get("metrics_plain", {})), "")
        row = {"preset": r["preset"], "nodes": r["nodes"], "vector": r["vector"], "signed": bool(r.get("signed")),
               "up_plain_mb": r["plain_bytes_up"] / 1e6, "up_secure_mb": r["secure_bytes_up"] / 1e6,
               "diff": r["max_abs_diff"], "bound": r["bound"], "metric": metric,
               "plain": r.get("metrics_plain", {}).get(metric), "secure": r.get("metrics_secure", {}).get(metric),
               "summed_phase": summed, "sum_plain_s": _phase(r, "plain", summed).get("wall_s"),
               "sum_secure_s": _phase(r, "secure", summed).get("wall_s")}
        for p in ADDED_PHASES:
            ph = _phase(r, "secure", p)
            row[f"{p}_s"] = ph.get("wall_s")
            row[f"{p}_kb"] = (ph.get("bytes_up", 0) + ph.get("bytes_down", 0)) / 1e3 if ph else None
        out.append(row)
    return out


def _num(v: Any, spec: str) -> str:
    return "" if v is None else format(v, spec)


def _secagg_html(d: dict[str, Any], out: Path) -> str:
    e = html.escape
    rows = secagg_rows(d)
    head = ("<tr><th>method</th><th>nodes</th><th>keys</th><th>vector</th><th>upload MB plain → secure</th>"
            "<th>setup kB / s</th><th>share kB / s</th><th>summed phase, s plain → secure</th>"
            "<th>confirm kB / s</th><th>unmask kB / s</th>"
            "<th>max |aggregate − plain| ≤ bound</th><th>metric plain / secure</th></tr>")
    body = "".join(
        f"<tr><td>{e(r['preset'])}</td><td class='num'>{r['nodes']}</td>"
        f"<td>{'signed' if r['signed'] else 'unsigned'}</td><td class='num'>{r['vector']:,}</td>"
        f"<td class='num'>{r['up_plain_mb']:.1f} → {r['up_secure_mb']:.1f}</td>"
        f"<td class='num'>{_num(r['secagg-setup_kb'], '.1f')} / {_num(r['secagg-setup_s'], '.2f')}</td>"
        f"<td class='num'>{_num(r['secagg-share_kb'], '.1f')} / {_num(r['secagg-share_s'], '.2f')}</td>"
        f"<td class='num'>{e(r['summed_phase'])} {_num(r['sum_plain_s'], '.2f')} → {_num(r['sum_secure_s'], '.2f')}</td>"
        f"<td class='num'>{_num(r['secagg-confirm_kb'], '.1f')} / {_num(r['secagg-confirm_s'], '.2f')}</td>"
        f"<td class='num'>{_num(r['secagg-unmask_kb'], '.1f')} / {_num(r['secagg-unmask_s'], '.2f')}</td>"
        f"<td class='num'>{r['diff']:.2e} ≤ {r['bound']:.2e}</td>"
        f"<td class='num'>{e(r['metric'])} {_num(r['plain'], '.4f')} / {_num(r['secure'], '.4f')}</td></tr>"
        for r in rows)
    (out / "img").mkdir(parents=True, exist_ok=True)
    plots.secagg_cost(rows, out / "img" / "secagg-cost.png")
    return (f"<p>One round in process per row (<code>{e(d.get('command', ''))}</code>); kB count the keys, "
            "shares, signatures and ciphertexts as they travel. <em>Signed</em>: every node signs its round keys and "
            "the survivor set with its node key and checks its neighbours' (the malicious-server model; the "
            "confirm exchange is the consistency round); <em>unsigned</em>: a semi-honest server only. The "
            "aggregate must stay within the quantisation bound.</p>"
            f"<table>{head}{body}</table>"
            '<img src="img/secagg-cost.png" alt="secure aggregation: bytes and seconds per phase against nodes">')


def _churn_html(d: dict[str, Any]) -> str:
    e = html.escape
    head = "<tr><th>round</th><th>nodes alive</th><th>replies</th><th>clients</th><th>excluded</th><th>wall s</th><th>event</th></tr>"
    body = "".join(f"<tr><td class='num'>{r['round']}</td><td class='num'>{r['nodes_alive']}</td>"
                   f"<td class='num'>{r['replies']}</td><td class='num'>{r['clients']}</td>"
                   f"<td class='num'>{r['excluded']}</td><td class='num'>{r['wall_s']:.1f}</td><td>{e(r['event'])}</td></tr>"
                   for r in d["table"])
    mets = ", ".join(f"{k} {v:.4f}" for k, v in sorted(d["metrics"].items()))
    return (f"<p>{d['nodes']} SuperNodes, {d['rounds']} rounds of <code>{e(d.get('preset', ''))}</code>, nodes killed "
            f"and started between rounds (<code>{e(d.get('command', ''))}</code>): {d['exclusions']} exclusions, "
            f"state lost for {len(d['state_lost'])} clients, median round {d['median_round_s_calm']} s calm and "
            f"{d['median_round_s_after_a_kill']} s after a kill. Final metrics: {e(mets)}.</p>"
            f"<table>{head}{body}</table>")


def _hostile_html(d: dict[str, Any]) -> str:
    e = html.escape
    ex = "".join(f"<tr><td class='num'>{x['round']}</td><td>{e(x['trick'])}</td><td class='num'>{x['client']}</td>"
                 f"<td class='num'>{x['node']}</td><td>{e(x['reason'])}</td></tr>" for x in d["exclusions"])
    flags = "".join(f"<li>node {e(str(n))} (clients {e(v.get('clients', ''))}): {e('; '.join(v.get('flags', [])))}</li>"
                    for n, v in d["nodes"].items() if v.get("flags"))
    both = sorted(set(d["metrics_with_hostile_node"]) & set(d["metrics_all_honest"]))
    mets = "".join(f"<tr><td>{e(k)}</td><td class='num'>{d['metrics_all_honest'][k]:.4f}</td>"
                   f"<td class='num'>{d['metrics_with_hostile_node'][k]:.4f}</td></tr>" for k in both)
    return (f"<p>One node of three replies with a different trick each round (<code>{e(d.get('command', ''))}</code>); "
            "every trick ends as an exclusion naming the node and the client, and the node is flagged.</p>"
            "<table><tr><th>round</th><th>trick</th><th>client</th><th>node</th><th>reason</th></tr>" + ex + "</table>"
            f"<p>Flagged:</p><ul>{flags}</ul>"
            "<table><tr><th>metric</th><th>all honest</th><th>with the hostile node</th></tr>" + mets + "</table>")


def page(results_dir: Path, out: Path) -> str:
    """The body of ``trust.html`` (plots written under ``out/img``)."""
    secagg = _read(results_dir / FILES["secagg"], ("rows",))
    churn = _read(results_dir / FILES["churn"], ("table", "metrics", "exclusions", "state_lost", "nodes", "rounds",
                                                  "median_round_s_calm", "median_round_s_after_a_kill"))
    hostile = _read(results_dir / FILES["hostile"], ("exclusions", "nodes", "metrics_with_hostile_node",
                                                      "metrics_all_honest"))
    parts = ["<h2>Secure aggregation (SecAgg+)</h2>",
             _secagg_html(secagg, out) if secagg else f"<p>Not recorded: no {FILES['secagg']} in the results.</p>",
             "<h2>Churn: SuperNodes killed and started during a run</h2>",
             _churn_html(churn) if churn else f"<p>Not recorded: no {FILES['churn']} in the results.</p>",
             "<h2>A hostile node</h2>",
             _hostile_html(hostile) if hostile else f"<p>Not recorded: no {FILES['hostile']} in the results.</p>"]
    return "\n".join(parts)
