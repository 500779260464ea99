"""What ``corolla keys``, ``corolla methods`` and ``corolla presets --long`` print: the config keys
(core and per method) with type, default and help, the method table, and the presets with the
method each resolves to. Plain text, no Flower."""

from __future__ import annotations

import textwrap

from corolla import methods
from corolla.config import CORE, list_presets, resolve
from corolla.keys import ConfigError, Key


def _key_lines(keys: dict[str, Key]) -> list[str]:
    out = []
    for k in sorted(keys):
        spec = keys[k]
        choices = f" one of {', '.join(map(str, spec.choices))};" if spec.choices else ""
        head = f"  {k} ({spec.type_name}, default {spec.default!r}){choices}"
        out.append(head)
        out += textwrap.wrap(spec.help, 96, initial_indent="      ", subsequent_indent="      ")
    return out


def presets_of(m: methods.Method) -> list[str]:
    """The presets whose configuration resolves to declaration ``m``."""
    out = []
    for p in list_presets():
        try:
            cfg = resolve(p.name)
        except ConfigError:
            continue
        if methods.lookup(cfg) == m:
            out.append(p.name)
    return out


def keys_text(method: str | None = None) -> str:
    """Every key (``method=None``), or the core keys and those of every declaration named
    ``method`` (its harnesses' and its own)."""
    if method is None:
        owners: dict[str, dict[str, Key]] = {"core": dict(CORE)}
        for k, (owner, spec) in methods.method_keys().items():
            owners.setdefault(owner, {})[k] = spec
        lines = []
        for owner in sorted(owners, key=lambda o: (o != "core", o)):
            lines += [f"[{owner}]", *_key_lines(owners[owner]), ""]
        return "\n".join(lines)
    decl = [m for m in methods.table() if m.name == method]
    if not decl:
        raise ConfigError(f"--method: unknown method {method!r}; known: {', '.join(methods.names())}")
    lines = ["[core] (every method)", *_key_lines(CORE), ""]
    seen: set[str] = set()
    for m in decl:
        own = {k: v for k, v in methods.owner_keys(m).items() if k not in seen}
        seen |= set(own)
        lines.append(f"[{m.label}] strategy {m.strategy}, client {m.client}")
        lines += _key_lines(own) if own else ["  (no keys of its own)"]
        lines.append("")
    return "\n".join(lines)


def methods_text() -> str:
    rows = []
    for m in methods.table():
        rows.append(f"{m.name:<11} {m.harness:<9} {'/'.join(m.models):<18} {m.strategy:<38} {m.client}")
        rows.append(f"{'':<11} {m.summary}" + (f" ({m.paper})" if m.paper else ""))
    return "\n".join([f"{'method':<11} {'harness':<9} {'models':<18} {'strategy':<38} client", *rows])


def presets_text(long: bool = False) -> str:
    lines = []
    for p in list_presets():
        nums = {k: v for k, v in p.paper.items() if isinstance(v, (int, float))}
        paper = " ".join(f"{k}={v}" for k, v in nums.items())
        lines.append(f"{p.name}  {paper}  -- {p.paper.get('source', '')}")
        if long:
            try:
                m = methods.lookup(resolve(p.name))
                lines.append(f"    method {m.label}")
            except ConfigError as e:
                lines.append(f"    (does not resolve: {e})")
            lines += textwrap.wrap(p.description, 96, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)
