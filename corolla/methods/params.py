"""A method's parameters as a type: a frozen, typed, documented dataclass built from the keys its
declaration owns (its harness's, its own, and those of the modules it names in ``key_owners``).

``Method.params(cfg)`` gives the run's instance; a strategy and a client read their method's
settings as attributes of it (``self.p.fedca_rho``), so a key of another method is not even a
name they can write. Each field carries its key (``fedca-rho``), help text and choices in its
metadata; the class's docstring lists them (``corolla keys --method NAME`` prints the same).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

from corolla.keys import ConfigError, Key


def field_name(key: str) -> str:
    """``fedca-rho`` -> ``fedca_rho``."""
    return key.replace("-", "_")


def make_params_type(name: str, keys: dict[str, Key]) -> type:
    """A frozen dataclass ``<Name>Params`` with one typed field per key, defaulting to the key's
    default; ``from_config(cfg)`` builds it from a resolved run config (checking types and choices)."""
    fields = []
    for k, spec in sorted(keys.items()):
        fields.append((field_name(k), type(spec.default),
                       dataclasses.field(default=spec.default, metadata={"key": k, "help": spec.help,
                                                                         "choices": spec.choices})))
    cls_name = "".join(part.capitalize() for part in name.replace("-", " ").replace("/", " ").split()) + "Params"
    cls = dataclasses.make_dataclass(cls_name, fields, frozen=True)
    lines = [f"The parameters of {name} (frozen; built from the resolved run config):", ""]
    lines += [f"* ``{field_name(k)}`` (``{k}``, {type(spec.default).__name__}, default {spec.default!r}"
              + (f", one of {list(spec.choices)}" if spec.choices else "") + f"): {spec.help}"
              for k, spec in sorted(keys.items())]
    cls.__doc__ = "\n".join(lines)

    def from_config(klass, cfg: dict[str, Any]):
        values = {}
        for f in dataclasses.fields(klass):
            key, choices = f.metadata["key"], f.metadata["choices"]
            if key not in cfg:
                raise ConfigError(f"config key '{key}' of {name}: missing from the run config")
            v = cfg[key]
            want = f.type if isinstance(f.type, type) else type(f.default)
            if want is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, want) or (want is int and isinstance(v, bool)):
                raise ConfigError(f"config key '{key}' of {name}: expected {want.__name__}, got {v!r}")
            if choices and v not in choices:
                raise ConfigError(f"config key '{key}' of {name}: expected one of {list(choices)}, got {v!r}")
            values[f.name] = v
        return klass(**values)

    cls.from_config = classmethod(from_config)
    return cls


@functools.lru_cache(maxsize=None)
def params_type_of(label: str, keys: tuple[tuple[str, Key], ...]) -> type:
    return make_params_type(label, dict(keys))
