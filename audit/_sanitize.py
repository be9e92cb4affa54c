"""Make untrusted text safe to print: run directories are written by other processes, and file
names, causes and log lines end up on a terminal, in JSON and in HTML."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["clean_json", "clean_text", "terminal_safe"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(s: str) -> str:
    """Valid Unicode: lone surrogates (from undecodable file names) become U+FFFD."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


def terminal_safe(s: str) -> str:
    """No escape sequences reach the terminal: control characters are shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", clean_text(s))


def clean_json(value: Any) -> Any:
    """A copy that json.dumps(allow_nan=False) always accepts."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value
