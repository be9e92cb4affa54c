"""Every module's public surface is its ``__all__`` (issue 37).

A module another module of the project imports declares ``__all__``, and what other modules import
from it is in that list: the surface a reader sees at the top of the file is the one the code uses.
Tests and benchmarks may reach past it (they test the parts), so only the product's imports count.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_graph import project_modules


def _literal_names(value: ast.expr | None, assigned: dict[str, ast.expr | None]) -> list[str] | None:
    """Names in a literal list, tuple, set or dict (its keys); `sorted(NAME)` of such a literal."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "sorted":
        arg = value.args[0] if value.args else None
        return _literal_names(assigned.get(arg.id) if isinstance(arg, ast.Name) else arg, assigned)
    elts = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", None)
    if elts is None:
        return None
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def declared_all(path: Path) -> list[str] | None:
    """The module's ``__all__`` at top level (a literal, or `sorted` of one), else None."""
    assigned: dict[str, ast.expr | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        if not isinstance(target, ast.Name) or not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        assigned[target.id] = node.value
        if target.id == "__all__":
            names = _literal_names(node.value, assigned)
            if names is None:
                raise AssertionError(f"{path}: __all__ must be a literal list of names")
            return names
    return None


def imported_from(known: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """module -> {name imported from it: [importing modules]}, over the product's own imports."""
    out: dict[str, dict[str, list[str]]] = {m: {} for m in known}
    for source, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in known:
                continue
            for alias in node.names:
                if f"{node.module}.{alias.name}" not in known:  # a name, not a submodule
                    out[node.module].setdefault(alias.name, []).append(source)
    return out


def imported_modules(known: dict[str, Path]) -> set[str]:
    used: set[str] = set()
    for path in known.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                # `from pkg import submodule` uses the submodule's surface, not the package's
                used |= subs if subs <= set(known) else subs | {node.module}
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names}
    return used & set(known)


def surface_problems(known: dict[str, Path]) -> list[str]:
    names = imported_from(known)
    problems = []
    for module in sorted(imported_modules(known)):
        path = known[module]
        if path.name == "__main__.py":
            continue
        declared = declared_all(path)
        if declared is None:
            problems.append(f"{module}: imported by other modules but declares no __all__")
            continue
        for name, users in sorted(names[module].items()):
            if name not in declared:
                problems.append(f"{module}: {name} is imported by {users[0]} but is not in its __all__")
    return problems


def test_every_imported_module_declares_its_surface() -> None:
    problems = surface_problems(project_modules())
    assert not problems, "\n".join(problems)


def test_the_check_names_a_missing_all_and_a_name_outside_it(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("X = 1\nY = 2\n", encoding="utf-8")
    (tmp_path / "b.py").write_text('__all__ = ["Z"]\nZ = 3\nW = 4\n', encoding="utf-8")
    (tmp_path / "c.py").write_text("from pkg.a import X\nfrom pkg.b import W, Z\n", encoding="utf-8")
    known = {f"pkg.{n}": tmp_path / f"{n}.py" for n in "abc"}
    assert surface_problems(known) == [
        "pkg.a: imported by other modules but declares no __all__",
        "pkg.b: W is imported by pkg.c but is not in its __all__",
    ]
