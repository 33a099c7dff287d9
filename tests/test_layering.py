"""The package layering: on-disk formats below both engines, no engine importing the other's internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "statekit"

#: package -> packages it must never import (lazily inside functions included).
FORBIDDEN = {
    "format": ("statekit.runtime", "statekit.backends", "statekit.savepoint", "statekit.spark"),
    "savepoint": ("statekit.runtime", "statekit.backends", "statekit.spark"),
    "spark": ("statekit.runtime",),
    "windowing.py": ("statekit.runtime", "statekit.backends"),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_forbidden_imports(package: str) -> None:
    target = ROOT / package
    files = [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
    assert files
    bad = [
        f"{f.relative_to(ROOT.parent)} imports {name}"
        for f in files
        for name in sorted(_imports(f))
        if any(name == p or name.startswith(p + ".") for p in FORBIDDEN[package])
    ]
    assert bad == []
