"""Every module's public surface is its ``__all__``, and a module's name says who may import it
(issue 37).

A module another module of the project imports declares ``__all__``, and what other modules import
from it is in that list: the surface a reader sees at the top of the file is the one the code uses.
A module only its own package imports starts with an underscore; one with an underscore is never
imported from outside its package. Tests and benchmarks may reach past both (they test the parts),
so only the product's imports count.
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


def importers_of(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the product modules that import it (by `import m`, `from m import x` or
    `from package import m`)."""
    out: dict[str, set[str]] = {m: set() for m in known}
    for source, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    target = sub if sub in known else node.module
                    if target in known and target != source:
                        out[target].add(source)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.name != source:
                        out[alias.name].add(source)
    return out


def privacy_problems(known: dict[str, Path]) -> list[str]:
    problems = []
    for module, users in sorted(importers_of(known).items()):
        path = known[module]
        if path.name in ("__init__.py", "__main__.py") or not users:
            continue
        package = module.rsplit(".", 1)[0]
        outside = sorted(u for u in users if u != package and u.rsplit(".", 1)[0] != package)
        if package in known and path.stem in (declared_all(known[package]) or ()):
            outside.append(f"{package}.__all__")  # the package offers it by name: a public submodule
        private = path.stem.startswith("_")
        if private and outside:
            problems.append(f"{module}: private to {package} but imported by {outside[0]}")
        elif not private and not outside:
            problems.append(f"{module}: only {package} imports it: name it _{path.stem}.py")
    return problems


def test_a_module_only_its_package_imports_is_named_private() -> None:
    problems = privacy_problems(project_modules())
    assert not problems, "\n".join(problems)


def test_the_privacy_check_names_both_mistakes(tmp_path: Path) -> None:
    for name, text in {
        "helper.py": "X = 1\n",
        "_inner.py": "Y = 2\n",
        "api.py": "from pkg.helper import X\n",
        "cli.py": "from pkg.api import X\n",
    }.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "other.py").write_text("from pkg._inner import Y\nfrom pkg.cli import X\n", encoding="utf-8")
    known = {f"pkg.{n}": tmp_path / f"{n}.py" for n in ("helper", "_inner", "api", "cli")}
    known["top.other"] = tmp_path / "other.py"
    assert privacy_problems(known) == [
        "pkg._inner: private to pkg but imported by top.other",
        "pkg.api: only pkg imports it: name it _api.py",
        "pkg.helper: only pkg imports it: name it _helper.py",
    ]


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
