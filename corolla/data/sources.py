"""Dataset files: official URLs, checksums, the data directory, download and verification.

Modelled on PyTorch Geometric's datasets: look in the data directory first, else download from
the official URL, verify the checksum, and fail with an error naming the file, the URL and the
place to put it when neither works. A checksum mismatch is always an error.

Search order for a file ``<dataset-dir>/<name>``:
1. the ``data_dir`` argument (``--data-dir`` / run-config ``data-dir`` / node-config ``data-dir``);
2. ``$COROLLA_DATA``;
3. the download cache ``$COROLLA_CACHE`` (default ``~/.cache/corolla/data``), where downloads go.

Set ``COROLLA_OFFLINE=1`` to never try the network.
"""

from __future__ import annotations

import hashlib
import io
import os
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from corolla.util import atomic_write_bytes


@dataclass(frozen=True)
class FileSpec:
    name: str                 # path relative to the data directory, e.g. "ml-100k/u.data"
    sha256: str | None = None  # hex digest of the file's bytes
    git_blob: str | None = None  # alternative: git blob id (when no sha256 is published)
    url: str = ""             # where to download it (a file, or a zip holding it)
    member: str | None = None  # member name when ``url`` is a zip


ML100K_ZIP = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
ML1M_ZIP = "https://files.grouplens.org/datasets/movielens/ml-1m.zip"
LASTFM_ZIP = "https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-2k.zip"
FILMTRUST_ZIP = "https://guoguibing.github.io/librec/datasets/filmtrust.zip"
LIGHTGCN_RAW = "https://raw.githubusercontent.com/kuandeng/LightGCN/b067ec05f16a24e0e1efe63cd82385f0c469af20/Data"
PFEDREC_RAW = "https://raw.githubusercontent.com/Zhangcx19/IJCAI-23-PFedRec/abc23809b9bca8f4f09fab5311ae4a63ed6159d2/data"
GPFEDREC_RAW = "https://raw.githubusercontent.com/Zhangcx19/GPFedRec/edb66e16ec0a399fe330eb30b83eba6c158e361f/data"
FEDCIA_RAW = "https://raw.githubusercontent.com/Mingzhe-Han/FedCIA/bbc4224a5fdb5953f76f1ee5aac0bf39fe41bd22/datasets/ml100k_100"

FILES: dict[str, FileSpec] = {f.name: f for f in [
    FileSpec("ml-100k/u.data", "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490", url=ML100K_ZIP, member="ml-100k/u.data"),
    FileSpec("ml-100k/u.user", "f120e114da2e8cf314fd28f99417c94ae9ddf1cb6db8ce0e4b5995d40e90e62c", url=ML100K_ZIP, member="ml-100k/u.user"),
    FileSpec("ml-100k/u.item", "553841ebc7de3a0fd0d6b62a204ea30c1e651aacfb2814c7a6584ac52f2c5701", url=ML100K_ZIP, member="ml-100k/u.item"),
    # the same blob (git c099b8e3) is data/100k/ratings.dat in GPFedRec, PFedRec and UFGraphFR
    FileSpec("ml-100k-gpfedrec/ratings.dat", "807b9ab64929525bfeac2a9045cf91df7017239b301fee472e4b47a69b6d6daf", url=f"{GPFEDREC_RAW}/100k/ratings.dat"),
    FileSpec("ml-1m/ratings.dat", git_blob="77a7c4b150f588c23bb9e1f068aa996c0b413695", url=ML1M_ZIP, member="ml-1m/ratings.dat"),
    FileSpec("ml-1m/users.dat", "1dc3a95300cb19f7c10e027daf29b8cdf1d908dab65b5edfb45950aa389a10a3", url=ML1M_ZIP, member="ml-1m/users.dat"),
    FileSpec("ml-1m/movies.dat", "0140fc2356357c1a851d0f52e893a1e4d3696df632c4141cea8d5bc3d621f0b9", url=ML1M_ZIP, member="ml-1m/movies.dat"),
    FileSpec("hetrec2011-lastfm-2k/user_artists.dat", "254272fa721c3935e8be286d28c051b206844307128698ab4eaa41d483379416", url=LASTFM_ZIP, member="user_artists.dat"),
    # one row per tag assignment (userID artistID tagID day month year): UFGraphFR's / PFedRec's Lastfm-2K
    FileSpec("hetrec2011-lastfm-2k/user_taggedartists.dat", "c4a9ffae9ab47a9f9b2f0678ab1f7e5c1db4ca818837d8cddd1f5699c5bbf048", url=LASTFM_ZIP, member="user_taggedartists.dat"),
    FileSpec("hetrec2011-lastfm-2k/user_friends.dat", "0360883a3557776e04fdebda851f2e5dd23e796cad7059b968acdebd528d13fa", url=LASTFM_ZIP, member="user_friends.dat"),
    FileSpec("filmtrust/ratings.txt", "241167424e24d588e8871d68641e94ead98d5b3a4f0db01ef3181a74ad35e7a1", url=FILMTRUST_ZIP, member="ratings.txt"),
    FileSpec("filmtrust/trust.txt", "64573a033add72b988a0fb140fdbc0ad3464cb9821f940007aff6fda44b09603", url=FILMTRUST_ZIP, member="trust.txt"),
    FileSpec("lightgcn/gowalla/train.txt", "7244696fdeb23911319cf7b689f2e15a3c4c92549c873a5677b44e3f13cc3e62", url=f"{LIGHTGCN_RAW}/gowalla/train.txt"),
    FileSpec("lightgcn/gowalla/test.txt", "099a2a73924e4b754dc6efd730d764f492321b53c38eb93298850c83acf57be3", url=f"{LIGHTGCN_RAW}/gowalla/test.txt"),
    # Yelp2018 and Amazon-Book: each train.txt is known by its git blob id in LightGCN's repository
    # (1,237,259 and 2,380,730 interactions); the test files by the sha256 of the copies checked
    FileSpec("lightgcn/yelp2018/train.txt", git_blob="cda12361055ba448ae4bd1070f6000c16dea8f22", url=f"{LIGHTGCN_RAW}/yelp2018/train.txt"),
    FileSpec("lightgcn/yelp2018/test.txt", "9cd9b37926cd1447a06625ffa7914527573fb097c10cb0bbdb1d1b8ded3742fe", url=f"{LIGHTGCN_RAW}/yelp2018/test.txt"),
    FileSpec("lightgcn/amazon-book/train.txt", git_blob="6ef55159c5f1fd7f6d86eb9ff290d0cc2854ac99", url=f"{LIGHTGCN_RAW}/amazon-book/train.txt"),
    FileSpec("lightgcn/amazon-book/test.txt", "6250754994dd953b91b48dccdd77a73f318e0634b4757c2abfcc9d33a54ab0f5", url=f"{LIGHTGCN_RAW}/amazon-book/test.txt"),
    FileSpec("amazon-video-pfedrec/ratings.dat", "a1292e4a4dba6c37be6ae5dc83d4404af96bf3eace4c8954e2f4e8360a3cdd76", url=f"{PFEDREC_RAW}/amazon/ratings.dat"),
    # FedCIA ships its split as 300 dense 0/1 .npy matrices; we rebuild this TSV from them.
    FileSpec("fedcia-ml100k-split/ml100k_100clients.tsv", "b5495483aed552463077a82cc362d88ae9aab8c6acfff4ccc8136e2b91f077a7", url=FEDCIA_RAW),
]}

_verified: dict[tuple[str, int, int], str] = {}


def default_cache() -> Path:
    return Path(os.environ.get("COROLLA_CACHE", Path.home() / ".cache" / "corolla" / "data"))


def search_dirs(data_dir: str | os.PathLike | None) -> list[Path]:
    dirs: list[Path] = []
    if data_dir:
        dirs.append(Path(data_dir).expanduser())
    if os.environ.get("COROLLA_DATA"):
        dirs.append(Path(os.environ["COROLLA_DATA"]).expanduser())
    dirs.append(default_cache())
    return dirs


class DatasetFileError(RuntimeError):
    """A dataset file that is missing offline, or present with the wrong checksum."""


def _digest(path: Path, spec: FileSpec) -> tuple[str, str]:
    data = path.read_bytes()
    if spec.sha256:
        return "sha256", hashlib.sha256(data).hexdigest()
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return "git blob id", h.hexdigest()


def verify(path: Path, spec: FileSpec) -> None:
    """Raise :class:`DatasetFileError` unless ``path`` has the expected checksum."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    expected = spec.sha256 or spec.git_blob
    if _verified.get(key) == expected:
        return
    kind, got = _digest(path, spec)
    if got != expected:
        raise DatasetFileError(
            f"checksum mismatch for {path}: {kind} is {got}, expected {expected} "
            f"(file {spec.name} from {spec.url}). Delete or replace the file; it is never used as is."
        )
    _verified[key] = expected


def locate(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Return the verified local path of dataset file ``name`` (downloading it if allowed)."""
    spec = FILES[name]
    dirs = search_dirs(data_dir)
    for d in dirs:
        p = d / name
        if p.is_file():
            verify(p, spec)
            return p
    target = default_cache() / name
    err: Exception | None = None
    if os.environ.get("COROLLA_OFFLINE", "") not in ("1", "true", "yes"):
        try:
            _download(spec, target)
            verify(target, spec)
            return target
        except DatasetFileError:
            target.unlink(missing_ok=True)
            raise
        except Exception as e:  # network errors: fall through to the offline message
            err = e
    places = list(dict.fromkeys(str(d / name) for d in dirs[:-1])) or [str(dirs[0] / name)]
    where = " or ".join(places)
    reason = f" (download failed: {err})" if err else " (offline: COROLLA_OFFLINE is set)"
    raise DatasetFileError(
        f"dataset file '{name}' not found{reason}. Get it from {spec.url}"
        f"{' (member ' + spec.member + ')' if spec.member else ''} and put it at {where}, "
        f"or pass --data-dir DIR / set COROLLA_DATA to a folder holding '{name}'."
    )


def _fetch_url(url: str, timeout: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (fixed https URLs)
        return r.read()


def _download(spec: FileSpec, target: Path) -> None:
    if spec.name == "fedcia-ml100k-split/ml100k_100clients.tsv":
        atomic_write_bytes(target, _build_fedcia_tsv(spec.url))
        return
    if spec.member:
        archive = default_cache() / "_archives" / spec.url.rsplit("/", 1)[-1]
        if not archive.is_file():
            atomic_write_bytes(archive, _fetch_url(spec.url))
        with zipfile.ZipFile(archive) as z:
            atomic_write_bytes(target, z.read(spec.member))
    else:
        atomic_write_bytes(target, _fetch_url(spec.url))


def _build_fedcia_tsv(base_url: str) -> bytes:
    """Rebuild FedCIA's split TSV from the authors' dense .npy files (client, row, item, split)."""
    import numpy as np

    out = io.StringIO()
    out.write("client\tuser_row\titem_col\tsplit\n")
    offset = 0
    for k in range(100):
        n_rows = 0
        for split in ("train", "valid", "test"):
            mat = np.load(io.BytesIO(_fetch_url(f"{base_url}/{k}/{split}_dataset.npy")), allow_pickle=False)
            n_rows = mat.shape[0]
            rows, cols = np.nonzero(mat)
            for r, c in zip(rows.tolist(), cols.tolist()):
                out.write(f"{k}\t{offset + r}\t{c}\t{split}\n")
        offset += n_rows
    return out.getvalue().encode()
