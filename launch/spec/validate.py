"""Whole-spec validation: key-level rules, then placement. Reports every problem at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launch.spec.config import RunConfig
from launch.spec.errors import Problem
from launch.spec.load import ResolvedSpec, resolved_from_dict
from launch.spec.plan import placement_problems
from launch.spec.resolve import Checked, check
from launch.spec.restarts import restart_problems

__all__ = ["validate", "validated"]


def _placed(checked: Checked, resolved: ResolvedSpec) -> tuple[RunConfig, list[Problem]]:
    """The model built from ``checked`` (no second resolution) and its placement problems."""
    assert checked.built is not None
    config = RunConfig(spec=resolved, **checked.built)
    return config, checked.user_problems(placement_problems(config) + restart_problems(config))


def validated(resolved: ResolvedSpec) -> tuple[RunConfig | None, list[Problem]]:
    """The model of ``resolved`` and every problem of it (None and the key-level problems, if any).

    Placement is checked only once every key is valid: sizes of the wrong
    type cannot be placed, and their key-level problems already name them.
    """
    checked = check(RunConfig, resolved.data, resolved.overrides)
    if checked.problems:
        return None, checked.problems
    return _placed(checked, resolved)


def validate(data: Mapping[str, Any], overrides: tuple[str, ...] = ()) -> list[Problem]:
    """Every problem of a spec's data; empty when ``gym-launch plan`` would succeed."""
    checked = check(RunConfig, data, overrides)
    if checked.problems:
        return checked.problems
    return _placed(checked, resolved_from_dict(data, overrides=overrides))[1]
