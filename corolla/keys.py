"""A config key's declaration and the error every bad configuration raises (shared by the core
schema in ``corolla.config`` and the method table in ``corolla.methods``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None

    @property
    def type_name(self) -> str:
        return type(self.default).__name__


class ConfigError(ValueError):
    """A run configuration that cannot be used (unknown key, wrong type, bad value)."""
