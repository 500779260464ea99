"""The report's plots (matplotlib, Agg): a leaderboard's ours-vs-paper bars, a run's learning
curve, a method's per-round curves against the authors' code, and bytes against quality."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig, ax, path: Path, title: str, ylabel: str, xlabel: str | None = None, grid: bool = True,
            legend: bool = True, title_size: float = 10) -> None:
    """Labels, title, grid and legend of a report plot, then written to ``path`` and closed."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
    if grid:
        ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)


def learning_curve(rounds: list[dict[str, Any]], key: str, path: Path, title: str,
                   paper: float | None = None, selected: int | None = None) -> bool:
    """Validation and test ``key`` per evaluated round, the paper's number as a horizontal line,
    the selected round marked. False when no round was evaluated."""
    ev = [h for h in rounds if h.get("metrics")]
    if not ev:
        return False
    plt = _plt()
    r = [h["round"] for h in ev]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(r, [h.get("valid", {}).get(key, math.nan) for h in ev], marker=".", label=f"validation {key}")
    ax.plot(r, [h["metrics"].get(key, math.nan) for h in ev], marker=".", label=f"test {key}")
    if any(h.get("compat") for h in ev):
        ax.plot(r, [h.get("compat", {}).get(key, math.nan) for h in ev], "--", label=f"test {key} (paper-compatible)")
    if paper is not None:
        ax.axhline(paper, color="grey", linestyle=":", label=f"paper {paper:.4f}")
    if selected is not None:
        ax.axvline(selected, color="black", linewidth=0.8, linestyle="--", label=f"selected round {selected}")
    _finish(fig, ax, path, title, f"{key} (fraction of users)" if key.startswith(("hr", "recall", "precision")) else key,
            "round", title_size=plt.rcParams["axes.titlesize"])
    return True


def bars(labels: list[str], ours: list[float | None], paper: list[float | None], metric: str, title: str,
         path: Path) -> None:
    """Ours beside the paper's number for every row (a gap where a row was not run)."""
    plt = _plt()
    n = len(labels)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * n + 2.0), 3.6))
    x = list(range(n))
    ax.bar([i - 0.2 for i in x], [p if p is not None else 0 for p in paper], width=0.4, label="paper", color="#9aa5b1")
    ax.bar([i + 0.2 for i in x], [o if o is not None else 0 for o in ours], width=0.4, label="Corolla", color="#2b6cb0")
    for i, o in enumerate(ours):
        if o is None:
            ax.text(i + 0.2, 0, "not run", rotation=90, ha="center", va="bottom", fontsize=7, color="#555")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    _finish(fig, ax, path, title, metric, grid=False)


def curves(rows: list[dict[str, str]], key: str, path: Path, title: str, paper: float | None = None) -> None:
    """Per-round test ``key`` of ours and of the authors' code (a ``*-vs-authors.csv``)."""
    plt = _plt()
    r = [int(x["round"]) for x in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(r, [float(x[f"ours_test_{key}"]) for x in rows], label=f"Corolla test {key}")
    if f"ref_test_{key}" in rows[0]:
        ax.plot(r, [float(x[f"ref_test_{key}"]) for x in rows], label=f"authors' code test {key}")
    if f"ours_valid_{key}" in rows[0]:
        ax.plot(r, [float(x[f"ours_valid_{key}"]) for x in rows], ":", label=f"Corolla validation {key}")
    if paper is not None:
        ax.axhline(paper, color="grey", linestyle=":", label=f"paper {paper:.4f}")
    _finish(fig, ax, path, title, key, "round")


def bytes_quality(points: list[tuple[str, float, float]], metric: str, path: Path, title: str) -> None:
    """(label, bytes per round, metric) of a method's recorded runs."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.scatter([b / 1e6 for _, b, _ in points], [m for _, _, m in points], alpha=0.7)
    if len(points) <= 8:   # more labels than that overlap; the page's table names every point
        for label, b, m in points:
            ax.annotate(label, (b / 1e6, m), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    _finish(fig, ax, path, title, metric, "MB per round (up + down)", legend=False)


def secagg_cost(rows: list[dict[str, Any]], path: Path) -> None:
    """Secure aggregation against the node count, one line per method (and keys: signed solid,
    unsigned dotted): the upload phase's MB (plain dashed) and the seconds of the added phases."""
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    added = ("secagg-setup", "secagg-share", "secagg-confirm", "secagg-unmask")
    for preset in sorted({r["preset"] for r in rows}):
        color = None
        for signed in (False, True):
            rs = sorted((r for r in rows if r["preset"] == preset and bool(r.get("signed")) == signed),
                        key=lambda r: r["nodes"])
            if not rs:
                continue
            n = [r["nodes"] for r in rs]
            kind = "signed" if signed else "unsigned"
            line, = a.plot(n, [r["up_secure_mb"] for r in rs], "-o" if signed else ":o", color=color,
                           label=f"{preset} secure, {kind}")
            color = line.get_color()
            if not signed:
                a.plot(n, [r["up_plain_mb"] for r in rs], "--", color=color, label=f"{preset} plain")
            b.plot(n, [sum(r.get(f"{p}_s") or 0 for p in added) for r in rs], "-o" if signed else ":o",
                   color=color, label=f"{preset}, {kind}")
    a.set_yscale("log")
    a.set_xscale("log", base=2)
    b.set_xscale("log", base=2)
    b.set_xlabel("nodes")
    b.set_ylabel("s")
    b.set_title("added exchanges (setup, share, confirm, unmask), seconds", fontsize=9)
    b.grid(alpha=0.3)
    b.legend(fontsize=7)
    _finish(fig, a, path, "upload phase, MB per round", "MB", "nodes")


def scale(clients: list[dict[str, Any]], nodes: list[dict[str, Any]], path: Path) -> None:
    """Scale (``benchmarks/scale.py``): median round and the largest node process's peak memory
    against the users (one line per method, upload and node count; dashed: ``item-upload =
    full``), and the main job's median round and SuperLink CPU against the SuperNodes."""
    plt = _plt()
    fig, ax = plt.subplots(1, 3, figsize=(14, 4))
    for key in sorted({(r["method"], r["upload"], r["nodes"]) for r in clients}):
        pts = sorted((r for r in clients if (r["method"], r["upload"], r["nodes"]) == key), key=lambda r: r["users"])
        style = "-o" if key[1] == "rows" else "--x"
        label = f"{key[0]} {key[1]}, {key[2]} nodes"
        ax[0].plot([r["users"] for r in pts], [r["median_round_s"] for r in pts], style, label=label)
        ax[1].plot([r["users"] for r in pts], [max(r["node_peak_mb_max_process"]) for r in pts], style, label=label)
    for a, title, ylabel in ((ax[0], "median round", "s"), (ax[1], "largest node process, peak RSS", "MB")):
        a.set_xscale("log")
        a.set_yscale("log")
        _finish(fig, a, path, title, ylabel, "users = logical clients")
    if nodes:
        rs = sorted(nodes, key=lambda r: r["nodes"])
        ax[2].plot([r["nodes"] for r in rs], [r["median_round_s"] for r in rs], "-o", label="median round (s)")
        ax[2].plot([r["nodes"] for r in rs], [r["superlink_cpu_s"] for r in rs], "-s", label="SuperLink CPU, whole run (s)")
        ax[2].set_xscale("log", base=2)
    _finish(fig, ax[2], path, "main job against SuperNodes", "s", "SuperNodes")
