"""Whole-spec validation: key-level rules, then placement. Reports every problem at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launch.errors import Problem
from launch.plan import placement_problems
from launch.resolve import check
from launch.spec import resolved_from_dict


def validate(data: Mapping[str, Any], overrides: tuple[str, ...] = ()) -> list[Problem]:
    """Every problem of a spec's data; empty when ``gym-launch plan`` would succeed.

    Placement is checked only once every key is valid: sizes of the wrong
    type cannot be placed, and their key-level problems already name them.
    """
    checked = check(data, overrides)
    if checked.problems:
        return checked.problems
    from launch.config import RunConfig

    config = RunConfig.from_spec(resolved_from_dict(data, overrides=overrides))
    return checked.user_problems(placement_problems(config))
