"""`python -m docsgen` writes the generated pages; `--check` only says which are stale (exit 1)."""

from __future__ import annotations

import argparse
import sys

from docsgen.pages import DOCS, render, stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m docsgen", description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 naming each stale page; write nothing")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"docs/{path} is stale: run python -m docsgen", file=sys.stderr)
        return 1 if old else 0
    for path, text in render().items():
        target = DOCS / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
