"""``benchmarks/metamf_authors_loo.py`` (the authors' MetaMF on UFGraphFR's leave-one-out protocol),
the parts that need no authors' checkout: a Corolla preset's split in the script's form, UFGraphFR's
metrics by hand, and the command line's choice of split."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import metamf_authors_loo as ma

from corolla.config import resolve
from corolla.data import build_federation


def test_preset_split_is_the_presets_federation(data_dir):
    over = {"max-users": 40}
    d = ma.preset_split("metamf-ufgraphfr-ml100k", data_dir, over)
    fed = build_federation(resolve("metamf-ufgraphfr-ml100k", over), data_dir)
    assert d["n_users"] == fed.n_users == 40 and d["n_items"] == fed.n_items
    assert d["val_neg"].shape == d["test_neg"].shape == (40, 99)
    for u in range(40):
        assert sorted(d["train_i"][d["train_u"] == u]) == sorted(fed.rows("train", u))
        assert [d["val_i"][u]] == list(fed.rows("valid", u)) and [d["test_i"][u]] == list(fed.rows("test", u))
        assert list(d["val_neg"][u]) == list(fed.neg_valid[u]) and list(d["test_neg"][u]) == list(fed.neg_test[u])
        seen = set(fed.rows("train", u)) | {d["val_i"][u], d["test_i"][u]}
        assert not seen & (set(d["val_neg"][u]) | set(d["test_neg"][u]))   # negatives never interacted


def test_uf_metrics_by_hand():
    # user 0: negatives 0.5 (a tie ranks above the positive) and 0.6 above 0.5 -> rank 3;
    # user 1: nothing above 0.9 -> rank 1; user 2: all three above -> rank 4
    pos = [0.5, 0.9, 0.0]
    neg = [[0.4, 0.5, 0.6], [0.2, 0.3, 0.0], [0.1, 0.2, 0.3]]
    hr, ndcg = ma.uf_metrics(pos, neg, k=3)
    assert hr == pytest.approx(2 / 3)
    assert ndcg == pytest.approx((np.log(2) / np.log(4) + 1.0 + 0.0) / 3)


@pytest.mark.parametrize("extra", [[], ["--ufgraphfr-dir", "x", "--preset", "metamf-ufgraphfr-ml100k"]])
def test_exactly_one_split_source(tmp_path, capsys, extra):
    with pytest.raises(SystemExit) as e:
        ma.main(["--metamf-dir", str(tmp_path), "--json", str(tmp_path / "o.json"), *extra])
    assert e.value.code == 2 and "give one of --ufgraphfr-dir" in capsys.readouterr().err


def test_a_missing_authors_checkout_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ma.main(["--metamf-dir", str(tmp_path), "--preset", "metamf-ufgraphfr-ml100k",
                 "--json", str(tmp_path / "o.json")])
    assert f"--metamf-dir {tmp_path}: no MetaMF.py there" in capsys.readouterr().err
