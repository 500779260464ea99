"""Optional dependencies: which configuration needs which extra, and the one line a missing one
gives (``corolla/extras.py``)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from corolla import extras
from corolla.config import resolve

ROOT = Path(__file__).resolve().parents[1]


def test_needed_extras():
    assert extras.needed(resolve("fedavg-mf-ml100k")) == []
    assert extras.needed(resolve("ufgraphfr-ml100k")) == ["text"]
    assert extras.needed(resolve("gpfedrec-ml100k")) == []
    assert extras.needed(resolve("fedca-pmf-ml100k", {"fedca-qp": "cvxpy"})) == ["qp"]
    assert extras.needed(resolve("fedca-pmf-ml100k")) == []


def test_missing_extra_is_one_line_naming_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cvxpy" else real(name, *a))
    with pytest.raises(extras.MissingExtra) as e:
        extras.check(resolve("fedca-pmf-ml100k", {"fedca-qp": "cvxpy"}))
    assert "pip install 'corolla[qp]'" in str(e.value) and "\n" not in str(e.value)


def test_cli_stops_before_starting_anything_when_an_extra_is_missing(tmp_path):
    # a site directory whose 'sentence_transformers' cannot be imported hides the installed one
    shadow = tmp_path / "shadow"
    (shadow / "sentence_transformers").mkdir(parents=True)
    code = ("import sys, importlib.util; sys.path.insert(0, %r); import importlib.machinery as m; "
            "real = importlib.util.find_spec; "
            "importlib.util.find_spec = lambda n, *a: None if n == 'sentence_transformers' else real(n, *a); "
            "from launcher.cli import main; sys.exit(main(['run', '--preset', 'ufgraphfr-ml100k', '--mode', "
            "'inproc', '--out', %r]))") % (str(shadow), str(tmp_path / "out"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: UFGraphFR encodes each user's text profile")
    assert "pip install 'corolla[text]'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_flwr_config_file_is_a_run_config_flower_accepts(tmp_path):
    """``corolla flwr-config`` writes what ``flwr run . FED --run-config FILE`` takes: Flower merges
    it with the app's defaults without unknown keys (a preset file itself would be refused)."""
    import tomllib

    from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

    from launcher.cli import main

    f = tmp_path / "rc.toml"
    assert main(["flwr-config", "fedca-pmf-ml100k", "--set", "num-rounds=5", "--out-dir", str(tmp_path / "o"),
                 "-o", str(f)]) == 0
    default = flatten_dict(tomllib.load(open(ROOT / "pyproject.toml", "rb"))["tool"]["flwr"]["app"]["config"])
    fused = fuse_dicts(default, parse_config_args([str(f)]))
    assert fused["preset"] == "fedca-pmf-ml100k" and fused["set"] == "num-rounds=5"
    assert fused["out-dir"] == str(tmp_path / "o")
    with pytest.raises(ValueError):   # what the issue asked first: the preset file as it is
        fuse_dicts(default, parse_config_args([str(ROOT / "corolla" / "presets" / "fedca-pmf-ml100k.toml")]))
    assert main(["flwr-config", "fedca-pmf-ml100k", "--set", "fedca-rho=2"]) == 2   # checked like corolla run
