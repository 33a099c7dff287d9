"""The runtime README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import statekit.runtime

README = Path(statekit.runtime.__file__).with_name("README.md")


def test_readme_example_runs(tmp_path):
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    code = block.replace('"/tmp/sp"', repr(str(tmp_path / "sp")))
    exec(compile(code, str(README), "exec"), {})
    from statekit.savepoint import Savepoint

    table = Savepoint.open(tmp_path / "sp").keyed_table("count")
    assert dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist())) == {"a": 2, "b": 1}
