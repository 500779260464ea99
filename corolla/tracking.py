"""An experiment-tracking sink: TensorBoard event files in ``OUT/tensorboard/`` (``--track
tensorboard``, extra ``track``).

TensorBoard rather than MLflow: its event files are plain files written beside the run (no
tracking server, no database), its reader works offline, and the package is small; MLflow's local
file store would add a few hundred MB of dependencies for the same per-round scalars. Logged: the
resolved config (text), per round the validation and test metrics, the paper-compatible ones, bytes
up and down and the wall time, and at the end the summary (text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SINKS = ("tensorboard",)


class TensorBoardSink:
    def __init__(self, out: Path):
        from torch.utils.tensorboard import SummaryWriter   # needs the 'tensorboard' package (extra 'track')

        self.dir = out / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))

    def config(self, cfg: dict[str, Any]) -> None:
        self.writer.add_text("config", "```\n" + json.dumps(cfg, indent=1, sort_keys=True) + "\n```", 0)

    def round(self, rec: dict[str, Any]) -> None:
        r = rec["round"]
        for split, key in (("valid", "valid"), ("test", "metrics"), ("test-paper-compat", "compat")):
            for k, v in (rec.get(key) or {}).items():
                if isinstance(v, (int, float)):
                    self.writer.add_scalar(f"{split}/{k}", v, r)
        self.writer.add_scalar("bytes/up", sum(p["bytes_up"] for p in rec["phases"]), r)
        self.writer.add_scalar("bytes/down", sum(p["bytes_down"] for p in rec["phases"]), r)
        self.writer.add_scalar("time/round_s", rec["wall_s"], r)
        self.writer.flush()

    def summary(self, summary: dict[str, Any]) -> None:
        keep = {k: summary[k] for k in ("status", "rounds_completed", "selection", "metrics", "bytes_up",
                                        "bytes_down", "wall_s") if k in summary}
        self.writer.add_text("summary", "```\n" + json.dumps(keep, indent=1) + "\n```", summary.get("rounds_completed", 0))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_sink(name: str, out: Path) -> TensorBoardSink | None:
    if not name:
        return None
    if name not in SINKS:
        raise ValueError(f"--track {name!r}: expected one of {', '.join(SINKS)}")
    from corolla.extras import require

    require("track")
    return TensorBoardSink(out)
