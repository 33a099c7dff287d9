"""The README's Python snippets run as written, in order, in a fresh directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.spark
def test_readme_snippets_run(spark, tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 3, "the README lost its examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own documentation
    assert (tmp_path / "sp-1" / "_metadata.json").exists()
    assert (tmp_path / "sp-avg" / "_metadata.json").exists()
