"""The example notebook (examples/python_api.ipynb) runs headless, so it cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "python_api.ipynb"


@pytest.mark.integration
def test_the_python_api_notebook_runs_headless(tmp_path: Path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    text = "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.get("outputs", []))
    assert "episode_return_mean" in text and "stopped" in text
    mean = float(text.split("mean return")[1].split()[0])
    assert mean > 200, text[-2000:]  # the trained policy (an untrained one plays about 20)
    assert list((tmp_path / "runs" / "cartpole-ppo").iterdir())  # the runs landed where the notebook ran
