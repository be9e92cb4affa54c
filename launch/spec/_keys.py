"""Value types of run-spec keys: one object per type checks a value, describes it for people and
emits its JSON Schema, so validation, ``gym-launch schema`` and docs/spec.md cannot disagree.

``check(value)`` returns None when the value is fine, else what to change (the caller adds the
key path). Every count and size has an upper bound: a spec is user input, and planning a
10**12-GPU request must be refused in microseconds, not attempted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "AbsolutePath",
    "Bool",
    "Choice",
    "DirMode",
    "Int",
    "KeyType",
    "MAX_TEXT",
    "Mounts",
    "Number",
    "Opaque",
    "Regex",
    "RunPath",
    "SIZE_RE",
    "SIZE_UNITS",
    "Scale",
    "Seconds",
    "SecondsOrOff",
    "Size",
    "Table",
    "Text",
    "TextList",
    "TextOrList",
    "UNLIMITED",
    "Url",
    "describe",
    "is_int",
    "is_number",
    "parse_size",
]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


def describe(v: Any) -> str:
    if isinstance(v, bool):
        return f"the boolean {str(v).lower()}"
    if isinstance(v, str):
        shown = v if len(v) <= 60 else v[:57] + "..."
        return f"the string {shown!r}"
    # Resolved values are read-only copies (launch.spec._fields.frozen): describe them as spelled.
    if isinstance(v, Mapping):
        return "a table"
    if isinstance(v, list | tuple):
        return "an array"
    return f"{type(v).__name__} {v!r}"


class KeyType:
    """Base: subclasses set ``doc`` (a short type name for people) and implement the three methods."""

    doc = "value"

    def check(self, v: Any) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def constraint(self) -> str:
        return ""


@dataclass(frozen=True)
class Int(KeyType):
    minimum: int
    maximum: int
    doc = "integer"

    def check(self, v: Any) -> str | None:
        if not is_int(v):
            return f"must be {self._words()}, not {describe(v)}"
        if not self.minimum <= v <= self.maximum:
            return f"must be {self._words()} from {self.minimum} to {self.maximum}, not {v}"
        return None

    def _words(self) -> str:
        return {0: "a non-negative integer", 1: "a positive integer"}.get(self.minimum, "an integer")

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}

    def constraint(self) -> str:
        return f"{self.minimum}..{self.maximum}"


@dataclass(frozen=True)
class Seconds(KeyType):
    """A duration in seconds, integer or float, within [minimum, maximum]."""

    minimum: float
    maximum: float
    doc = "seconds"

    def check(self, v: Any) -> str | None:
        if not is_number(v) or v <= 0:
            return f"must be a positive number of seconds, not {describe(v)}"
        if v < self.minimum:
            return f"must be at least {self.minimum:g} seconds, not {v:g}"
        if v > self.maximum:
            return f"must be at most {self.maximum:g} seconds, not {v:g}"
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": self.minimum, "maximum": self.maximum}

    def constraint(self) -> str:
        return f"{self.minimum:g}..{self.maximum:g} s"


@dataclass(frozen=True)
class SecondsOrOff(Seconds):
    """A duration in seconds within [minimum, maximum], or 0 to turn the watch it bounds off."""

    doc = "seconds (0 = off)"

    def check(self, v: Any) -> str | None:
        if is_number(v) and v == 0:
            return None
        if not is_number(v) or v < 0:
            return f"must be 0 (off) or a positive number of seconds, not {describe(v)}"
        return super().check(v)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"const": 0}, super().schema()]}

    def constraint(self) -> str:
        return f"0 (off), or {super().constraint()}"


@dataclass(frozen=True)
class Number(KeyType):
    minimum: float
    maximum: float
    doc = "number"

    def check(self, v: Any) -> str | None:
        if not is_number(v) or not self.minimum <= v <= self.maximum:
            return f"must be a number from {self.minimum:g} to {self.maximum:g}, not {describe(v)}"
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": self.minimum, "maximum": self.maximum}

    def constraint(self) -> str:
        return f"{self.minimum:g}..{self.maximum:g}"


@dataclass(frozen=True)
class Scale(KeyType):
    """[MIN, MAX]: two integers with 0 <= MIN < MAX <= maximum (a judge's score scale)."""

    maximum: int
    doc = "[MIN, MAX]"

    def check(self, v: Any) -> str | None:
        if not (isinstance(v, list | tuple) and len(v) == 2 and all(is_int(x) for x in v)):
            return f"must be [MIN, MAX], two integers, not {describe(v)}"
        low, high = v
        if not 0 <= low < high <= self.maximum:
            return f"must have 0 <= MIN < MAX <= {self.maximum}, not [{low}, {high}]"
        return None

    def schema(self) -> dict[str, Any]:
        ends = {"type": "integer", "minimum": 0, "maximum": self.maximum}
        return {"type": "array", "prefixItems": [ends, ends], "minItems": 2, "maxItems": 2}

    def constraint(self) -> str:
        return f"0 <= MIN < MAX <= {self.maximum}"


@dataclass(frozen=True)
class Bool(KeyType):
    doc = "boolean"

    def check(self, v: Any) -> str | None:
        return None if isinstance(v, bool) else f"must be true or false, not {describe(v)}"

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


MAX_TEXT = 4096  # paths, URLs, model names: longer is a mistake, not a value


@dataclass(frozen=True)
class Text(KeyType):
    """A non-empty string, optionally matching ``pattern`` (described by ``rule``)."""

    max_length: int = MAX_TEXT
    pattern: str | None = None
    rule: str = ""
    doc = "string"

    def check(self, v: Any) -> str | None:
        if not isinstance(v, str) or not v.strip():
            return f"must be a non-empty string, not {describe(v)}"
        if len(v) > self.max_length:
            return f"must be at most {self.max_length} characters, not {len(v)}"
        if self.pattern and not re.fullmatch(self.pattern, v):
            return f"must be {self.rule}, not {describe(v)}"
        return None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": self.max_length}
        if self.pattern:
            out["pattern"] = f"^(?:{self.pattern})$"
        return out

    def constraint(self) -> str:
        return self.rule or (f"at most {self.max_length} characters" if self.max_length < MAX_TEXT else "")


@dataclass(frozen=True)
class AbsolutePath(Text):
    def check(self, v: Any) -> str | None:
        msg = super().check(v)
        if msg:
            return msg
        if not PurePosixPath(v).is_absolute():
            return f"must be an absolute path (weights are prepared before GPU allocation), not {describe(v)}"
        return None

    def schema(self) -> dict[str, Any]:
        return {**super().schema(), "pattern": "^/"}

    def constraint(self) -> str:
        return "absolute path"


@dataclass(frozen=True)
class Choice(KeyType):
    choices: tuple[str, ...]
    doc = "string"

    def check(self, v: Any) -> str | None:
        if isinstance(v, str) and v in self.choices:
            return None
        options = " or ".join(f'"{c}"' for c in self.choices)
        return f"must be {options}, not {describe(v)}"

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.choices)}

    def constraint(self) -> str:
        return " | ".join(f'"{c}"' for c in self.choices)


@dataclass(frozen=True)
class TextList(KeyType):
    max_items: int
    item: Text = Text()
    doc = "array of strings"

    def check(self, v: Any) -> str | None:
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            return f"must be an array of non-empty strings, not {describe(v)}"
        if len(v) > self.max_items:
            return f"must have at most {self.max_items} entries, not {len(v)}"
        for x in v:
            msg = self.item.check(x)
            if msg:
                return f"entry {x[:60]!r} {msg}"
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema(), "maxItems": self.max_items}

    def constraint(self) -> str:
        return f"at most {self.max_items} entries"


@dataclass(frozen=True)
class TextOrList(KeyType):
    """One string, or an array of strings (Beaker's cluster; the driver's command)."""

    max_items: int
    doc = "string or array of strings"

    def check(self, v: Any) -> str | None:
        if isinstance(v, str) and v.strip():
            return None if len(v) <= MAX_TEXT else f"must be at most {MAX_TEXT} characters"
        if isinstance(v, list) and v and all(isinstance(x, str) and x for x in v):
            return None if len(v) <= self.max_items else f"must have at most {self.max_items} entries"
        return f"must be a non-empty array of strings (or one string), not {describe(v)}"

    def schema(self) -> dict[str, Any]:
        return {
            "oneOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": self.max_items,
                    "items": {"type": "string", "minLength": 1},
                },
            ]
        }


@dataclass(frozen=True)
class Table(KeyType):
    """A free-form table whose entries the resolver checks itself (env tables, resources)."""

    value: KeyType
    max_items: int
    doc = "table"

    def check(self, v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"must be a table, not {describe(v)}"
        if len(v) > self.max_items:
            return f"must have at most {self.max_items} entries, not {len(v)}"
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": self.value.schema(), "maxProperties": self.max_items}

    def constraint(self) -> str:
        return f"at most {self.max_items} entries"


@dataclass(frozen=True)
class Mounts(KeyType):
    """An array of ``{weka = NAME, mount_path = /ABSOLUTE}`` tables: distinct, not nested, not /."""

    max_items: int
    doc = "array of tables"

    def check(self, v: Any) -> str | None:
        if not isinstance(v, list) or len(v) > self.max_items:
            return f"must be an array of at most {self.max_items} tables with weka and mount_path, not {describe(v)}"
        paths: list[PurePosixPath] = []
        filesystems: set[str] = set()
        for i, m in enumerate(v):
            if not isinstance(m, dict) or set(m) != {"weka", "mount_path"}:
                return f"entry {i} must have exactly the keys weka and mount_path"
            name, path = m["weka"], m["mount_path"]
            if not isinstance(name, str) or not name.strip() or not isinstance(path, str):
                return f"entry {i}: weka and mount_path must be non-empty strings"
            mount = PurePosixPath(path)
            if not mount.is_absolute() or str(mount) == "/":
                return f"entry {i}: mount_path must be an absolute path other than /, not {path!r}"
            if name in filesystems:
                return f"entry {i}: filesystem {name!r} is mounted twice"
            for other in paths:
                if mount == other or mount.is_relative_to(other) or other.is_relative_to(mount):
                    return f"entry {i}: mount_path {path} overlaps {other}"
            filesystems.add(name)
            paths.append(mount)
        return None

    def schema(self) -> dict[str, Any]:
        entry = {
            "type": "object",
            "properties": {
                "weka": {"type": "string", "minLength": 1},
                "mount_path": {"type": "string", "pattern": "^/."},
            },
            "required": ["weka", "mount_path"],
            "additionalProperties": False,
        }
        return {"type": "array", "items": entry, "maxItems": self.max_items}

    def constraint(self) -> str:
        return "distinct, absolute, not nested"


@dataclass(frozen=True)
class Url(KeyType):
    doc = "URL"

    def check(self, v: Any) -> str | None:
        if not isinstance(v, str):
            return f"must be an http(s) URL string, not {describe(v)}"
        if len(v) > MAX_TEXT:
            return f"must be at most {MAX_TEXT} characters"
        try:
            parts = urlsplit(v)
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError as exc:
            return f"is not a valid URL ({exc})"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"must be an http:// or https:// URL with a host, not {v!r}"
        if parts.username is not None or parts.password is not None:
            return "must not contain user:password@ (credentialed judges are not supported); remove the userinfo"
        if parts.query or parts.fragment:
            return "must not carry a query string or fragment (credentials are not supported); remove it"
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": "^https?://[^@?#]+$", "maxLength": MAX_TEXT}

    def constraint(self) -> str:
        return "http(s), no userinfo, query or fragment"


@dataclass(frozen=True)
class DirMode(KeyType):
    doc = "integer (octal mode)"

    def check(self, v: Any) -> str | None:
        if not is_int(v) or not 0 <= v <= 0o777:
            return f"must be a permission mode such as 0o750, not {describe(v)}"
        if v & 0o700 != 0o700:
            return f"must give the owner rwx (0o7..), not {v:#o}"
        if v & 0o002:
            return f"must not be world-writable (coordination records decide what runs), not {v:#o}"
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": 0o700, "maximum": 0o775}

    def constraint(self) -> str:
        return "owner rwx, not world-writable"


@dataclass(frozen=True)
class Opaque(KeyType):
    """A value the resolver checks with its own messages (kept for the reference's sake)."""

    doc_text: str
    json: Mapping[str, Any]

    @property
    def doc(self) -> str:  # type: ignore[override]
        return self.doc_text

    def check(self, v: Any) -> str | None:
        return None

    def schema(self) -> dict[str, Any]:
        return dict(self.json)


@dataclass(frozen=True)
class RunPath(Text):
    """A path inside the run directory: relative, plain names separated by "/" (no "." or "..",
    no empty part), so that a reader can open it component by component without leaving the run."""

    def check(self, v: Any) -> str | None:
        msg = super().check(v)
        if msg:
            return msg
        parts = v.split("/")
        if v.startswith("/") or any(p in ("", ".", "..") for p in parts):
            return f'must be a path relative to the run directory (plain names joined by "/", no ".."), not {v!r}'
        return None

    def schema(self) -> dict[str, Any]:
        part = r"(?!\.\.?(?:/|$))[^/]+"
        return {**super().schema(), "pattern": f"^{part}(?:/{part})*$"}

    def constraint(self) -> str:
        return "relative to the run directory"


@dataclass(frozen=True)
class Regex(Text):
    """A Python regular expression (``re`` syntax), checked to compile."""

    def check(self, v: Any) -> str | None:
        msg = super().check(v)
        if msg:
            return msg
        try:
            re.compile(v)
        except re.error as exc:
            return f"is not a valid regular expression ({exc})"
        return None

    def constraint(self) -> str:
        return "Python regular expression"


SIZE_UNITS: Mapping[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
UNLIMITED = "unlimited"


def parse_size(v: Any) -> int | None:
    """Bytes of a size as a spec spells it: an integer (bytes) or a string such as "20GiB",
    "512 MiB", "1.5TB" (KiB/MiB/GiB/TiB are powers of 1024, kB/MB/GB/TB of 1000); None when it is
    not one. "unlimited" is not a size (the caller decides whether it may stand for one)."""
    if is_int(v):
        return v if v >= 0 else None
    if not isinstance(v, str):
        return None
    m = SIZE_RE.fullmatch(v)
    if m is None or m.group(2).lower() not in SIZE_UNITS:
        return None
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class Size(KeyType):
    """A number of bytes: an integer, or a string with a unit ("20GiB", "512MiB", "1.5TB");
    with ``unlimited``, the word "unlimited" too (a resource limit)."""

    maximum: int = 1 << 60
    unlimited: bool = False
    doc = "size"

    def check(self, v: Any) -> str | None:
        if self.unlimited and v == UNLIMITED:
            return None
        n = parse_size(v)
        if n is None:
            more = ' or "unlimited"' if self.unlimited else ""
            return f'must be a size such as "20GiB", "512MiB" or a number of bytes{more}, not {describe(v)}'
        if n > self.maximum:
            return f"must be at most {self.maximum} bytes, not {n}"
        return None

    def schema(self) -> dict[str, Any]:
        text: dict[str, Any] = {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*[A-Za-z]*\s*$"}
        options: list[dict[str, Any]] = [{"type": "integer", "minimum": 0, "maximum": self.maximum}, text]
        if self.unlimited:
            options.append({"const": UNLIMITED})
        return {"anyOf": options}

    def constraint(self) -> str:
        return "bytes, or KiB/MiB/GiB/TiB, kB/MB/GB/TB" + (', or "unlimited"' if self.unlimited else "")
