"""How a key of the run spec is declared: ``key(...)`` and ``section(...)`` attach what a field means
(its value type, default, doc and rule) to a dataclass field, and the readers below get it back.

The declarations themselves (every key and its default) are ``launch.spec.config``'s; this module
is the vocabulary that the model, the resolver and the reference all read, so none of them needs
another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from launch.spec import _keys as keys

__all__ = [
    "EMPTY",
    "KeyInfo",
    "REQUIRED",
    "SectionInfo",
    "default_of",
    "frozen",
    "key",
    "key_info",
    "section",
    "section_info",
    "spelled",
]

REQUIRED: Any = dataclasses.MISSING

EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class KeyInfo:
    """What a field means to people and to the resolver."""

    type: keys.KeyType
    doc: str
    rule: str = ""  # where the rule comes from, for docs/spec.md
    modes: tuple[str, ...] = ()  # judges only: the modes that accept the key (empty: all)
    derived: str = ""  # a default computed from other keys, described for people
    spelled: str = ""  # the TOML key when it differs from the field name


def key(
    kind: keys.KeyType,
    default: Any = REQUIRED,
    *,
    doc: str,
    rule: str = "",
    modes: tuple[str, ...] = (),
    derived: str = "",
    spelled: str = "",
) -> Any:
    info = KeyInfo(kind, doc, rule, modes, derived, spelled)
    if default is REQUIRED:
        return field(metadata={"key": info})
    if isinstance(default, dict | list):
        read_only = frozen(default)
        return field(default_factory=lambda: read_only, metadata={"key": info})
    return field(default=default, metadata={"key": info})


@dataclass(frozen=True)
class SectionInfo:
    doc: str
    named: bool = False  # a [section.NAME] table of entries
    spelled: str = ""
    limit: int = 0  # named tables only: at most this many entries


def section(cls: type, *, doc: str, named: bool = False, spelled: str = "", limit: int = 0) -> Any:
    """A sub-table (``[launch.coordination]``) or a table of named entries (``[judges.NAME]``)."""
    factory = (lambda: EMPTY) if named else cls
    info = SectionInfo(doc, named, spelled, limit)
    return field(default_factory=factory, metadata={"section": info, "cls": cls})


def frozen(value: Any) -> Any:
    """Deep read-only copy: tables become MappingProxyType, arrays tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


def key_info(f: dataclasses.Field[Any]) -> KeyInfo | None:
    return f.metadata.get("key")


def section_info(f: dataclasses.Field[Any]) -> SectionInfo | None:
    return f.metadata.get("section")


def spelled(f: dataclasses.Field[Any]) -> str:
    info = key_info(f) or section_info(f)
    return (info.spelled if info else "") or f.name


def default_of(f: dataclasses.Field[Any]) -> Any:
    """The declared default of a field (REQUIRED when it has none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED
