"The outputs committed in nbs/ are fit to read: no absolute paths of the machine that ran them, no progress-bar text."
import json, re
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT/"nbs").glob("*.ipynb"))
ABS = re.compile(r"(?<![\w.])/(?:work|root|home|tmp|usr|opt|var|Users|private)/[\w.~-]+|site-packages|[A-Z]:\\\\Users")
BAR = re.compile(r"\d+%\|[^\n|]*\||\d+/\d+ \[\d\d:\d\d<")

def _outputs(nb):
    for i, c in enumerate(json.loads(nb.read_text())["cells"]):
        for o in c.get("outputs", []):
            yield i, o

@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_outputs_hold_no_machine_paths_or_progress_bars(nb):
    bad = []
    for i, o in _outputs(nb):
        texts = [o.get("text", "")] + [v for k, v in o.get("data", {}).items() if k.startswith("text/")] + o.get("traceback", [])
        for t in texts:
            t = "".join(t) if isinstance(t, list) else t
            if m := ABS.search(t): bad.append(f"cell {i}: path {m.group(0)!r}")
            if m := BAR.search(t): bad.append(f"cell {i}: progress bar {m.group(0)!r}")
    assert not bad, f"{nb.name}: run `python tools/clean_outputs.py {nb.relative_to(ROOT)}`: " + "; ".join(bad[:8])

def test_the_scan_can_fail():
    assert ABS.search("wrote /work/main/results/x.json") and ABS.search("/root/.cache/x") and not ABS.search("see results/x.json")
    assert BAR.search("train: 100%|██████████| 50/50 [00:01<00:00, 40.1it/s]") and not BAR.search("accuracy 95%")

@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_one_show_doc_per_cell(nb):
    "Only a cell's last `show_doc` renders on the site, so a cell holding two leaves a symbol without its anchor."
    cells = json.loads(nb.read_text())["cells"]
    bad = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and "".join(c["source"]).count("show_doc(") > 1]
    assert not bad, f"{nb.name}: cells {bad} hold several show_doc calls; give each its own cell"
