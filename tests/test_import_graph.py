"""The project's import graph, built from the source with ``ast``: no cycle anywhere, and the layers
import only what the contract allows.

Every import counts: at module level, inside functions (a function-level import is a cycle that
waits for its first call) and under ``if TYPE_CHECKING:`` (a cycle the type checker still sees: the
two modules still cannot be understood one without the other).

The layers (issue 21):

* ``launch.spec`` (the pure spec model) imports the standard library and ``schemas`` only, and
  ``SPEC_PARSERS`` where a file in that format is read (YAML: a NeMo Gym config, issue 50).
* ``agent`` imports from ``launch`` only ``launch.spec``; ``audit`` only ``launch.spec`` and the
  schedulers' read-only modules (``SCHEDULER_READERS``, issue 37: the questions to ``scontrol``,
  beaker-py and SkyPilot's API, the parsing of their answers, slurmstepd's words). Those, and the
  packages holding them (importing a module runs its packages' ``__init__``), import only the
  standard library, ``schemas``, ``launch.spec``, each other and the schedulers' own clients: never
  a backend's render or submit side.
* ``launch`` imports from ``agent`` only the judge client library (``agent.judges.client``,
  ``agent.judges.rubrics``, ``agent.judges.extraction``): what drivers and ``gym-launch grade`` use;
  from ``audit`` only the edges ``LAUNCH_USES_AUDIT`` states, each with its reason.
* ``schemas`` imports nothing of ``agent``, ``launch`` or ``audit``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "launch", "audit", "schemas")
JUDGE_CLIENT = ("agent.judges.client", "agent.judges.rubrics", "agent.judges.extraction")
SCHEDULER_READERS = (
    "launch.backends.answers",
    "launch.backends.asking",
    "launch.backends.slurm.query",
    "launch.backends.slurm.ending",
    "launch.backends.beaker.query",
    "launch.backends.skypilot.query",
)
# A parser launch.spec may import, in the one module that reads that format, when such a file is read.
SPEC_PARSERS = {("launch.spec.load", "yaml")}
SCHEDULER_CLIENTS = ("beaker", "sky")  # beaker-py, SkyPilot: imported when a question is asked
LAUNCH_USES_AUDIT = {
    ("launch.backends._local_verdict", "audit.api"): "gym-launch local exits with the audit's verdict of its run",
    ("launch.backends._local_verdict", "audit.safedir"): "a run directory the audit refuses fails the local run",
    ("launch._status", "audit.preflight"): "status names unfit nodes, and how to resubmit without them, as the audit",
    ("launch._live_stacks", "audit.stacks"): "gym-launch stacks summarises live stacks as the audit does kept ones",
}

# Offenders other helpers of issue 21 are removing on their branches (the launcher modules still
# in agent/ and the agent cycles). The lead empties this at merge; nothing may be added to it.
KNOWN_UNTIL_MERGE: frozenset[str] = frozenset(
    {
        # cycles
    }
)


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module
    target: str  # the imported module, as written (may be outside the project)
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for top in PACKAGES:
        for path in sorted((REPO / top).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement below ``tree``: module level, in functions, classes and ``if`` blocks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _resolve_relative(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


def edges_of(module: str, path: Path, known: dict[str, Path]) -> Iterator[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, alias.name, node.lineno)
            continue
        target = _resolve_relative(module, is_package, node) if node.level else (node.module or "")
        # `from pkg import name`: an edge to the submodule when `name` is one, else to `pkg`.
        subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
        for sub in subs:
            yield Edge(module, sub, node.lineno)
        if len(subs) < len(node.names):
            yield Edge(module, target, node.lineno)


def all_edges() -> list[Edge]:
    known = project_modules()
    return [e for m, p in known.items() for e in edges_of(m, p, known)]


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# --- cycles ---------------------------------------------------------------------------------------


def find_cycles(edges: list[Edge], known: set[str]) -> list[list[str]]:
    """Every strongly connected component of more than one module (or a module importing itself),
    each as one cycle through it (Tarjan's algorithm, iterative: the graph may be deep)."""
    graph: dict[str, set[str]] = {m: set() for m in known}
    for e in edges:
        if e.target in known:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        components.append(sorted(component))
                continue
            if child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [_one_cycle(graph, c) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, for the message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    nxt.append(child)
        frontier = nxt
    return component  # pragma: no cover - a component always has a cycle


def _cycle_label(cycle: list[str]) -> str:
    if len(cycle) == 3:  # a -> b -> a
        a, b = sorted(cycle[:2])
        return f"{a} <-> {b}"
    return " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles() -> None:
    def edge(a: str, b: str) -> Edge:
        return Edge(a, b, 1)

    known = {"a", "b", "c", "d"}
    assert find_cycles([edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("c", "d")], known) == [
        ["a", "b", "c", "a"]
    ]
    assert find_cycles([edge("a", "b"), edge("b", "c"), edge("a", "c")], known) == []
    assert find_cycles([edge("d", "d")], known) == [["d", "d"]]
    assert _cycle_label(["b", "a", "b"]) == "a <-> b"


def test_the_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    source = "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x.y\n"
    source += "def f():\n    from launch.spec import config\n    from . import sibling\n"
    path = tmp_path / "mod.py"
    path.write_text(source, encoding="utf-8")
    known = {"launch.spec.config": path, "pkg.sibling": path}
    found = {e.target for e in edges_of("pkg.mod", path, known)}
    assert found == {"os", "typing", "x.y", "launch.spec.config", "pkg.sibling"}


def test_no_import_cycle() -> None:
    known = project_modules()
    cycles = [_cycle_label(c) for c in find_cycles(all_edges(), set(known))]
    new = [c for c in cycles if c not in KNOWN_UNTIL_MERGE]
    assert not new, "import cycles:\n" + "\n".join(new)


# --- the layers -----------------------------------------------------------------------------------


def _violations() -> list[tuple[str, str]]:
    """(key, description): key is the KNOWN_UNTIL_MERGE spelling of the offence."""
    known = project_modules()
    stdlib = sys.stdlib_module_names
    # The readers and every package above them, whose __init__ runs when a reader is imported.
    readers = {".".join(r.split(".")[:i]) for r in SCHEDULER_READERS for i in range(1, r.count(".") + 2)}
    out: list[tuple[str, str]] = []
    for e in all_edges():
        where = f"{known[e.source].relative_to(REPO)}:{e.line}: imports {e.target}"
        target_top = _top(e.target)
        spec_may_import = target_top in stdlib or target_top == "schemas" or _within(e.target, "launch.spec")
        spec_may_import = spec_may_import or (e.source, e.target) in SPEC_PARSERS
        if _within(e.source, "launch.spec") and not spec_may_import:
            out.append((f"{e.source} -> {e.target}", where + " (launch.spec: the standard library and schemas only)"))
        reader_may_import = spec_may_import or target_top in SCHEDULER_CLIENTS or e.target in SCHEDULER_READERS
        if e.source in readers and not reader_may_import:
            out.append((f"{e.source} -> {e.target}", where + " (a scheduler's read-only side: no render or submit)"))
        may_import = _within(e.target, "launch.spec") or (_top(e.source) == "audit" and e.target in SCHEDULER_READERS)
        if target_top == "launch" and _top(e.source) in ("agent", "audit") and not may_import:
            out.append((f"{e.source} -> launch", where + " (agent/: launch.spec only; audit/: and SCHEDULER_READERS)"))
        if _top(e.source) == "launch" and target_top == "agent" and not any(_within(e.target, c) for c in JUDGE_CLIENT):
            out.append((f"{e.source} -> agent", where + " (launch/ imports only the judge client of agent/)"))
        if _top(e.source) == "launch" and target_top == "audit" and (e.source, e.target) not in LAUNCH_USES_AUDIT:
            out.append((f"{e.source} -> audit", where + " (launch/ imports of audit/ what LAUNCH_USES_AUDIT states)"))
        if _top(e.source) == "schemas" and target_top in ("agent", "launch", "audit"):
            out.append((f"{e.source} -> {target_top}", where + " (schemas/ imports nothing of the project)"))
    return out


def test_the_layers_import_only_what_the_contract_allows() -> None:
    found = [desc for key, desc in _violations() if key not in KNOWN_UNTIL_MERGE]
    assert not found, "\n".join(found)


def test_the_stated_readers_and_edges_exist() -> None:
    known = project_modules()
    assert set(SCHEDULER_READERS) <= set(known), sorted(set(SCHEDULER_READERS) - set(known))
    stale = set(LAUNCH_USES_AUDIT) - {(e.source, e.target) for e in all_edges()}
    assert not stale, f"remove from LAUNCH_USES_AUDIT: {sorted(stale)}"


def test_the_allowlist_names_only_live_offences() -> None:
    """KNOWN_UNTIL_MERGE shrinks as the offenders are fixed; an entry nothing matches is stale."""
    live = {key for key, _ in _violations()}
    live |= {_cycle_label(c) for c in find_cycles(all_edges(), set(project_modules()))}
    stale = sorted(KNOWN_UNTIL_MERGE - live)
    assert not stale, f"remove from KNOWN_UNTIL_MERGE: {stale}"


def test_imports_inside_the_project_are_absolute() -> None:
    found = []
    for path in project_modules().values():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "use absolute imports: " + ", ".join(found)


# The training framework is the user's (the `trainer` extra, issue 49): the agent, the launcher, the
# audit and the schemas never import it, even in a function; a driver's process answers for its
# collectives by looking torch up in sys.modules (agent/proc/collective_hook.py).
TRAINING_FRAMEWORKS = ("torch",)


def test_no_project_module_imports_a_training_framework() -> None:
    found = [f"{e.source}:{e.line}: imports {e.target}" for e in all_edges() if _top(e.target) in TRAINING_FRAMEWORKS]
    assert not found, "\n".join(found)


def test_the_framework_rule_sees_a_function_level_import(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden.py"
    hidden.write_text("def f():\n    import torch.distributed as dist\n", encoding="utf-8")
    assert [e.target for e in edges_of("agent.hidden", hidden, {})] == ["torch.distributed"]
