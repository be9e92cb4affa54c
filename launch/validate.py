"""Whole-spec validation: key-level rules, then placement. Reports every problem at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launch.config import RunConfig
from launch.errors import Problem
from launch.plan import placement_problems
from launch.rules import check_spec
from launch.spec import resolved_from_dict


def validate(data: Mapping[str, Any]) -> list[Problem]:
    """Every problem of a resolved spec; empty when ``gym-launch plan`` would succeed.

    Placement is checked only once every key is valid: sizes of the wrong
    type cannot be placed, and their key-level problems already name them.
    """
    problems = check_spec(data)
    if problems:
        return problems
    return placement_problems(RunConfig.from_spec(resolved_from_dict(data)))
