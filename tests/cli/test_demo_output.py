"""`statekit demo --out DIR` never deletes what statekit did not create."""

from __future__ import annotations

import pytest

from statekit.demo import DEMO_MARKER, prepare_output
from statekit.errors import OutputExistsError
from statekit.testing import tree_digest

from .conftest import run_executable


def test_demo_refuses_a_directory_with_user_files(cli, tmp_path):
    keep = tmp_path / "keepme"
    keep.mkdir()
    (keep / "important.txt").write_text("notes\n")
    before = tree_digest(tmp_path)
    result = cli(["demo", "--out", keep, "--no-spark"])
    assert result.exit_code == 2
    assert "OutputExistsError" in result.output and "never deletes" in result.output
    assert "Traceback" not in result.output
    assert tree_digest(tmp_path) == before
    again = cli(["demo", "--out", keep, "--no-spark", "--replace"])  # --replace does not help
    assert again.exit_code == 2 and tree_digest(tmp_path) == before


def test_demo_refuses_the_working_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    before = tree_digest(tmp_path)
    result = run_executable(["demo", "--out", ".", "--no-spark"], cwd=tmp_path)
    assert result.exit_code == 2 and "OutputExistsError" in result.stderr
    assert tree_digest(tmp_path) == before


def test_demo_refuses_a_file(tmp_path):
    f = tmp_path / "out"
    f.write_text("x")
    with pytest.raises(OutputExistsError):
        prepare_output(f)
    assert f.read_text() == "x"


def test_replace_only_an_earlier_untouched_demo_output(tmp_path):
    from statekit.demo import write_demo_savepoint

    out = prepare_output(tmp_path / "demo")
    assert (out / DEMO_MARKER).is_file()
    write_demo_savepoint(out / "savepoint-1", users=10)
    with pytest.raises(OutputExistsError, match="--replace"):
        prepare_output(out)
    (out / "savepoint-1" / "my-notes.txt").write_text("added by the user")  # no longer only the demo's files
    before = tree_digest(tmp_path)
    with pytest.raises(OutputExistsError, match="never deletes"):
        prepare_output(out, replace=True)
    assert tree_digest(tmp_path) == before
    (out / "savepoint-1" / "my-notes.txt").unlink()
    prepare_output(out, replace=True)
    assert sorted(p.name for p in out.iterdir()) == [DEMO_MARKER]


def test_empty_directory_is_used(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert prepare_output(empty) == empty
