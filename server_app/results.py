"""Run outputs: ``rounds.jsonl``, progress, atomic checkpoints, model selection, ``summary.json``.

Files in the output directory ``OUT``:

* ``config.json``   the resolved run configuration, the preset and the run key;
* ``launch.json``   the mode and node count ``corolla run`` started the run with (written by the
  launcher, read by ``--resume``);
* ``rounds.jsonl``  one line per round: ``round``, ``phases`` (``name``, ``bytes_up``,
  ``bytes_down``, ``wall_s``, ``replies``, ``excluded``), ``train`` metrics, ``metrics`` (test),
  ``valid``, ``compat`` (paper-compatible test metrics), ``wall_s``;
* ``progress.log``  human-readable progress, one line per phase and one per round;
* ``rounds.log``    one line per round, in round order once its evaluation is in: bytes, time,
  validation and test of the selection metric, elapsed time and an ETA (what ``corolla run``
  prints);
* ``checkpoint.npz`` server state after the last completed round (strategy arrays + recorder
  state as JSON), replaced atomically;
* ``summary.json``  the result (see :meth:`RunRecorder.summary`);
* ``learning_curve.png``, and ``topk.jsonl`` with ``--export-topk K``.
"""

from __future__ import annotations

import json
import resource
import time
from logging import DEBUG, INFO
from pathlib import Path
from typing import Any

import numpy as np
from flwr.common.logger import log

from corolla.util import append_line, atomic_save_npz, atomic_write_json, dumps, load_npz


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class RunRecorder:
    def __init__(self, out_dir: str | Path, cfg: dict[str, Any], preset: str | None, paper: dict[str, Any]):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.cfg, self.preset, self.paper = cfg, preset, paper
        self.history: list[dict[str, Any]] = []
        self.t_start = time.time()
        self.wall_before = 0.0  # wall time of earlier (resumed-from) sessions
        self.stopped_early = False
        self.discarded: list[dict[str, Any]] = []  # phases sent but not used (after an early stop)
        self.data_stats: dict[str, Any] = {}        # what the nodes reported about the data (partition)
        self.run_info: dict[str, Any] = {}          # run key, state and data folders, config hash
        self.provenance: dict[str, Any] = {}        # code, versions, machine, command, mode, nodes
        self.rounds_before = 0                      # rounds of earlier (resumed-from) sessions
        self.sink = None                            # an experiment-tracking sink (corolla.tracking)
        self.nodes_info = None                      # () -> each node's clients, key, flags, failure

    # ---------------------------------------------------------------- per phase / round
    def progress(self, rnd: int, phase: str, stats, ok: int, targets: int) -> None:
        line = (f"round {rnd:>3}/{self.cfg['num-rounds']} {phase:<10} clients {ok}/{targets} "
                f"up {stats.bytes_up / 1e6:8.3f} MB down {stats.bytes_down / 1e6:8.3f} MB "
                f"{stats.wall_s:6.2f} s" + (f" excluded {len(stats.excluded)}" if stats.excluded else ""))
        log(DEBUG, line)
        append_line(self.out / "progress.log", line)

    def end_round(self, strategy, rnd: int, phase_stats, train_metrics, evaluation, wall_s: float,
                  targets) -> bool:
        rec: dict[str, Any] = {"round": rnd, "phases": [p.as_dict() for p in phase_stats],
                               "train": train_metrics, "clients": len(targets), "wall_s": round(wall_s, 4)}
        if evaluation is not None:
            rec["metrics"] = evaluation["test"]["metrics"]
            rec["valid"] = evaluation["valid"]["metrics"]
            rec["compat"] = evaluation["test"]["compat"]
            rec["valid_compat"] = evaluation["valid"]["compat"]
            rec["users"] = {"valid": evaluation["valid"]["users"], "test": evaluation["test"]["users"]}
            if "per_client" in evaluation["test"]:
                rec["per_client"] = evaluation["test"]["per_client"]
                rec["unweighted_mean"] = evaluation["test"]["unweighted_mean"]
        self.history.append(rec)
        append_line(self.out / "rounds.jsonl", dumps(rec))
        line = self.round_line(rec)
        log(INFO, line)
        append_line(self.out / "progress.log", line)
        append_line(self.out / "rounds.log", line)
        if self.sink is not None:
            self.sink.round(rec)
        stop = self._should_stop()
        self.stopped_early = stop and rnd < self.cfg["num-rounds"]
        self.checkpoint(strategy, rnd)
        return stop

    def round_line(self, rec: dict[str, Any]) -> str:
        """One line per round: bytes, wall time, the selection metric, elapsed time and an ETA (the
        mean round time of this session times the rounds left)."""
        n = self.cfg["num-rounds"]
        up = sum(p["bytes_up"] for p in rec["phases"]) / 1e6
        down = sum(p["bytes_down"] for p in rec["phases"]) / 1e6
        line = f"round {rec['round']:>3}/{n} up {up:9.3f} MB down {down:9.3f} MB {rec['wall_s']:7.2f} s"
        excluded = sum(len(p["excluded"]) for p in rec["phases"])
        if excluded:
            line += f" excluded {excluded}"
        sel = self.cfg["select-metric"]
        if "valid" in rec:
            line += (f" | valid {sel}={rec['valid'].get(sel, float('nan')):.4f} "
                     f"test {sel}={rec['metrics'].get(sel, float('nan')):.4f}")
            if rec["compat"]:
                line += f" (paper-compat {rec['compat'].get(sel, float('nan')):.4f})"
        done = len(self.history) - self.rounds_before
        elapsed = time.time() - self.t_start
        eta = elapsed / max(done, 1) * max(n - rec["round"], 0)
        return line + f" | {_clock(self.wall_before + elapsed)} elapsed, ETA {_clock(eta)}"

    def discard(self, stats) -> None:
        """A phase whose results are not used (a round trained before the early stop that its
        fused evaluation decided); its bytes still count in the summary."""
        self.discarded.append(stats.as_dict())
        append_line(self.out / "progress.log", f"round results of phase {stats.name} discarded (early stop)")

    # ---------------------------------------------------------------- selection
    def _evaluated(self) -> list[dict[str, Any]]:
        return [h for h in self.history if "valid" in h]

    def select(self, split: str = "valid", compat: bool = False) -> dict[str, Any] | None:
        """The round with the best ``select-metric`` on ``split`` (ties: ``select-tie``)."""
        key = self.cfg["select-metric"]
        best, best_v = None, -np.inf
        last_wins = self.cfg["select-tie"] == "last" or (split == "test")
        for h in self._evaluated():
            src = h["valid" if split == "valid" else "metrics"]
            if compat:
                alt = h["valid_compat" if split == "valid" else "compat"]
                src = alt if key in alt else src
            v = src.get(key, np.nan)
            if not np.isfinite(v):
                continue
            if v > best_v or (last_wins and v == best_v):
                best, best_v = h, v
        return best

    def _should_stop(self) -> bool:
        p = self.cfg["patience"]
        ev = self._evaluated()
        if p <= 0 or not ev:
            return False
        best = self.select()
        if best is None:
            return False
        after = [h for h in ev if h["round"] > best["round"]]
        return len(after) >= p

    # ---------------------------------------------------------------- checkpoint / resume
    def checkpoint(self, strategy, rnd: int) -> None:
        meta = {"round": rnd, "history": self.history, "run_info": self.run_info,
                "wall_s": self.wall_before + time.time() - self.t_start, "stopped_early": self.stopped_early}
        arrays = dict(strategy.state_dict())
        arrays["__meta__"] = np.frombuffer(dumps(meta).encode(), np.uint8)
        atomic_save_npz(self.out / "checkpoint.npz", arrays)

    @staticmethod
    def read_checkpoint(out_dir: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        path = Path(out_dir) / "checkpoint.npz"
        if not path.is_file():
            raise FileNotFoundError(f"--resume {out_dir}: no checkpoint.npz there (no round completed)")
        arrays = load_npz(path)
        meta = json.loads(bytes(arrays.pop("__meta__")).decode())
        return meta, arrays

    def restore(self, meta: dict[str, Any]) -> None:
        self.history = list(meta["history"])
        self.rounds_before = len(self.history)
        self.wall_before = float(meta.get("wall_s", 0.0))
        # rounds.jsonl: keep exactly the checkpointed rounds (a killed round may have been appended)
        lines = [dumps(h) for h in self.history]
        from corolla.util import atomic_write_text

        atomic_write_text(self.out / "rounds.jsonl", "".join(line + "\n" for line in lines))

    # ---------------------------------------------------------------- summary
    def summary(self, status: str, error: str | None = None, input_error: bool = False) -> dict[str, Any]:
        """Write ``summary.json``; a failed run's ``error`` is its one-line reason
        (``input_error``: caused by the run's input, e.g. data no node could load)."""
        sel = self.select()
        phases = [p for h in self.history for p in h["phases"]] + self.discarded
        phases_up = sum(p["bytes_up"] for p in phases)
        phases_down = sum(p["bytes_down"] for p in phases)
        out: dict[str, Any] = {
            "status": status,
            "preset": self.preset,
            "method": self.cfg["method"],
            "model": self.cfg["model"],
            "dataset": self.cfg["dataset"],
            "protocol": self.cfg["protocol"],
            "rounds_completed": self.history[-1]["round"] if self.history else 0,
            "stopped_early": self.stopped_early,
            "selection": {"split": "valid", "metric": self.cfg["select-metric"],
                          "round": sel["round"] if sel else None},
            "metrics": sel["metrics"] if sel else {},
            "valid_metrics": sel["valid"] if sel else {},
            "paper": self.paper,
            "bytes_up": phases_up,
            "bytes_down": phases_down,
            "wall_s": round(self.wall_before + time.time() - self.t_start, 3),
            **({"discarded_phases": self.discarded} if self.discarded else {}),
            # peak resident memory of the ServerApp process (Linux: ru_maxrss in KiB)
            "server_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "config": self.cfg,
            "provenance": self.provenance,
        }
        if error is not None:
            out["error"] = error
            out["input_error"] = input_error
        if sel and "per_client" in sel:   # the selected round, each client and their plain mean
            out["per_client_metrics"] = sel["per_client"]
            out["metrics_unweighted_mean"] = sel["unweighted_mean"]
        if self.data_stats:
            out["data"] = self.data_stats
        if self.nodes_info is not None:
            out["nodes"] = self.nodes_info()
        if self.cfg.get("secagg", "none") != "none":   # which threat model the run's aggregation held under
            signed = [h["train"].get("secagg-signed") for h in self.history if "secagg-signed" in h["train"]]
            out["secure_aggregation"] = {
                "protocol": self.cfg["secagg"], "rounds": len(signed), "signed_rounds": int(sum(signed)),
                "model": ("malicious server: round keys and survivor sets signed with the nodes' keys"
                          if signed and all(signed) else
                          "semi-honest server only: some or all nodes had no authentication key "
                          "(node config auth-key-file / trusted-keys)")}
        last = self._evaluated()[-1] if self._evaluated() else None
        out["last_round_metrics"] = last["metrics"] if last else {}
        uses_compat = any(self.cfg[k] for k in ("compat-fedcia-metrics", "compat-ties-against-positive",
                                                  "compat-select-on-test"))
        if uses_compat:
            split = "test" if self.cfg["compat-select-on-test"] else "valid"
            csel = self.select(split, compat=True)
            out["metrics_paper_compat"] = {
                "selection": {"split": split, "metric": self.cfg["select-metric"],
                              "round": csel["round"] if csel else None},
                "metrics": (csel["compat"] or csel["metrics"]) if csel else {},
            }
        if self.cfg.get("compat-client-aggregation", "none") == "client-best-mean":
            out["metrics_paper_compat"] = client_best_mean(self._evaluated())
        self.plot()
        if self.sink is not None:
            self.sink.summary(out)
            self.sink.close()
        # summary.json is written last: its existence marks a finished run (the CLI stops then)
        atomic_write_json(self.out / "summary.json", out)
        return out

    def plot(self) -> None:
        """``learning_curve.png``: validation and test of the selection metric per evaluated round,
        the paper's number and the selected round marked (``corolla.report.plots``)."""
        try:
            from corolla.report.plots import learning_curve
        except Exception:  # plotting is optional (matplotlib missing)
            return
        key = self.cfg["select-metric"]
        sel = self.select()
        paper = self.paper.get(key)
        learning_curve(self.history, key, self.out / "learning_curve.png",
                       f"{self.preset or self.cfg['method']} ({self.cfg['dataset']})",
                       paper if isinstance(paper, (int, float)) else None, sel["round"] if sel else None)


def client_best_mean(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The LPSFed code's "Final Results" (benchmarks/lpsfed_authors.md): for each client the best
    test value of each metric over the evaluated rounds (each metric's own best round, as the
    code's running maxima), then the unweighted mean over clients. It selects on test, so it is a
    paper-compatible number beside the validation-selected pooled one, never a replacement."""
    best: dict[str, dict[str, float]] = {}
    for h in history:
        for cid, mets in h.get("per_client", {}).items():
            b = best.setdefault(cid, {})
            for k, v in mets.items():
                if k != "users" and (k not in b or v > b[k]):
                    b[k] = float(v)
    keys = set.intersection(*(set(b) for b in best.values())) if best else set()
    return {"aggregation": "client-best-mean: per client the best test value over the evaluated rounds, "
                           "then the unweighted mean over clients (the LPSFed code's Final Results)",
            "clients": len(best), "rounds": [h["round"] for h in history if "per_client" in h],
            "metrics": {k: float(np.mean([b[k] for b in best.values()])) for k in sorted(keys)}}
