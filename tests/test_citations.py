"""The repository's code and docs cite only what the repository holds or what anyone can read: the
papers (section, equation, table), the authors' public code (repository, commit, ``file:line``) and
files of this repository. Never the planning notes that lived beside the checkout on the machines
that built it (``../shared/specs/*.md`` and their ``spec B4.1``-style sections,
``../shared/ARCHITECTURE.md``, ``../shared/notes/``, ``../shared/papers/``, ``/work/shared``), which
a clone does not have.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".toml", ".sh", ".yaml", ".yml", ".cfg", ".txt")

CITATION = re.compile(
    r"\.\./shared\b|/work/shared\b|\bshared/(?:specs|papers|notes)\b|ARCHITECTURE\.md"
    r"|\bspecs?(?:'s)?\s+(?:§|:\d|[A-Z]\d|FEDCIA|LPSFED|UFGRAPHFR|part\b|register\b)"
    r"|FEDCIA_FEDCA|LPSFED_DISTFEDAVG|UFGRAPHFR\.md|\b[Tt]he spec(?:'s)?\b|\bspec's\b")

ALLOWED_PY_UNDER: tuple[str, ...] = ()   # no exception: every module cites the papers or the repository
SELF = "tests/test_citations.py"   # names the forms it looks for


def _files() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip("not a git checkout: the citation check lists the repository's files with git")
    return [f for f in out.stdout.splitlines() if f.endswith(SUFFIXES) and (ROOT / f).is_file()]


def citations(allow: tuple[str, ...] = ALLOWED_PY_UNDER) -> list[str]:
    hits = []
    for f in _files():
        if f == SELF or (f.endswith(".py") and f.startswith(allow)):
            continue
        for i, line in enumerate((ROOT / f).read_text(errors="replace").splitlines(), 1):
            if CITATION.search(line):
                hits.append(f"{f}:{i}: {line.strip()[:160]}")
    return hits


def test_nothing_cites_a_file_outside_the_repository():
    hits = citations()
    assert not hits, ("citations of files outside the repository (cite the paper, the authors' code at its "
                      "commit, or docs/methods/*.md instead):\n" + "\n".join(hits))


@pytest.mark.parametrize("text", [
    "see ../shared/specs/FEDCIA_FEDCA.md", "(spec B4.1)", "spec A10", "spec UFGRAPHFR §8", "spec §13",
    "spec LPSFED_DISTFEDAVG part B", "noise is i.i.d. (spec :83)", "the spec's register (B8)",
    "Read `../shared/ARCHITECTURE.md` first", "the notes in /work/shared/notes/flower.md",
    "as the spec measured", "FEDCIA_FEDCA A5"])
def test_the_pattern_finds_each_form_of_citation(text):
    assert CITATION.search(text), text


@pytest.mark.parametrize("text", [
    "FedCA paper §5, Eq. 4", "the authors' `engine.py:92-112`", "docs/methods/fedca.md",
    "any other torch spec would pull a CUDA build", "spectral partition", "importlib.util.spec_from_file_location",
    "one shared item table", "Bell et al., CCS 2020, §3.1"])
def test_the_pattern_leaves_ordinary_text_alone(text):
    assert not CITATION.search(text), text
