"""The method table: one declaration per method and harness.

A *method* is what a user asks for by name (``fedca``, ``fedavg``, ``fedmedian``); it runs on a
*harness* (how logical clients train: ``silo``, ``one-user``, ``expanded``) with one of the
*models* its declaration accepts. ``(method, harness, model)`` resolves to exactly one
:class:`Method` (a test checks it): the strategy class the server runs, the client class the
nodes run, the method's own config keys and cross-key checks. The shared keys (data, split,
rounds, evaluation, deployment, local training) are the core schema in ``corolla.config``; a
harness's keys live with the harness (``corolla.methods.harness``), a method's in its own module
here (``corolla/methods/<method>.py``).

Strategy and client classes are named, not imported (``"strategies.fedavg:FedAvg"``): this
package is the layer both sides share and imports neither. ``strategies.registry`` and
``client_app.registry`` import the class a declaration names.

Adding a method: ``docs/adding-a-method.md``.
"""

from __future__ import annotations

import functools
from typing import Any

from corolla.keys import ConfigError, Key
from corolla.methods.declaration import Harness, Method

__all__ = ["Harness", "Method", "check", "find", "harnesses", "lookup", "method_keys", "names", "owner_keys", "params_type",
           "run_params", "protocol", "table"]


NOT_METHODS = {"declaration", "harness", "params"}


@functools.lru_cache(maxsize=1)
def _modules():
    """Every module of this package that declares methods (``METHODS``), in name order: adding a
    method is adding its module, nothing here changes."""
    import importlib
    import pkgutil

    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in NOT_METHODS)
    return tuple(importlib.import_module(f"{__name__}.{n}") for n in names)


@functools.lru_cache(maxsize=1)
def _table() -> tuple[Method, ...]:
    return tuple(m for mod in _modules() for m in mod.METHODS)


def table() -> list[Method]:
    """Every declaration, in a stable order (read once per process: lookups are on hot paths)."""
    return list(_table())


def secure_sum_methods() -> list[str]:
    """The methods whose aggregate may be a secure sum (``secagg``), as labels."""
    return [m.label for m in _table() if m.secure_sum]


def harnesses() -> dict[str, Harness]:
    from corolla.methods.harness import HARNESSES

    return HARNESSES


def method_keys() -> dict[str, tuple[str, Key]]:
    """Every key a method or harness module declares: ``{key: (owner, Key)}``. A key is declared
    once (its owner); other methods that read it name the owner in ``key_owners``."""
    out: dict[str, tuple[str, Key]] = {}
    declared = [(f"harness {h.name}", h.keys) for h in harnesses().values()]
    declared += [(mod.__name__.rsplit(".", 1)[1], m.keys) for mod in _modules() for m in mod.METHODS]
    for owner, keys in declared:
        for k, spec in keys.items():
            if k in out and out[k] != (owner, spec):
                raise RuntimeError(f"config key '{k}' is declared by {out[k][0]} and {owner}")
            out[k] = (owner, spec)
    return out


def protocol(name: str) -> str:
    """The method's protocol in one paragraph: what travels per round and what the server sees."""
    for mod in _modules():
        if any(m.name == name for m in mod.METHODS) and getattr(mod, "PROTOCOL", ""):
            if mod.__name__.rsplit(".", 1)[1] == name:
                return mod.PROTOCOL
    return ""


def names() -> list[str]:
    return sorted({m.name for m in table()})


@functools.lru_cache(maxsize=None)
def find(method: str, harness: str, model: str) -> Method:
    """The one declaration of ``method`` on ``harness`` with ``model``; a :class:`ConfigError`
    naming what runs instead otherwise."""
    same = [m for m in table() if m.name == method]
    if not same:
        raise ConfigError(f"config key 'method': unknown method {method!r}; known: {', '.join(names())}")
    on = [m for m in same if m.harness == harness]
    if not on:
        where = ", ".join(sorted({m.harness for m in same}))
        raise ConfigError(f"config key 'harness': method {method!r} runs on harness {where}, not {harness!r}")
    hit = [m for m in on if model in m.models]
    if not hit:
        ok = ", ".join(sorted({x for m in on for x in m.models}))
        raise ConfigError(f"config key 'model': method {method!r} on harness {harness!r} trains {ok}, not {model!r}")
    assert len(hit) == 1, f"the method table has {len(hit)} entries for {(method, harness, model)}"
    return hit[0]


def lookup(cfg: dict[str, Any]) -> Method:
    return find(cfg["method"], cfg["harness"], cfg["model"])


def check(cfg: dict[str, Any]) -> Method:
    """The run's declaration, after its harness's and its own cross-key checks."""
    m = lookup(cfg)
    h = harnesses()[m.harness]
    if h.check is not None:
        h.check(cfg, m)
    if m.check is not None:
        m.check(cfg)
    return m


def params_type(m: Method) -> type:
    """The frozen, typed parameter class of ``m`` (``corolla.methods.params``)."""
    from corolla.methods.params import params_type_of
    return params_type_of(f"{m.name} {m.harness}", tuple(sorted(owner_keys(m).items())))


def run_params(cfg: dict[str, Any]):
    """The run's method parameters: an instance of its declaration's :func:`params_type`."""
    return params_type(lookup(cfg)).from_config(cfg)


def owner_keys(m: Method) -> dict[str, Key]:
    """The keys of method ``m``: its harness's, its own, and those of the modules it names."""
    allk = method_keys()
    owners = {f"harness {m.harness}", _module_of(m), *m.key_owners}
    return {k: spec for k, (owner, spec) in allk.items() if owner in owners}


def _module_of(m: Method) -> str:
    for mod in _modules():
        if m in mod.METHODS:
            return mod.__name__.rsplit(".", 1)[1]
    return m.name
