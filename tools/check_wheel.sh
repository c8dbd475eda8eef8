#!/usr/bin/env bash
# Build the wheel, install it WITHOUT extras into a clean virtual env (torch first, as the README says), and use it
# from outside the checkout: the console script lists the methods, `run` says in one line where the notebooks are,
# every module without an extra imports, and each module that needs an extra says which one. Prints the core
# install's package count and size (with and without torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
.venv/bin/python -m build --wheel --outdir "$work/dist" . >/dev/null
whl=$(ls "$work"/dist/maspob_etal-*.whl)
listing=$(python3 -m zipfile -l "$whl")
case "$listing" in *licenses/LICENSE*) ;; *) echo "the wheel carries no LICENSE file"; exit 1;; esac
$PY -m venv "$work/env"
"$work/env/bin/pip" install -q --disable-pip-version-check "$TORCH" 2>&1 | grep -v "WARNING: Location" || true
torch_mb=$(du -sm "$work/env" | cut -f1)
"$work/env/bin/pip" install -q --disable-pip-version-check "$whl" 2>&1 | grep -v "WARNING: Location" || true
cd "$work"                                   # outside the checkout
"$work/env/bin/maspob-etal" list | tail -3
set +e; out=$("$work/env/bin/maspob-etal" run maspob 2>&1); rc=$?; set -e
echo "$out"
[ "$rc" = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "clone https://github.com" || { echo "maspob-etal run outside a checkout must fail with one line saying where the notebooks are"; exit 1; }
"$work/env/bin/python" - <<'PY'
import importlib, pkgutil, re, maspob_etal
mods = [m.name for m in pkgutil.iter_modules(maspob_etal.__path__, "maspob_etal.") if not m.name.split(".")[-1].startswith("_")]
ok, extra, bad = [], {}, []
for m in mods:
    try: importlib.import_module(m); ok.append(m)
    except ImportError as e:
        x = re.search(r"pip install 'maspob_etal\[(\w+)\]'", str(e))
        if x: extra[m] = x[1]
        else: bad.append(f"{m}: {e}")
assert not bad, "failed to import without saying which extra to install:\n" + "\n".join(bad)
print(f"core install: {len(ok)} modules import:", ", ".join(ok))
print("need an extra:", ", ".join(f"{m} [{x}]" for m, x in extra.items()))
assert {"maspob_etal.cli", "maspob_etal.claims", "maspob_etal.core", "maspob_etal.social_choice"} <= set(ok)
assert "site-packages" in maspob_etal.__file__, maspob_etal.__file__
PY
n=$("$work/env/bin/pip" list --disable-pip-version-check --format=freeze 2>/dev/null | wc -l)
all_mb=$(du -sm "$work/env" | cut -f1)
echo "core install: $n packages, $all_mb MB in the env ($((all_mb - torch_mb)) MB besides torch and pip)"
