"""The method table (``corolla.methods``): every (method, harness, model) resolves to exactly one
declaration, every declared class exists on its side, every preset resolves, and the keys live
with their owners."""

import pytest

from client_app.base import LogicalClient
from corolla import methods
from corolla.catalog import keys_text, presets_of
from corolla.config import CORE, SCHEMA, list_presets, resolve
from corolla.keys import ConfigError
from corolla.util import import_class
from strategies.base import CorollaStrategy


def test_each_method_harness_model_resolves_to_one_declaration():
    seen = {}
    for m in methods.table():
        for model in m.models:
            key = (m.name, m.harness, model)
            assert key not in seen, f"{key} is declared twice"
            seen[key] = m
            assert methods.find(*key) is m
    # the names users ask for
    assert methods.find("fedavg", "one-user", "mf").client.endswith(":OneUserClient")
    assert methods.find("fedavg", "expanded", "lightgcn").strategy_options == {"rule": "fedavg"}
    assert methods.find("fedmedian", "expanded", "lightgcn").strategy_options == {"rule": "fedmedian"}
    assert methods.find("gpfedrec", "one-user", "gpfedrec").strategy_options == {"global_table_too": True}
    assert methods.find("pfedrec", "one-user", "pfedrec").strategy == "strategies.pfedrec:PFedRec"


def test_declared_classes_exist_on_their_side():
    for m in methods.table():
        s = import_class(m.strategy, tuple(sorted(m.strategy_options.items())), m.name)
        c = import_class(m.client, tuple(sorted(m.client_options.items())), m.name)
        assert issubclass(s, CorollaStrategy) and issubclass(c, LogicalClient), m.label
        for k in m.strategy_options:
            assert hasattr(s.__mro__[1], k), f"{m.label}: {m.strategy} has no attribute {k!r} to set"
        for k in m.client_options:
            assert hasattr(c.__mro__[1], k), f"{m.label}: {m.client} has no attribute {k!r} to set"


def test_every_preset_resolves_and_names_its_declaration():
    used = set()
    for p in list_presets():
        m = methods.lookup(resolve(p.name))
        used.add(m.label)
        assert p.name in presets_of(m)
    assert methods.find("fedprox", "silo", "mf").label in used


@pytest.mark.parametrize("cfg,match", [
    ({"method": "nope"}, "'method': expected one of"),
    ({"method": "fedca"}, "runs on harness one-user, not 'silo'"),
    ({"method": "fedcia", "model": "pfedrec"}, "trains gfcf, lightgcn, mf, ncf, not 'pfedrec'"),
])
def test_unknown_combinations_name_what_runs_instead(cfg, match):
    with pytest.raises(ConfigError, match=match):
        resolve(None, cfg)


def test_every_method_says_what_crosses_the_network():
    for name in methods.names():
        assert len(methods.protocol(name)) > 100, f"{name}: no PROTOCOL paragraph in corolla/methods/{name}.py"


def test_method_keys_live_beside_their_method():
    owners = methods.method_keys()
    assert owners["fedca-rho"][0] == "fedca" and owners["lpsfed-tau1"][0] == "lpsfed"
    assert owners["lr-mlp"][0] == "harness one-user" and owners["fedprox-mu"][0] == "fedprox"
    assert not set(owners) & set(CORE)
    assert set(SCHEMA) == set(CORE) | set(owners)
    text = keys_text("fedca")
    assert "fedca-rho (float, default 0.9)" in text and "lr-mlp" in text and "lpsfed-tau1" not in text
    assert "topk (str, default '10')" in text


def test_a_run_holds_only_its_methods_keys_and_refuses_another_methods():
    """A run's schema is the core keys plus the keys its method owns; a key of another method in a
    config file or an override is an error naming its owner, and a preset sets only its own
    method's keys (a preset's keys for another method are dropped when --set method= changes it)."""
    from corolla import methods
    from corolla.config import CORE, list_presets, resolve
    from corolla.keys import ConfigError

    for p in list_presets():
        cfg = resolve(p.name)
        m = methods.lookup(cfg)
        own = set(CORE) | set(methods.owner_keys(m))
        assert set(cfg) == own, (p.name, sorted(set(cfg) ^ own))
        assert set(p.config) <= own, (p.name, sorted(set(p.config) - own))    # presets set only their keys
        methods.run_params(cfg)                                                # the typed parameters build
    with pytest.raises(ConfigError, match="'fedca-rho' .* belongs to fedca, not to this run's method fedavg"):
        resolve("fedavg-mf-ml100k", {"fedca-rho": 0.5})
    cfg = resolve("fedca-pmf-ml100k", {"method": "fedavg"})   # the preset's FedCA keys are dropped
    assert "fedca-rho" not in cfg and not hasattr(methods.run_params(cfg), "fedca_rho")


def test_the_parameter_type_is_frozen_typed_and_checked():
    import dataclasses

    from corolla import methods
    from corolla.config import resolve
    from corolla.keys import ConfigError

    cfg = resolve("fedca-pmf-ml100k")
    p = methods.run_params(cfg)
    assert p.fedca_rho == cfg["fedca-rho"] and type(p).__name__ == "FedcaOneUserParams"
    assert "``fedca_rho`` (``fedca-rho``, float" in type(p).__doc__
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.fedca_rho = 0.1
    with pytest.raises(ConfigError, match="'fedca-qp' of fedca one-user: expected one of"):
        type(p).from_config({**cfg, "fedca-qp": "magic"})
