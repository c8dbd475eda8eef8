"The package as a library user meets it: argument help in help(), the dependency split, the CLI outside a checkout."
import os, pydoc, subprocess, sys, tomllib

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def test_help_shows_what_each_argument_means():
    from maspob_etal.claims import Claim, paired_stats
    from maspob_etal.core import pick
    text = pydoc.render_doc(paired_stats, renderer=pydoc.plaintext)
    assert "Parameters" in text and "ours : Sequence[float]" in text and "our value on each unit (seed or item)" in text
    assert "higher_is_better : bool" in text and "(default True)" in text
    assert "what `ours` and `baseline` measure, with units" in Claim.__doc__          # dataclass fields too
    assert "scale : str" in pydoc.render_doc(pick, renderer=pydoc.plaintext)

def test_show_doc_does_not_repeat_the_argument_table():
    from nbdev.showdoc import show_doc
    from maspob_etal.claims import paired_stats
    md = show_doc(paired_stats)._repr_markdown_()
    assert "our value on each unit" in md and "Parameters\n---" not in md

def test_every_method_module_gets_argument_help():
    "Each module's public functions with parameter comments end up with them in help(): checked on a subprocess import."
    code = ("import importlib, inspect, pkgutil, maspob_etal\n"
            "from fastcore.docments import docments\n"
            "bad, n = [], 0\n"
            "for m in pkgutil.iter_modules(maspob_etal.__path__, 'maspob_etal.'):\n"
            "    if m.name.split('.')[-1].startswith('_'): continue\n"
            "    mod = importlib.import_module(m.name)\n"
            "    for name in mod.__all__:\n"
            "        f = getattr(mod, name, None)\n"
            "        if not inspect.isfunction(f): continue\n"
            "        if any(d.get('docment') for k, d in docments(f, full=True).items() if k != 'return'):\n"
            "            n += 1\n"
            "            if 'Parameters' not in (f.__doc__ or ''): bad.append(f'{m.name}.{name}')\n"
            "print('BAD', bad, n)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "BAD [] " in out.stdout and int(out.stdout.split()[-1]) > 100, out.stdout

def test_library_dependencies_hold_no_notebook_tooling():
    proj = tomllib.loads((ROOT/"pyproject.toml").read_text())["project"]
    core = " ".join(proj["dependencies"]).lower()
    for tool in ("papermill", "jupyterlab", "nbdev", "ipykernel", "ipywidgets", "pytest", "smalldocs"):
        assert tool not in core, f"{tool} belongs in an extra, not in the library's dependencies"
    extras = proj["optional-dependencies"]
    assert {"notebooks", "dev"} <= set(extras) and any("papermill" in d for d in extras["notebooks"])

def test_cli_outside_a_checkout_lists_and_explains(tmp_path):
    "From a folder that is not a checkout the console script still lists the methods; `run` with --nbs elsewhere says why in one line."
    exe = Path(sys.executable).parent/"maspob-etal"
    r = subprocess.run([str(exe), "run", "maspob", "--nbs", str(tmp_path/"nope")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "does not exist" in r.stderr
    r = subprocess.run([str(exe), "list"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and "sawbench" in r.stdout

def test_lock_file_agrees_with_pyproject():
    "requirements-lock.txt pins every dependency of pyproject.toml (and its extras) at a version its specifier allows."
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    proj = tomllib.loads((ROOT/"pyproject.toml").read_text())["project"]
    lines = [l.strip() for l in (ROOT/"requirements-lock.txt").read_text().splitlines() if l.strip() and not l.startswith("#")]
    pins = {}
    for l in lines:
        name, sep, ver = l.partition("==")
        assert sep and ver and " " not in ver, f"not an exact pin: {l!r}"
        pins[canonicalize_name(name)] = ver
    assert "torch" not in pins and not any(n.startswith("nvidia-") for n in pins), "torch stays out: a cluster keeps its build"
    reqs = list(proj["dependencies"]) + [r for extra in proj["optional-dependencies"].values() for r in extra]
    for text in reqs:
        r = Requirement(text)
        name = canonicalize_name(r.name)
        if name in ("torch", "maspob-etal"): continue
        assert name in pins, f"{r.name} is a dependency but requirements-lock.txt does not pin it: run make lock"
        assert r.specifier.contains(pins[name], prereleases=True), f"{r.name}=={pins[name]} does not satisfy {text!r}"

def test_citation_changelog_and_license_agree_with_the_package():
    import yaml, maspob_etal
    from maspob_etal.claims import METHODS
    cff = yaml.safe_load((ROOT/"CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == maspob_etal.__version__ and cff["license"] == "Apache-2.0"
    assert len(cff["references"]) == len(METHODS) and all(r["title"] and r["authors"] for r in cff["references"])
    import re
    assert re.search(r"^## (\S+)", (ROOT/"CHANGELOG.md").read_text(), re.M)[1] == maspob_etal.__version__   # newest entry
    assert "Apache License" in (ROOT/"LICENSE").read_text()[:200]
    proj = tomllib.loads((ROOT/"pyproject.toml").read_text())["project"]
    assert proj["license"] == "Apache-2.0" and proj["license-files"] == ["LICENSE"]

def test_the_ledger_and_numpy_only_methods_import_without_torch():
    "maspob_etal.core imports torch on first use only, so the ledger, the CLI and social_choice start fast."
    code = ("import sys, maspob_etal.claims, maspob_etal.cli, maspob_etal.social_choice\n"
            "print('TORCH', 'torch' in sys.modules)\n"
            "import maspob_etal.core as c; c.seed_everything(0); print('AFTER', 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "TORCH False" in out.stdout and "AFTER True" in out.stdout, out.stdout

@pytest.mark.timeout(1200)
def test_core_install_of_the_wheel_outside_the_checkout():
    "tools/check_wheel.sh: the wheel without extras in a clean env; core modules import, the others name their extra."
    r = subprocess.run(["bash", str(ROOT/"tools"/"check_wheel.sh")], capture_output=True, text=True, timeout=1150, cwd=ROOT)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "core install:" in r.stdout and "need an extra:" in r.stdout
    print(r.stdout[-1500:])
