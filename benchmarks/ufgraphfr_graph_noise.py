"""How much of the users' W_u survives the upload noise into UFGraphFR's server graph.

Reads the clients' saved state of a finished run (``<run>/node-state/<node>/c<cid>.r<round>.npz``:
the clean W_u each client keeps, and its text vector v_u), rebuilds the server's graph
(``graph-mode``/``neighborhood-*`` of the run's config) from the clean W_u, from W_u plus
Laplace(0, ε) noise for each ε (as the clients upload it: the authors' `engine.py:316-326`, `docs/methods/ufgraphfr.md`), and from v_u
(the oT ablation's input), and reports how far apart the graphs are: neighbours per user, the
fraction of user pairs on which two graphs agree (linked or not), what two independent graphs with
the same row densities would agree on by chance, and the mean Jaccard index of each user's
neighbour sets. Writes a JSON file with every number.

    python benchmarks/ufgraphfr_graph_noise.py runs/ufgraphfr-ml100k \
        --eps 0.05,0.1,0.2,0.3,0.4 --out docs/results/ufgraphfr-ml100k+graph-noise.json

The authors' code's clients, dumped by the patched run of ``benchmarks/ufgraphfr_authors.md``
("The user graph": ``wu.r<round>.npz`` with the clean W_u of every user,
``w``, and its text vector, ``text``), are read the same way with ``--authors-dump FILE`` in
place of the run; the graph is then the code's own (``graph-mode = reference``, threshold 1.0 on
the mean cosine distance: ``utils.py`` ``select_topk_neighboehood``)::

    python benchmarks/ufgraphfr_graph_noise.py --authors-dump wu.r100.npz \
        --out docs/results/ufgraphfr-authors-ml100k+graph-noise.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corolla.graph import build_graph  # noqa: E402
from corolla.util import atomic_write_text  # noqa: E402


def load_uploads(run: str, rnd: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    files = glob.glob(os.path.join(run, "node-state", "*", "c*.r*.npz"))
    if not files:
        raise SystemExit(f"{run}: no client state under node-state/ (expected c<cid>.r<round>.npz)")
    parsed = [(int(m.group(1)), int(m.group(2)), f) for f in files
              if (m := re.search(r"c(\d+)\.r(\d+)\.npz$", f))]
    rnd = rnd or max(r for _, r, _ in parsed)
    by_cid = {c: f for c, r, f in parsed if r == rnd}
    if not by_cid:
        raise SystemExit(f"{run}: no client state saved for round {rnd}")
    w, t = [], []
    for c in sorted(by_cid):
        a = np.load(by_cid[c])
        if "user.weight" not in a.files or "text" not in a.files:
            raise SystemExit(f"{by_cid[c]}: expected a UFGraphFR client state (user.weight, text)")
        w.append(a["user.weight"].ravel())
        t.append(a["text"])
    return np.asarray(w, np.float64), np.asarray(t, np.float64), rnd


def load_authors_dump(path: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The clean W_u (users × 32·384) and text vectors of the authors' patched code's dump."""
    m = re.search(r"r(\d+)\.npz$", path)
    try:
        a = np.load(path)
        w, t = np.asarray(a["w"], np.float64), np.asarray(a["text"], np.float64)
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"--authors-dump {path}: expected an .npz with arrays 'w' and 'text' ({e})")
    return w, t, int(m.group(1)) if m else 0


def compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Agreement of two graphs on the user pairs (i ≠ j), the mean Jaccard index of the rows'
    neighbour sets, and the agreement two independent graphs with the same row densities would
    have by chance (mean over rows of p q + (1 − p)(1 − q))."""
    off = ~np.eye(len(a), dtype=bool)
    union = (a | b).sum(1)
    jac = np.where(union > 0, (a & b).sum(1) / np.maximum(union, 1), 1.0)
    p = (a & off).sum(1) / (len(a) - 1)
    q = (b & off).sum(1) / (len(a) - 1)
    return {"agreement": float((a == b)[off].mean()), "jaccard": float(jac.mean()),
            "chance_agreement": float(np.mean(p * q + (1 - p) * (1 - q)))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", default=None, help="a finished Corolla run (omit with --authors-dump)")
    ap.add_argument("--authors-dump", default=None, help="wu.r<round>.npz of the authors' patched code (arrays w, text)")
    ap.add_argument("--round", type=int, default=None, help="the saved round to read (default: the latest)")
    ap.add_argument("--eps", default="0.05,0.1,0.2,0.3,0.4", help="comma-separated Laplace scales")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        eps = [float(x) for x in args.eps.split(",") if x]
    except ValueError:
        raise SystemExit(f"--eps: expected comma-separated numbers, got {args.eps!r}")
    if (args.run is None) == (args.authors_dump is None):
        raise SystemExit("expected a run folder or --authors-dump FILE (one of them)")
    if args.authors_dump:
        mode, size, thr = "reference", 0, 1.0   # the authors' code: threshold on the mean cosine distance
        w, text, rnd = load_authors_dump(args.authors_dump)
        args.run = args.authors_dump
    else:
        cfg = json.load(open(os.path.join(args.run, "config.json")))["config"]
        mode, size, thr = cfg["graph-mode"], int(cfg["neighborhood-size"]), float(cfg["neighborhood-threshold"])
        w, text, rnd = load_uploads(args.run, args.round)
    links = lambda x: build_graph(x, mode, size, thr) > 0
    g = np.random.default_rng(args.seed)
    clean = links(w)
    out = {"run": args.run, "round": rnd, "clients": len(w), "graph-mode": mode,
           "w_entry_std": float(w.std()), "w_across_user_std": float(w.std(0).mean()),
           "clean_neighbours": float(clean.sum(1).mean()), "noisy": {}}
    for e in eps:
        noisy = links(w + g.laplace(0.0, e, w.shape))
        out["noisy"][str(e)] = {"laplace_std": e * np.sqrt(2), "neighbours": float(noisy.sum(1).mean()),
                                **compare(noisy, clean)}
    tg = links(text)
    out["text"] = {"neighbours": float(tg.sum(1).mean()), **compare(tg, clean)}
    print(f"{args.run} round {rnd}, {len(w)} clients, graph-mode {mode}")
    print(f"W_u: entry std {out['w_entry_std']:.4f}, std across users (mean over entries) {out['w_across_user_std']:.4f}")
    print(f"clean W_u graph: {out['clean_neighbours']:.1f} neighbours per user")
    for e, r in out["noisy"].items():
        print(f"ε = {e} (noise std {r['laplace_std']:.3f}): {r['neighbours']:.1f} neighbours, "
              f"agreement with the clean graph {r['agreement']:.3f} (chance {r['chance_agreement']:.3f}), "
              f"Jaccard {r['jaccard']:.3f}")
    print(f"text (v_u) graph: {out['text']['neighbours']:.1f} neighbours, agreement with the clean W_u graph "
          f"{out['text']['agreement']:.3f} (chance {out['text']['chance_agreement']:.3f}), Jaccard {out['text']['jaccard']:.3f}")
    if args.out:
        atomic_write_text(args.out, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
