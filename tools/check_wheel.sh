#!/usr/bin/env bash
# Build the wheel, install it into a clean virtual env (torch first, as the README says), and use it from outside
# the checkout: the console script lists the methods, `run` says in one line where the notebooks are, and every
# module imports. Prints the env's size and the import time of one module.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
.venv/bin/python -m build --wheel --outdir "$work/dist" . >/dev/null
whl=$(ls "$work"/dist/maspob_etal-*.whl)
python3 -m zipfile -l "$whl" | grep -q "licenses/LICENSE" || { echo "the wheel carries no LICENSE file"; exit 1; }
$PY -m venv "$work/env"
"$work/env/bin/pip" install -q --disable-pip-version-check "$TORCH" 2>&1 | grep -v "WARNING: Location" || true
"$work/env/bin/pip" install -q --disable-pip-version-check "$whl" 2>&1 | grep -v "WARNING: Location" || true
cd "$work"                                   # outside the checkout
"$work/env/bin/maspob-etal" list | tail -3
set +e; out=$("$work/env/bin/maspob-etal" run maspob 2>&1); rc=$?; set -e
echo "$out"
[ "$rc" = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "clone https://github.com" || { echo "maspob-etal run outside a checkout must fail with one line saying where the notebooks are"; exit 1; }
"$work/env/bin/python" - <<'PY'
import importlib, pkgutil, time, maspob_etal
mods = [m.name for m in pkgutil.iter_modules(maspob_etal.__path__, "maspob_etal.") if not m.name.split(".")[-1].startswith("_")]
for m in mods: importlib.import_module(m)
print(f"imported {len(mods)} modules from the wheel:", ", ".join(mods))
assert "maspob_etal.cli" in mods and "site-packages" in maspob_etal.__file__, maspob_etal.__file__
PY
"$work/env/bin/python" -c "import time; t = time.perf_counter(); import maspob_etal.s3gnn; print(f'import maspob_etal.s3gnn: {time.perf_counter() - t:.1f} s')"
echo "clean env with the wheel: $(du -sh "$work/env" | cut -f1)"
