#!/usr/bin/env python
"""Clean the saved outputs of notebooks in nbs/ as `maspob-etal run --save` does (no machine paths, progress bars,
library warnings or bare widgets; '–' for NaN in tables), for outputs saved another way. Then run nbdev-clean.

    python tools/clean_outputs.py                   # every notebook in nbs/
    python tools/clean_outputs.py nbs/05_catq.ipynb
"""
import sys
from pathlib import Path
import nbformat
from maspob_etal.cli import clean_outputs

ROOT = Path(__file__).resolve().parents[1]
for p in [Path(a) for a in sys.argv[1:]] or sorted((ROOT/"nbs").glob("*.ipynb")):
    nb = nbformat.read(p, as_version=4)
    before = nbformat.writes(nb)
    clean_outputs(nb, ROOT)
    if nbformat.writes(nb) != before:
        nbformat.write(nb, p); print(f"cleaned {p.name}")
