"""The package layering: every part of statekit and its CLI declares what it may import, the declaration is a
layering (no part above imports a part below it back), no module takes part in an import cycle, and no module imports
another module's private names.

Imports are read from the source (`ast`): module-level imports and imports inside functions alike (a function-level
import is still a dependency), ``if TYPE_CHECKING:`` imports only for the layering (they never run). A module's part
is its subpackage of statekit (``format``, ``savepoint``, ...), its own name for a top-level module (``errors``,
``query``, ...), ``statekit`` for the package's ``__init__`` and ``cli`` for statekit_cli.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "statekit"
CLI = ROOT.parent / "cli"

#: part -> the parts it may import (besides itself). Lower parts first; `test_the_declaration_is_a_layering`
#: holds that no part reaches itself through these.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "types": {"errors"},
    "serde": {"errors"},
    "extras": {"errors"},
    "limits": set(),
    "tempdirs": {"errors"},
    "table_names": set(),
    "keyhash": {"errors", "types"},
    "keygroups": {"errors", "keyhash", "types"},
    "identifiers": {"errors", "limits"},
    "state": {"errors", "types", "serde"},
    "windowing": {"errors", "state", "types"},
    # the on-disk formats: below both engines and every reader
    "format": {"errors", "extras", "identifiers", "keygroups", "keyhash", "limits", "serde", "state", "types",
               "tempdirs", "table_names"},
    "backends": {"errors", "extras", "format", "keygroups", "serde", "state", "types"},
    "savepoint": {"errors", "format", "identifiers", "keygroups", "keyhash", "limits", "serde", "state", "table_names",
                  "tempdirs", "types", "extras"},
    "query": {"errors", "format", "identifiers", "keygroups", "savepoint", "table_names", "types", "extras"},
    # the two engines: the embedded runtime and Spark never import each other
    "runtime": {"backends", "errors", "format", "identifiers", "keygroups", "savepoint", "serde", "state", "tempdirs",
                "types", "windowing", "extras"},
    "spark": {"backends", "errors", "extras", "format", "identifiers", "keygroups", "query", "savepoint", "serde",
              "state", "table_names", "tempdirs", "types", "windowing"},
    "testing": {"errors", "runtime", "state", "types", "format", "savepoint"},
    "bootstrap": {"errors", "format", "keygroups", "runtime", "savepoint", "state", "types", "identifiers"},
    "export": {"errors", "query", "savepoint", "spark", "format", "types"},
    "demo": {"errors", "runtime", "savepoint", "spark", "state", "types", "format"},
    "statekit": {"errors", "identifiers", "query", "runtime", "state", "types"},
    "cli": {"statekit", "bootstrap", "demo", "errors", "export", "format", "identifiers", "query", "runtime",
            "savepoint", "spark", "types", "keygroups", "state", "extras", "table_names", "tempdirs"},
}

#: Import cycles (strongly connected groups of modules) not broken yet, each with why. The test fails on any other
#: cycle, and on an entry here that no longer occurs (so the list only shrinks).
PENDING_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    """Every module of statekit and the CLI, by its import name (the CLI installs as statekit_cli)."""
    found = {}
    for base, package in ((ROOT, "statekit"), (CLI, "statekit_cli")):
        for path in sorted(base.rglob("*.py")):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def part_of(module: str) -> str:
    """The part of the layering `module` belongs to (see the module docstring)."""
    names = module.split(".")
    if names[0] == "statekit_cli":
        return "cli"
    return names[1] if len(names) > 1 else "statekit"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@cache
def imports_of(module: str) -> tuple[tuple[str, bool], ...]:
    """(imported statekit/statekit_cli module, whether it only runs under TYPE_CHECKING) for every import of
    `module`, at any depth; ``from package import name`` names the submodule when `name` is one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for c in child.body:
                    visit_one(c, True)
                for c in child.orelse:
                    visit_one(c, typing_only)
            else:
                visit_one(child, typing_only)

    def visit_one(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, typing_only) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                found.append((f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target, typing_only))
        visit(node, typing_only)

    visit(ast.parse(path.read_text(), str(path)), False)
    resolved = set()
    for name, typing_only in found:
        while name and name not in MODULES:  # `import statekit.format.keyed as K` -> that module
            name = name.rpartition(".")[0]
        if name and name != module:
            resolved.add((name, typing_only))
    return tuple(sorted(resolved))


def test_the_declaration_is_a_layering() -> None:
    """Every part is declared, names only declared parts, and no part reaches itself through the declaration."""
    parts = {part_of(m) for m in MODULES}
    assert parts == set(ALLOWED), "declare each part of statekit in ALLOWED (and drop parts that are gone)"
    assert all(deps <= set(ALLOWED) for deps in ALLOWED.values())
    done: set[str] = set()
    for _ in ALLOWED:  # peel off parts whose dependencies are all placed; a cycle never peels
        done |= {p for p, deps in ALLOWED.items() if deps <= done}
    assert done == set(ALLOWED), f"the declared parts {sorted(set(ALLOWED) - done)} import each other in a circle"


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_imports_only_what_it_declares(part: str) -> None:
    modules = [m for m in MODULES if part_of(m) == part]
    assert modules
    bad = [f"{MODULES[m].relative_to(ROOT.parent)} imports {target} ({part_of(target)})"
           for m in modules for target, _ in imports_of(m)
           if part_of(target) != part and part_of(target) not in ALLOWED[part]]
    assert bad == []


def running_imports() -> dict[str, list[str]]:
    """Module -> the modules it imports when it runs (module-level and inside functions; not TYPE_CHECKING)."""
    return {m: [t for t, typing_only in imports_of(m) if not typing_only] for m in MODULES}


def import_cycles(graph: dict[str, list[str]]) -> set[frozenset[str]]:
    """The strongly connected groups of two or more nodes of `graph` (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: set[frozenset[str]] = set()

    def connect(v: str) -> None:  # iterative: no recursion limit on long import chains
        work = [(v, iter(graph[v]))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.add(w)
                    if w == node:
                        break
                if len(group) > 1:
                    groups.add(frozenset(group))

    for v in graph:
        if v not in index:
            connect(v)
    return groups


def test_no_import_cycles() -> None:
    """No module imports itself back through others, counting imports inside functions: what two modules share
    lives in a module of its own (STYLE.md 10), not behind a function-level import."""
    found = import_cycles(running_imports())
    assert sorted(map(sorted, found - PENDING_CYCLES)) == []
    assert sorted(map(sorted, PENDING_CYCLES - found)) == [], "changed or broken: update PENDING_CYCLES"


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": ["b"], "b": ["a", "c"], "c": ["d"], "d": ["e"], "e": ["c"], "f": ["a", "f"]}
    assert import_cycles(graph) == {frozenset({"a", "b"}), frozenset({"c", "d", "e"})}
    assert import_cycles({"a": ["b"], "b": []}) == set()


#: Private names still imported across modules, each with why it is not fixed yet. The test fails on any other
#: such import, and on an entry here that no longer occurs (so the list only shrinks).
PENDING_PRIVATE_IMPORTS: set[str] = set()


def _private_imports(path: Path) -> list[str]:
    """`from X import _name` of another statekit module, and ``M._name`` of a statekit module `M` imported as a
    name (dunder names such as `__version__` are public; a third-party package's internals are another matter:
    `cli/params.py` pins typer for its)."""
    rel = path.relative_to(ROOT.parent).as_posix()
    tree = ast.parse(path.read_text(), str(path))
    found = []
    aliases = set()  # names bound to one of our modules: `from statekit.spark import parts as P`, `import x as y`
    for node in ast.walk(tree):
        ours = isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] in (
            "statekit", "statekit_cli"))
        if ours:
            assert isinstance(node, ast.ImportFrom)
            module = ("." * node.level) + (node.module or "")
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{rel} imports {alias.name} from {module}")
                elif f"{node.module}.{alias.name}" in MODULES:
                    aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.asname and a.name.split(".")[0] in ("statekit",
                                                                                                  "statekit_cli"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{rel} uses {node.value.id}.{node.attr}")
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    """A name with a leading underscore is its module's own; what another module needs gets a public name where it
    lives (STYLE.md 15)."""
    files = sorted(ROOT.rglob("*.py")) + sorted(CLI.rglob("*.py"))
    assert len(files) > 100
    found = {line for f in files for line in _private_imports(f)}
    assert sorted(found - PENDING_PRIVATE_IMPORTS) == []
    assert sorted(PENDING_PRIVATE_IMPORTS - found) == [], "fixed: remove these from PENDING_PRIVATE_IMPORTS"
