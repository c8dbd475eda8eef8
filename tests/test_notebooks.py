"Runs every notebook in nbs/ through papermill at SCALE (default smoke), one test per notebook, with its time."
import os, time
from pathlib import Path

import nbformat, papermill as pm, pytest

ROOT = Path(__file__).resolve().parents[1]
SCALE = os.environ.get("SCALE", "smoke")
NBS = sorted(p for p in (ROOT/"nbs").glob("*.ipynb") if not p.name.startswith("_"))
METHOD_NBS = [p for p in NBS if p.name[:2].isdigit() and not p.name.startswith("00")]

def has_parameters_cell(path):
    return any("parameters" in c.metadata.get("tags", []) for c in nbformat.read(path, as_version=4).cells)

@pytest.mark.notebook
@pytest.mark.timeout(900 if SCALE == "smoke" else 4*3600)
@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_notebook_runs(nb, tmp_path, monkeypatch):
    "Runs the notebook; its ledger JSON goes to a temporary folder (or $NB_OUT/results), never to the committed results/."
    out = Path(os.environ.get("NB_OUT", tmp_path)); out.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("MASPOB_RESULTS", str(out/"results"))
    t0 = time.perf_counter()
    pm.execute_notebook(str(nb), str(out/nb.name), cwd=str(nb.parent), kernel_name="python3",
                        parameters={"scale": SCALE} if has_parameters_cell(nb) else {},
                        progress_bar=False, execution_timeout=600 if SCALE == "smoke" else 3600)
    print(f"\n{nb.name}: {time.perf_counter() - t0:.1f} s at scale={SCALE}")

def test_every_method_notebook_has_a_parameters_cell_with_scale():
    for nb in METHOD_NBS:
        cells = [c for c in nbformat.read(nb, as_version=4).cells if "parameters" in c.metadata.get("tags", [])]
        assert cells, f"{nb.name} has no cell tagged 'parameters'"
        assert "scale" in pm.inspect_notebook(str(nb)), f"{nb.name}: the parameters cell does not set `scale`"

def test_no_cell_mixes_imports_with_other_code():
    "The docs build executes every cell holding an import (nbdev's rule), so such a cell must not need the experiment's state."
    import ast, re
    bad = []
    for nb in NBS:
        for i, c in enumerate(nbformat.read(nb, as_version=4).cells):
            if c.cell_type != "code" or re.search(r"^#\|\s*(export|exports|exporti|exec_doc|eval:\s*false)", c.source, re.M): continue
            src = "\n".join(l for l in c.source.splitlines() if not l.lstrip().startswith(("%", "!")))
            tree = ast.parse(src)
            has_import = any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))
            if has_import and not src.lstrip().startswith("#| hide") and any(not isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body):
                bad.append(f"{nb.name} cell {i}")
    assert not bad, f"move these imports into the notebook's import cell: {bad}"
