"""The layers inside agent/: every import between agent/'s packages points down (issue 37).

Built on the project's import graph (tests/test_import_graph.py: every import counts, in functions
and under ``if TYPE_CHECKING:`` too). A package may import its own modules and any package of a
lower layer; packages of one layer stay independent of each other, so each runtime can be read,
tested and changed alone. ARCHITECTURE.md ("Layers inside agent/") shows the same table.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_import_graph import Edge, all_edges, edges_of, project_modules

# Bottom first. `ground` is what every part uses (clock, failures, the one polling loop, NVML, the
# reaper's pipe); `proc` the node's processes; `coord` the run directory, the run context and the
# topology; `reaper` the sidecar; the runtimes; the lifecycle that walks the steps; the entry points.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"ground"}),
    frozenset({"proc"}),
    frozenset({"coord"}),
    frozenset({"reaper"}),
    frozenset({"ray", "judges", "stacks", "preflight"}),
    frozenset({"lifecycle"}),
    frozenset({"cli", "driver_api", "__main__"}),
)


def layer_of(module: str) -> tuple[int, str] | None:
    """(layer index, package) of an agent module; None outside agent/ or for agent/__init__."""
    parts = module.split(".")
    if parts[0] != "agent" or len(parts) < 2:
        return None
    for i, members in enumerate(LAYERS):
        if parts[1] in members:
            return i, parts[1]
    raise AssertionError(f"{module}: agent.{parts[1]} is in no layer: add it to LAYERS (and ARCHITECTURE.md)")


def upward(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        source, target = layer_of(e.source), layer_of(e.target)
        if source is None or target is None or source[1] == target[1]:
            continue
        if target[0] > source[0]:
            why = "up"
        elif target[0] == source[0]:
            why = "sideways, within one layer"
        else:
            continue
        out.append(f"{e.source}:{e.line}: imports {e.target} ({why})")
    return out


def test_every_arrow_inside_agent_points_down() -> None:
    found = upward(all_edges())
    assert not found, "imports against agent/'s layers:\n" + "\n".join(found)


def test_every_package_of_agent_is_in_a_layer() -> None:
    packages = {m.split(".")[1] for m in project_modules() if m.startswith("agent.")}
    placed = set().union(*LAYERS)
    assert packages <= placed, f"not in LAYERS: {sorted(packages - placed)}"


def test_the_rule_catches_an_upward_and_a_sideways_import(tmp_path: Path) -> None:
    """The check can fail: a ground module importing the lifecycle, a runtime importing another."""
    up = tmp_path / "up.py"
    up.write_text("from agent.lifecycle import steps\n", encoding="utf-8")
    side = tmp_path / "side.py"
    side.write_text("def f():\n    from agent.judges import runtime\n", encoding="utf-8")
    down = tmp_path / "down.py"
    down.write_text("from agent.ground import clock\n", encoding="utf-8")
    known = {"agent.lifecycle.steps": up, "agent.judges.runtime": side, "agent.ground.clock": down}
    edges = [
        *edges_of("agent.ground.up", up, known),
        *edges_of("agent.ray.side", side, known),
        *edges_of("agent.lifecycle.down", down, known),
    ]
    found = upward(edges)
    assert len(found) == 2, found
    assert "imports agent.lifecycle.steps (up)" in found[0]
    assert "imports agent.judges.runtime (sideways, within one layer)" in found[1]
