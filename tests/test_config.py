import pytest

from corolla.config import ConfigError, list_presets, parse_overrides, resolve


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        resolve("fedavg-mf-ml100k", {"num-round": 3})
    assert "num-round" in str(e.value) and "num-rounds" in str(e.value) and "Valid keys" in str(e.value)


def test_types_and_choices():
    with pytest.raises(ConfigError, match="'num-rounds': expected int"):
        resolve(None, {"num-rounds": "many"})
    with pytest.raises(ConfigError, match="'method': expected one of"):
        resolve(None, {"method": "fedsgd"})
    with pytest.raises(ConfigError, match="select-metric"):
        resolve(None, {"select-metric": "auc@10"})


def test_precedence_and_overrides():
    cfg = resolve("fedavg-mf-ml100k", parse_overrides(["num-rounds=3", "lr=0.5", "method=local"]))
    assert cfg["num-rounds"] == 3 and cfg["lr"] == 0.5 and cfg["method"] == "local"
    assert cfg["split"] == "fedcia"  # from the preset
    assert parse_overrides('topk="5,10" compat-fedcia-metrics=true') == {"topk": "5,10", "compat-fedcia-metrics": True}


def test_presets_resolve_and_have_paper_numbers():
    ps = list_presets()
    assert ps
    for p in ps:
        resolve(p.name)
        assert p.paper.get("source")


def test_one_user_optimizer_is_the_methods_choice():
    # FedAvg on the one-user harness may train with the SGD of UFGraphFR's code base (lr-eta), the
    # other one-user baselines only with Adam: the error names the key, the method and what it takes
    cfg = resolve("fedmf-ufgraphfr-ml100k", {"optimizer": "sgd", "lr": 0.1, "lr-eta": 40.0})
    assert cfg["optimizer"] == "sgd" and cfg["lr-eta"] == 40.0
    assert resolve("fedmf-ufgraphfr-ml100k")["optimizer"] == "adam"
    with pytest.raises(ConfigError, match=r"'optimizer': harness='one-user' trains method 'fcf' with optimizer='adam'"):
        resolve("fedmf-ufgraphfr-ml100k", {"method": "fcf", "optimizer": "sgd"})
    with pytest.raises(ConfigError, match=r"method 'pfedrec' with optimizer='sgd'.*got 'adam'"):
        resolve("pfedrec-ufgraphfr-ml100k", {"optimizer": "adam"})
