"""Reference pages made from the code: every CLI from its argparse parser (usage, options, exit
codes: each parser's epilog) and the driver API from agent/driver_api.py's signatures and docstrings."""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Iterator

from agent import cli as agent_cli
from agent import driver_api
from audit import cli as audit_cli
from launch import cli as launch_cli

__all__ = ["cli_page", "driver_api_page"]

# argparse wraps its help to the terminal's width: fixed, so the page is the same everywhere.
_COLUMNS = "100"


def _help(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _COLUMNS
    try:
        return parser.format_help().rstrip() + "\n"
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _section(title: str, parser: argparse.ArgumentParser, level: str = "##") -> str:
    return f"{level} `{title}`\n\n```text\n{_help(parser)}```\n\n"


def cli_page() -> str:
    out = [
        "# Command-line reference\n\n",
        "Generated from each tool's own argparse parser (`launch/cli.py`, `agent/cli.py`, `audit/cli.py`): "
        "the text is what `--help` prints, exit codes included. Every tool has `--version` and `-v`/`-q`.\n\n",
    ]
    launch = launch_cli.build_parser()
    out.append(_section("gym-launch", launch))
    out += [_section(f"gym-launch {name}", sub, "###") for name, sub in _subcommands(launch)]
    out.append(_section("gym-agent", agent_cli._parser()))
    out.append(_section("gym-audit", audit_cli._audit_parser()))
    for parser in (audit_cli._logs_parser(), audit_cli._ls_parser(), audit_cli._completion_parser()):
        out.append(_section(parser.prog, parser, "###"))
    return "".join(out).rstrip() + "\n"


def driver_api_page() -> str:
    out = [
        "# Driver API (`agent.driver_api`)\n\n",
        "What a driver started by the agent can call. Generated from `agent/driver_api.py`: each "
        "function's signature and docstring.\n\n",
        inspect.cleandoc(driver_api.__doc__ or "") + "\n\n",
    ]
    for name in driver_api.__all__:
        fn = getattr(driver_api, name)
        sig = str(inspect.signature(fn)).replace("'", "")
        doc = inspect.cleandoc(fn.__doc__ or "(no docstring)")
        out.append(f"## `{name}{sig}`\n\n{doc}\n\n")
    return "".join(out).rstrip() + "\n"
