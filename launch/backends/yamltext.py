"""A tiny block-style YAML writer for rendered job specs (no YAML library in the launcher).

Only what a rendered spec holds: mappings with plain keys, lists, strings, ints, floats, bools, null.
Every string is double-quoted with YAML escapes: printable ASCII as is, everything else as
``\\uXXXX`` / ``\\UXXXXXXXX``, so any value (a run spec carried inline, non-ASCII text, control
characters) reads back exactly, and no value can be taken for a number, a bool or a comment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PLAIN_KEY", "dump", "quote", "scalar"]

PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def quote(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def scalar(value: Any) -> str:
    if value is None:
        return "null"  # SkyPilot's secret reference: a name without a value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} has no YAML spelling here")
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _key(k: str) -> str:
    return k if PLAIN_KEY.fullmatch(k) else quote(k)


def _is_block(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple) and len(value) > 0


def _empty(value: Any) -> str:
    return "{}" if isinstance(value, Mapping) else "[]"


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            if _is_block(v):
                out.append(f"{pad}{_key(k)}:")
                # List items sit at the key's indent (the common YAML style); mappings indent.
                out.extend(_lines(v, indent if isinstance(v, list | tuple) else indent + 2))
            else:
                out.append(f"{pad}{_key(k)}: {_empty(v) if isinstance(v, Mapping | list | tuple) else scalar(v)}")
        return out
    if isinstance(value, Sequence) and not isinstance(value, str):
        for item in value:
            if _is_block(item):
                inner = _lines(item, indent + 2)
                # "- " takes the first line's indent.
                out.append(f"{pad}- {inner[0].lstrip()}")
                out.extend(inner[1:])
            else:
                out.append(f"{pad}- {_empty(item) if isinstance(item, Mapping | list | tuple) else scalar(item)}")
        return out
    raise TypeError("the top level must be a mapping or a list")


def _comment(text: str) -> str:
    # A YAML reader refuses some characters anywhere in the stream, comments included.
    return quote(text)[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def dump(doc: Mapping[str, Any], comments: Sequence[str] = ()) -> str:
    """``doc`` as block YAML, after ``comments`` (one ``# `` line each)."""
    head = [f"# {_comment(c)}".rstrip() for line in comments for c in line.splitlines() or [""]]
    return "\n".join([*head, *_lines(doc, 0)]) + "\n"
