"""``--set KEY=TOML_VALUE`` overrides.

The key is a TOML dotted key (bare or quoted segments, e.g.
``judging.bindings."general-quality".judge``) and the value a TOML value
(``300``, ``true``, ``"big"``, ``[1, 2]``, ``{A = "1"}``). As a convenience,
a value that is not valid TOML and contains no quote, bracket, brace or
newline is taken as a plain string, so ``--set name=demo`` and
``--set judges.x.model=Qwen/Qwen3-32B`` work unquoted; anything that looks like
an attempt at structured TOML must parse. The leaf is replaced, not merged;
missing intermediate tables are created.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from launch.spec.errors import UsageError
from launch.spec.keypath import format_key

__all__ = ["apply_overrides", "parse_override"]

_STRUCTURAL = set("\"'[]{}\n\r")


def _split(item: str) -> tuple[str, str]:
    """Split at the first ``=`` that is not inside a quoted key segment."""
    quote: str | None = None
    escaped = False
    for i, ch in enumerate(item):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "=":
            return item[:i].strip(), item[i + 1 :].strip()
    raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. --set judges.general.timeout=300")


def _key_segments(key: str, item: str) -> list[str]:
    import tomllib  # only when --set is given: the audit imports this module

    if not key:
        raise UsageError(f"--set {item!r}: the key is empty")
    try:
        doc = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--set {item!r}: {key!r} is not a valid dotted key ({exc})") from None
    segments: list[str] = []
    node: Any = doc
    # tomllib turned the dotted key into a single chain of one-entry tables.
    while isinstance(node, dict):
        ((name, node),) = node.items()
        segments.append(name)
    return segments


def _value(raw: str, item: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if raw and not (_STRUCTURAL & set(raw)):
            return raw
        raise UsageError(f"--set {item!r}: the value is not valid TOML ({exc})") from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=1"`` -> ``(["a", "b"], 1)``. Raises UsageError with a one-line message."""
    key, raw = _split(item)
    return _key_segments(key, item), _value(raw, item)


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with every override applied in order."""
    result: dict[str, Any] = _copy(data)
    for item in overrides:
        segments, value = parse_override(item)
        node = result
        for depth, name in enumerate(segments[:-1]):
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                where = format_key(segments[: depth + 1])
                raise UsageError(f"--set {item!r}: {where} is a value, not a table")
            node = child
        node[segments[-1]] = value
    return result


def _copy(value: Any) -> Any:
    # Structural copy: TOML may hold dates and non-finite floats, which the spec
    # loader reports with their key, so a JSON round trip cannot be used here.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
