#!/usr/bin/env python
"""Build the docs site into _docs/ and README.md from nbs/, without the Quarto binary.

nbdev processes the notebooks into _proc/ (show_doc, directives, sidebar) exactly as `nbdev-docs` does, the home page
is executed so its table of methods is current, the pure-Python renderer `smalldocs` renders the same _quarto.yml,
and KaTeX is served from the site itself so equations render offline. README.md is generated from the processed
index notebook. Where `quarto` is on the PATH, `make docs` runs `nbdev-docs` instead.

    python tools/build_docs.py            # site + README
    python tools/build_docs.py --readme   # README only
"""
import argparse, os, re, shutil, subprocess, sys, tarfile, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KATEX_VERSION = "0.16.11"                      # the version smalldocs links to
KATEX_CDN = f"https://cdn.jsdelivr.net/npm/katex@{KATEX_VERSION}/dist"
FILE_RE = r"\.(?:ipynb|qmd)$"

def sh(*cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, **kw)

def proc_nbs():
    "nbdev's docs pre-processing (what nbdev-proc-nbs does), minus its attempt to install Quarto."
    from nbdev.config import get_config
    from nbdev.quarto import refresh_quarto_yml, nbdev_sidebar
    from nbdev.serve import proc_nbs as _proc
    import nbdev.doclinks
    cfg = get_config(ROOT)
    os.chdir(cfg.config_path)
    refresh_quarto_yml()
    nbdev.doclinks._build_modidx()
    nbdev_sidebar.__wrapped__(path=cfg.nbs_path, file_re=FILE_RE)
    shutil.rmtree(ROOT/"_proc", ignore_errors=True)
    _proc(str(cfg.nbs_path), n_workers=0, force=True, file_re=FILE_RE)
    return ROOT/"_proc"

def execute_index(proc:Path):
    "Run the processed home page so its table of methods reflects the notebooks present."
    import nbformat
    from nbclient import NotebookClient
    p = proc/"index.ipynb"
    nb = nbformat.read(p, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(proc)}}).execute()
    nbformat.write(nb, p)

def katex_dist()->Path:
    "KaTeX's dist/ folder, fetched once with `npm pack` into .cache/ (or taken from $KATEX_DIST)."
    if os.environ.get("KATEX_DIST"): return Path(os.environ["KATEX_DIST"])
    dest = ROOT/".cache"/f"katex-{KATEX_VERSION}"
    if (dest/"katex.min.js").exists(): return dest
    tgz = ROOT/"wheelhouse"/f"katex-{KATEX_VERSION}.tgz"
    with tempfile.TemporaryDirectory() as tmp:
        if not tgz.exists():
            if not shutil.which("npm"): sys.exit("make docs needs KaTeX: install npm, or set KATEX_DIST to a katex/dist folder")
            sh("npm", "pack", f"katex@{KATEX_VERSION}", "--silent", cwd=tmp, stdout=subprocess.DEVNULL)
            tgz = Path(tmp)/f"katex-{KATEX_VERSION}.tgz"
        with tarfile.open(tgz) as t: t.extractall(tmp, filter="data")
        shutil.rmtree(dest, ignore_errors=True); dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(Path(tmp)/"package"/"dist", dest)
    return dest

def bundle_katex(site:Path):
    "Copy KaTeX into the site and point every page at it instead of the CDN."
    dist = katex_dist()
    shutil.copytree(dist, site/"site_libs"/"katex", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.ttf", "*.woff", "*.mjs", "katex.js", "katex.css"))
    for page in site.rglob("*.html"):
        txt = page.read_text(encoding="utf-8")
        if KATEX_CDN not in txt: continue
        rel = os.path.relpath(site/"site_libs"/"katex", page.parent).replace(os.sep, "/")
        page.write_text(txt.replace(KATEX_CDN, rel), encoding="utf-8")

def fix_doc_links(site:Path):
    "nbdev links symbols to Quarto's page names (`claims.html`); smalldocs keeps the notebook's name (`00c_claims.html`)."
    from nbdev.config import get_config
    base = get_config(ROOT).doc_url.rstrip("/") + "/"
    names = {re.sub(r"^\d+[a-z]?_", "", p.stem): p.stem for p in (ROOT/"nbs").glob("*.ipynb")}
    pat = re.compile(re.escape(base) + r"([A-Za-z0-9_]+)\.html")
    for page in site.rglob("*.html"):
        txt = page.read_text(encoding="utf-8")
        new = pat.sub(lambda m: f"{names[m[1]]}.html" if m[1] in names else m[0], txt)
        if new != txt: page.write_text(new, encoding="utf-8")

def render_site(proc:Path):
    smalldocs = Path(sys.executable).parent/"smalldocs"
    sh(smalldocs if smalldocs.exists() else "smalldocs", "render", proc)
    out = proc/"_docs"
    shutil.rmtree(ROOT/"_docs", ignore_errors=True)
    shutil.move(str(out), str(ROOT/"_docs"))
    bundle_katex(ROOT/"_docs")
    fix_doc_links(ROOT/"_docs")

def write_readme(proc:Path):
    "README.md from the processed index notebook: its Markdown and outputs, links rewritten for the repository."
    from nbdev.config import get_config
    cfg = get_config(ROOT)
    import nbformat
    nb = nbformat.read(proc/"index.ipynb", as_version=4)
    for c in nb.cells:   # cells hidden on the site are hidden in the README too
        if c.cell_type == "code" and re.search(r"^#\|\s*(echo:\s*false|hide)", c.source, re.M):
            c.metadata.setdefault("tags", []).append("remove_input")
    nbformat.write(nb, proc/"README.ipynb")
    sh(sys.executable, "-m", "jupyter", "nbconvert", "--to", "markdown", "--log-level", "ERROR",
       "--TagRemovePreprocessor.enabled=True", "--TagRemovePreprocessor.remove_input_tags=remove_input",
       proc/"README.ipynb", "--output-dir", proc, "--output", "README")
    md = (proc/"README.md").read_text(encoding="utf-8")
    md = re.sub(r"\A---\n.*?\n---\n", "", md, flags=re.S).lstrip()
    md = re.sub(r"(?m)^\s*<style.*?</style>\s*$", "", md, flags=re.S)
    md = re.sub(r"\]\(results\.qmd\)", "](results/)", md)
    md = re.sub(r"\]\((\d\d[a-z]?_[A-Za-z0-9_]+\.ipynb)\)", r"](nbs/\1)", md)
    md = re.sub(r"\n{3,}", "\n\n", md)
    head = f"# {cfg.title}\n\n> {cfg.description}\n\n"
    (ROOT/"README.md").write_text(head + md.strip() + "\n", encoding="utf-8")

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", action="store_true", help="only regenerate README.md")
    args = ap.parse_args()
    if not args.readme:
        from maspob_etal.claims import report
        report(docs_page=ROOT/"nbs"/"results.qmd")
    proc = proc_nbs()
    execute_index(proc)
    write_readme(proc)
    if not args.readme:
        render_site(proc)
        print(f"site: {ROOT/'_docs'/'index.html'}")

if __name__ == "__main__":
    main()
