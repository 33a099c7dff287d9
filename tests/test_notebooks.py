"""Every notebook in notebooks/ runs end to end on the library's code (nbclient, this interpreter's kernel)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
KERNEL = "statekit-test"


@pytest.fixture
def kernel_of_this_interpreter(tmp_path, monkeypatch):
    """A kernelspec that runs ipykernel on sys.executable, found first through JUPYTER_PATH.

    A "python3" kernelspec installed elsewhere on the machine could point at another Python
    without statekit; this one cannot.
    """
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # Spark starts its workers with PYSPARK_PYTHON (set by statekit.spark to sys.executable);
    # PATH first on the venv keeps any helper it spawns in the same environment.
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    return KERNEL


@pytest.mark.spark
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, kernel_of_this_interpreter):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name=kernel_of_this_interpreter, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the notebook's plots produced no figure"
