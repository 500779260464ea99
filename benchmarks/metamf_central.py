"""MetaMF trained centrally, as the authors' code trains it, on the preset ``metamf-ufgraphfr-ml100k``'s
data, split and evaluation: how far is the federated preset (100 rounds = 100 server Adam steps) from
the code's step count?

What it measures. Corolla's own meta network (``corolla.models.metamf.MetaMF``, built, initialised and
given its Adam by ``strategies.metamf.MetaMF.build`` exactly as the federated server does) is trained
by the loop of the authors' ``Run.ipynb`` (TempSDU/MetaMF bbfdf0b, docs/methods/metamf.md):

* cell 16: each epoch's rows shuffled and cut into mini-batches of ``--batch-size`` (64) rows mixing
  users (the last, shorter batch kept);
* cell 17: per batch ``zero_grad``, the model's loss (MSE, ``MetaMF.py:113-115``; the preset's
  ``metamf-loss``), ``backward``, ``clip_grad_norm_(·, 5)`` (``metamf-clip``), ``step``;
* cell 15: Adam, lr 1e-4 (the preset's ``lr``, ``--lr``), weight decay 1e-3 (``metamf-weight-decay``).

The rows are the preset's implicit task, drawn by the federated client's own code: epoch e's rows are
federated round e's (``client_app.oneuser.round_samples``: every train positive, label 1, with 4
never-interacted negatives, label 0, seeded by (seed, client, e)), so epoch 1 holds exactly the rows
of round 1's one full-batch server step, cut into 7,666 steps. Evaluation is the federated run's: the
server's generation of every user's item table and RP weights (``MetaMF.generated``) scored by the
client's ``MetaMFClient.batch_evaluate`` (leave-one-out by time, 99 validation and 99 test
negatives, ``corolla.metrics.loo_user_metrics``); both the plain metrics and the preset's tie rule
(``compat-ties-against-positive``: a negative tied with the held-out item ranks above it, the
``metrics_paper_compat`` of the federated result) are kept, averaged over users. It evaluates after
the steps in ``--eval-steps`` and every ``--eval-every`` epochs, and once more when ``--max-minutes``
stops the loop. The selection is the preset's: the evaluation with the best validation HR@10 under
the tie rule, the latest of ties.

Not the code: the network's forward gathers the used rows of the generated item table instead of a
one-hot product with the whole table (the same function; ``tests/test_metamf.py``); ``--fused`` (on
by default) uses PyTorch's fused CPU Adam, the same update up to float rounding, for speed.

Command (docs/results/metamf-central-ufgraphfr-ml100k.json; 2 shared cores, 25 minutes: 8.4 epochs)::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/metamf_central.py --data-dir $COROLLA_DATA \\
        --epochs 100 --max-minutes 25 --eval-steps 0,100,300,1000,3000 --eval-every 1 \\
        --json docs/results/metamf-central-ufgraphfr-ml100k.json

Its ``full_batch_check`` (the same network and data, one step per epoch on all its rows, which is the
federated preset's round; equal to the federated run's rounds 1-7 in all four metrics)::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/metamf_central.py --data-dir $COROLLA_DATA \\
        --batch-size 0 --epochs 10 --max-minutes 4 --eval-steps "" --eval-every 1 --json FILE
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_app.metamf import MetaMFClient
from client_app.oneuser import round_samples
from corolla import methods
from corolla.config import preset_path, resolve
from corolla.data import build_federation
from corolla.util import rng
from strategies.metamf import MetaMF as Server

PRESET = "metamf-ufgraphfr-ml100k"
FEDERATED = Path(__file__).resolve().parents[1] / "docs" / "results" / f"{PRESET}.json"   # the preset's recorded run
EVAL_CHUNK = 64          # users whose tables are generated together at evaluation


class _Roster:
    """What ``Server.build`` reads of the roster: the item count."""

    def __init__(self, n_items: int, cids: list[int]):
        self.n_items = n_items
        self.clients = {c: {"users": 1} for c in cids}
        self.data_stats: dict = {}

    def available(self) -> list[int]:
        return sorted(self.clients)


def setup(cfg: dict, data_dir: str | None, fused: bool = False):
    """(server, clients): the federated server's network and Adam, and one ``MetaMFClient`` per user."""
    fed = build_federation(cfg, data_dir)
    params = methods.run_params(cfg)
    dev = torch.device("cpu")
    clients = [MetaMFClient(cfg, fed, c, fed.clients[c], dev, data_dir, params) for c in range(fed.num_clients)]
    server = Server(cfg)
    server.roster = _Roster(int(fed.n_items), [c.cid for c in clients])
    server.build([c.cid for c in clients])
    if fused:   # the same Adam (lr, weight decay), fused kernel
        server.opt = torch.optim.Adam(server.net.parameters(), lr=cfg["lr"], weight_decay=params.metamf_weight_decay,
                                      fused=True)
    return server, clients


def epoch_rows(server: Server, clients: list[MetaMFClient], epoch: int) -> dict[str, np.ndarray]:
    """Federated round ``epoch``'s rows of every client, as (embedding row, item, label) arrays."""
    samples, _ = round_samples(clients, epoch)
    users, items, labels = [], [], []
    for c, s in zip(clients, samples):
        s = c.rows(s, epoch)
        users.append(np.full(len(s["item"]), server.rows[c.cid], np.int64))
        items.append(s["item"].astype(np.int64))
        labels.append(s["label"].astype(np.float32))
    return {"user": np.concatenate(users), "item": np.concatenate(items), "label": np.concatenate(labels)}


def batches(n: int, size: int, g: np.random.Generator) -> list[np.ndarray]:
    """A shuffled order of ``n`` rows cut into batches of ``size`` (the last one shorter)."""
    order = g.permutation(n)
    return [order[a:a + size] for a in range(0, n, size)]


def train_step(server: Server, users, items, labels, chunk: int = 0) -> float:
    """One step of Run.ipynb cell 17 on one batch: the loss, backward, clip, Adam. ``chunk`` > 0:
    the batch's forward and backward in parts of that many rows, each part's loss summed and divided
    by the batch's size (the same gradient; memory for a batch of a whole epoch)."""
    net, opt = server.net, server.opt
    opt.zero_grad(set_to_none=True)
    n = len(labels)
    parts = [slice(0, n)] if chunk <= 0 or n <= chunk else [slice(a, a + chunk) for a in range(0, n, chunk)]
    total = 0.0
    for sl in parts:
        pred = net(torch.as_tensor(users[sl]), torch.as_tensor(items[sl]))
        y = torch.as_tensor(labels[sl])
        if server.p.metamf_loss == "mse":
            per = (pred - y) ** 2
        else:
            per = torch.nn.functional.binary_cross_entropy_with_logits(pred, y, reduction="none")
        loss = per.mean() if len(parts) == 1 else per.sum() / n
        loss.backward()
        total += float(loss.detach())
    if server.p.metamf_clip > 0:
        torch.nn.utils.clip_grad_norm_(net.parameters(), server.p.metamf_clip)
    opt.step()
    return total


def evaluate(server: Server, clients: list[MetaMFClient], rnd: int = 0) -> dict[str, float]:
    """The federated evaluation of the current network: every user's generated parameters
    (``Server.generated``) scored by ``MetaMFClient.batch_evaluate``; the mean over users of each
    ``valid/…`` and ``test/…`` metric (``ties:`` = the preset's tie rule)."""
    acc: dict[str, list[float]] = {}
    for a in range(0, len(clients), EVAL_CHUNK):
        part = clients[a:a + EVAL_CHUNK]
        gen = server.generated([c.cid for c in part])
        res = MetaMFClient.batch_evaluate(part, rnd, [{} for _ in part], {}, [gen[c.cid] for c in part])
        for r in res:
            for k, v in r.metrics.items():
                acc.setdefault(k, []).extend(v)
    return {k: float(np.mean(v)) for k, v in sorted(acc.items())}


KEEP = ("hr@10", "ndcg@10", "ties:hr@10", "ties:ndcg@10")


def paper_values() -> dict[str, float]:
    """The paper's row, from the preset's ``[paper]`` table."""
    import tomllib
    doc = tomllib.loads(preset_path(PRESET).read_text(encoding="utf-8"))
    return {k: v for k, v in doc.get("paper", {}).items() if isinstance(v, float)}


def federated_values() -> dict:
    """The federated run of the preset this is compared with (its recorded result, if present)."""
    if not FEDERATED.is_file():
        return {"source": None}
    d = json.loads(FEDERATED.read_text())
    mc = d.get("metrics_paper_compat", {}).get("metrics", {})
    return {"source": f"docs/results/{FEDERATED.name}", "test_ties_hr@10": mc.get("hr@10"),
            "test_ties_ndcg@10": mc.get("ndcg@10"), "steps": d.get("rounds_completed")}


def select(evals: list[dict]) -> dict | None:
    """The preset's selection: best validation HR@10 under the tie rule, latest of ties."""
    best = None
    for e in evals:
        if best is None or e["valid"]["ties:hr@10"] >= best["valid"]["ties:hr@10"]:
            best = e
    return best


def table(evals: list[dict]) -> str:
    head = ("| epoch | steps | wall s | train loss | valid HR@10 | valid NDCG@10 | test HR@10 | test NDCG@10 |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = [f"| {e['epoch']:.3f} | {e['step']} | {e['wall_s']:.0f} | "
            + (f"{e['train_loss']:.4f}" if e["train_loss"] is not None else "–")
            + f" | {e['valid']['ties:hr@10']:.4f} | {e['valid']['ties:ndcg@10']:.4f} | "
              f"{e['test']['ties:hr@10']:.4f} | {e['test']['ties:ndcg@10']:.4f} |" for e in evals]
    return "\n".join([head, *rows])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=64,
                    help="rows per step (64: the code's); 0: every row of the epoch in one step, which is the "
                         "federated preset's round (epoch e = round e's rows, one Adam step)")
    ap.add_argument("--chunk", type=int, default=8192, help="rows per forward/backward within a step (memory only)")
    ap.add_argument("--lr", type=float, default=None, help="default: the preset's lr (1e-4, the code's)")
    ap.add_argument("--seed", type=int, default=None, help="default: the preset's seed (0)")
    ap.add_argument("--data-dir", default=os.environ.get("COROLLA_DATA"))
    ap.add_argument("--eval-every", type=int, default=1, help="evaluate every N epochs (0: never at epoch ends)")
    ap.add_argument("--eval-steps", default="100,1000", help="also evaluate after these global step counts (0: before training)")
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop after this many minutes of training (0: no limit)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--fused", type=int, default=1, help="1: fused CPU Adam (same update, faster)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    for name, v, low in (("--epochs", a.epochs, 1), ("--batch-size", a.batch_size, 0), ("--chunk", a.chunk, 0),
                         ("--threads", a.threads, 1), ("--eval-every", a.eval_every, 0), ("--max-steps", a.max_steps, 0)):
        if v < low:
            ap.error(f"{name} {v}: expected an integer >= {low}")
    if a.max_minutes < 0:
        ap.error(f"--max-minutes {a.max_minutes}: expected >= 0")
    torch.set_num_threads(a.threads)
    over = {k: v for k, v in (("lr", a.lr), ("seed", a.seed)) if v is not None}
    cfg = resolve(PRESET, over)
    t_start = time.time()
    load_start = os.getloadavg()
    server, clients = setup(cfg, a.data_dir, bool(a.fused))
    eval_steps = sorted({int(x) for x in a.eval_steps.split(",") if x.strip()})
    out = {"what": "MetaMF's network trained centrally by the authors' loop (Run.ipynb cells 15-17) on the preset's data, "
                   "split and evaluation (benchmarks/metamf_central.py)",
           "preset": PRESET, "paper": paper_values(),
           "federated": federated_values(),
           "settings": {"batch-size": a.batch_size, "chunk": a.chunk, "lr": cfg["lr"], "weight-decay": server.p.metamf_weight_decay,
                        "clip": server.p.metamf_clip, "loss": server.p.metamf_loss, "seed": cfg["seed"],
                        "num-negatives": cfg["num-negatives"], "neg-pool": cfg["neg-pool"], "fused-adam": bool(a.fused),
                        "epochs": a.epochs, "eval-every": a.eval_every, "eval-steps": eval_steps,
                        "max-minutes": a.max_minutes, "max-steps": a.max_steps, "threads": a.threads},
           "command": " ".join(["python", *sys.argv]) if argv is None else " ".join(["metamf_central", *argv]),
           "machine": {"cores": os.cpu_count(), "system": platform.platform(), "python": platform.python_version(),
                       "torch": torch.__version__, "nice": os.nice(0),
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "loadavg_start": list(load_start)},
           "setup_s": round(time.time() - t_start, 1), "evaluations": [], "stopped": "epochs"}
    evals = out["evaluations"]
    t0 = time.time()
    train_s = 0.0   # wall time of training alone (evaluation excluded)

    def record(epoch_float, step, loss):
        te = time.time()
        m = evaluate(server, clients)
        e = {"epoch": round(epoch_float, 4), "step": step, "wall_s": round(time.time() - t0, 1),
             "train_s": round(train_s, 1), "eval_s": round(time.time() - te, 1),
             "train_loss": None if loss is None else round(loss, 6),
             "valid": {k: m[f"valid/{k}"] for k in KEEP}, "test": {k: m[f"test/{k}"] for k in KEEP},
             "loadavg": list(os.getloadavg())}
        evals.append(e)
        print(f"epoch {e['epoch']:.3f} step {step} wall {e['wall_s']:.0f}s loss {e['train_loss']} "
              f"valid {e['valid']['ties:hr@10']:.4f}/{e['valid']['ties:ndcg@10']:.4f} "
              f"test {e['test']['ties:hr@10']:.4f}/{e['test']['ties:ndcg@10']:.4f}", flush=True)
        write()

    def write():
        out["wall_s"] = round(time.time() - t_start, 1)
        out["machine"]["loadavg_end"] = list(os.getloadavg())
        out["selected"] = select(evals)
        if a.json:   # atomically: an interrupted run leaves its last whole record
            dest = Path(a.json)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(".tmp")
            tmp.write_text(json.dumps(out, indent=1) + "\n")
            os.replace(tmp, dest)

    step, stop, run_loss, run_n = 0, False, 0.0, 0
    if 0 in eval_steps:
        record(0.0, 0, None)
    for epoch in range(1, a.epochs + 1):
        ts = time.time()
        rows = epoch_rows(server, clients, epoch)
        size = a.batch_size if a.batch_size > 0 else len(rows["label"])
        order = batches(len(rows["label"]), size, rng(cfg["seed"], "metamf-central-shuffle", epoch))
        out.setdefault("rows_per_epoch", len(rows["label"]))
        out.setdefault("steps_per_epoch", len(order))
        run_loss, run_n = 0.0, 0
        for j, idx in enumerate(order):
            ell = train_step(server, rows["user"][idx], rows["item"][idx], rows["label"][idx], a.chunk)
            run_loss += ell * len(idx)
            run_n += len(idx)
            step += 1
            if step in eval_steps:
                train_s += time.time() - ts
                record(epoch - 1 + (j + 1) / len(order), step, run_loss / run_n)
                ts = time.time()
            if (a.max_minutes > 0 and time.time() - t0 > 60 * a.max_minutes) or (a.max_steps and step >= a.max_steps):
                stop = True
                out["stopped"] = "max-minutes" if not a.max_steps or step < a.max_steps else "max-steps"
                break
        train_s += time.time() - ts
        done = epoch - 1 + (j + 1) / len(order)
        if stop:
            if not evals or evals[-1]["step"] != step:
                record(done, step, run_loss / run_n)
            break
        if a.eval_every and epoch % a.eval_every == 0 and (not evals or evals[-1]["step"] != step):
            record(done, step, run_loss / run_n)
    write()
    print()
    print(table(evals))
    s = out["selected"]
    if s:
        print(f"\nselected (best valid HR@10, ties against the positive): epoch {s['epoch']}, step {s['step']}: "
              f"test HR@10 {s['test']['ties:hr@10']:.4f}, NDCG@10 {s['test']['ties:ndcg@10']:.4f} "
              f"(paper {out['paper'].get('hr@10')} / {out['paper'].get('ndcg@10')}; federated "
              f"{out['federated'].get('steps')} steps {out['federated'].get('test_ties_hr@10')} / "
              f"{out['federated'].get('test_ties_ndcg@10')})")
    return out


if __name__ == "__main__":
    main()
