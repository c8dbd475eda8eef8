#!/usr/bin/env python
"""Build the docs site into _docs/ and README.md from nbs/, without the Quarto binary and without npm.

nbdev processes the notebooks into _proc/ (show_doc, directives) exactly as `nbdev-docs` does, the home page is
executed so its table of methods is current, and the pure-Python renderer `smalldocs` renders the same _quarto.yml.
The site is then finished as Quarto would leave it: pages carry Quarto's names (the module name, `catq.html`, from
nbdev's `output-file`), every page has a Markdown twin (`catq.html.md`, the address nbdev writes into module
docstrings), equations are typeset by a MathJax served from the site itself (from the PyPI package
`jupyter-server-mathjax`), and the search index is also shipped as a script, so that search works when the site is
opened from disk. README.md is generated from the processed index notebook, with absolute links so that it reads
the same on the package index. Where `quarto` is on the PATH, `make docs` runs `nbdev-docs` instead.

    python tools/build_docs.py            # site + README
    python tools/build_docs.py --readme   # README only
"""
import argparse, json, os, re, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE_RE = r"\.(?:ipynb|qmd)$"
KATEX_TAGS = re.compile(r'<link[^>]*katex[^>]*>|<script[^>]*katex[^>]*>\s*</script>')
MATHJAX_CONFIG = ('MathJax.Hub.Config({tex2jax: {inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]], '
                  'processEscapes: true}, "HTML-CSS": {availableFonts: [], webFont: "STIX-Web", imageFont: null}, '
                  'showMathMenu: false, messageStyle: "none"});')

def sh(*cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, **kw)

def _cfg():
    from nbdev.config import get_config
    return get_config(ROOT)

def write_sidebar():
    "nbs/sidebar.yml: the home page, the results, the shared infrastructure, then the methods titled as in their table."
    from maspob_etal.claims import METHODS, notebook_name
    nbs = ROOT/"nbs"
    infra = sorted(p.name for p in nbs.glob("00*.ipynb"))
    methods = [(slug, num, title) for slug, (num, title) in METHODS.items() if (nbs/notebook_name(slug)).exists()]
    lines = ["website:", "  sidebar:", "    contents:", "      - index.ipynb", "      - results.qmd",
             "      - section: Shared infrastructure", "        contents:"]
    lines += [f"          - {n}" for n in infra]
    lines += ["      - section: Methods", "        contents:"]
    for slug, num, title in methods:
        lines += [f"          - text: {json.dumps(f'{num:02d} · {title}')}", f"            href: {notebook_name(slug)}"]
    (nbs/"sidebar.yml").write_text("\n".join(lines) + "\n")

def proc_nbs():
    "nbdev's docs pre-processing (what nbdev-proc-nbs does), minus its attempt to install Quarto."
    from nbdev.quarto import refresh_quarto_yml
    from nbdev.serve import proc_nbs as _proc
    import nbdev.doclinks
    cfg = _cfg()
    os.chdir(cfg.config_path)
    refresh_quarto_yml()
    nbdev.doclinks._build_modidx()
    write_sidebar()
    shutil.rmtree(ROOT/"_proc", ignore_errors=True)
    _proc(str(cfg.nbs_path), n_workers=0, force=True, file_re=FILE_RE)
    return ROOT/"_proc"

def execute_index(proc:Path):
    "Run the processed home page so its table of methods reflects the notebooks and results present."
    import nbformat
    from nbclient import NotebookClient
    p = proc/"index.ipynb"
    nb = nbformat.read(p, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(proc)}}).execute()
    nbformat.write(nb, p)

def embed_claim_figures(proc:Path):
    "Show each method's committed full-run claims figure (the report's) on its page, right after the cell that records them."
    import base64, nbformat
    from nbformat.v4 import new_markdown_cell
    from maspob_etal.claims import METHODS, notebook_name, claims_of, method_plot, _png
    for slug in METHODS:
        p = proc/notebook_name(slug)
        if not p.exists() or not any(c.run for c in claims_of(slug, "full", ROOT/"results")): continue
        nb = nbformat.read(p, as_version=4)
        if any("method_plot(" in c.source for c in nb.cells if c.cell_type == "code"): continue   # the notebook draws it itself
        at = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(r"\brecord\(", c.source)]
        if not at: continue
        uri = "data:image/png;base64," + base64.b64encode(_png(method_plot(slug, "full", ROOT/"results"))).decode()
        nb.cells.insert(at[-1] + 1, new_markdown_cell(
            "**The committed full run's claims** (`results/" + slug + ".full.json`, as on the [results page](results.qmd)): "
            "each claim's effect divided by its smallest effect of interest, with its 95 % CI, coloured by verdict.\n\n"
            f"![{slug}: claims of the committed full run]({uri})"))
        nbformat.write(nb, p)

def page_names(proc:Path)->dict:
    "{smalldocs page: Quarto page}, e.g. {'05_catq.html': 'catq.html'}, from the `output-file` nbdev writes."
    import nbformat
    names = {}
    for p in sorted(proc.glob("*.ipynb")):
        nb = nbformat.read(p, as_version=4)
        m = re.search(r"^output-file:\s*(\S+)\s*$", nb.cells[0].source if nb.cells else "", re.M)
        if m and m[1] != f"{p.stem}.html": names[f"{p.stem}.html"] = m[1]
    return names

def rename_pages(site:Path, names:dict):
    "Give pages Quarto's names and rewrite every link: relative ones, nbdev's absolute doc links, the search index."
    base = _cfg().doc_url.rstrip("/") + "/"
    for old, new in names.items():
        if (site/old).exists(): (site/old).rename(site/new)
    pat = re.compile(r'(?<![\w./-])(' + "|".join(re.escape(o) for o in names) + r')(?=[#"\'?])') if names else None
    for f in [*site.glob("*.html"), site/"search.json", site/"sitemap.xml"]:
        if not f.exists(): continue
        txt = f.read_text(encoding="utf-8")
        new = txt.replace(base, "") if f.suffix == ".html" else txt     # nbdev's doc links: same site, so relative
        if pat is not None: new = pat.sub(lambda m: names[m[1]], new)
        if new != txt: f.write_text(new, encoding="utf-8")

def bundle_mathjax(site:Path):
    "Serve MathJax (from the PyPI package jupyter-server-mathjax) from the site and use it instead of KaTeX's CDN."
    try: import jupyter_server_mathjax
    except ImportError: sys.exit("make docs needs jupyter-server-mathjax (pip install -e '.[dev]')")
    static = Path(jupyter_server_mathjax.__file__).parent/"static"
    shutil.copytree(static, site/"site_libs"/"mathjax", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("a11y", "*.otf", "*.eot", "*.svg", "LICENSE"))
    for page in site.rglob("*.html"):
        txt = page.read_text(encoding="utf-8")
        if "katex" not in txt: continue
        rel = os.path.relpath(site/"site_libs"/"mathjax", page.parent).replace(os.sep, "/")
        tags = (f'<script type="text/x-mathjax-config">{MATHJAX_CONFIG}</script>'
                f'<script src="{rel}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full" defer></script>')
        txt = KATEX_TAGS.sub("", txt).replace("</head>", tags + "</head>", 1)
        page.write_text(txt, encoding="utf-8")

def search_from_disk(site:Path):
    "Ship the search index as a script too: browsers refuse `fetch` of a local file, so search works from disk."
    idx = (site/"search.json").read_text(encoding="utf-8")
    (site/"search-index.js").write_text("window.SMALLDOCS_SEARCH = " + idx.strip() + ";\n", encoding="utf-8")
    js = site/"site_libs"/"smalldocs.js"
    txt = js.read_text(encoding="utf-8")
    old = 'const r = await fetch(offset + "search.json");\n      index = await r.json();'
    if old not in txt: sys.exit("smalldocs.js changed: update search_from_disk in tools/build_docs.py")
    js.write_text(txt.replace(old, 'index = window.SMALLDOCS_SEARCH || await (await fetch(offset + "search.json")).json();'), encoding="utf-8")
    for page in site.glob("*.html"):
        txt = page.read_text(encoding="utf-8")
        txt = txt.replace('<script src="site_libs/smalldocs.js"', '<script src="search-index.js"></script><script src="site_libs/smalldocs.js"', 1)
        page.write_text(txt, encoding="utf-8")

def markdown_twins(proc:Path, site:Path, names:dict):
    "A Markdown copy of every notebook page beside it (`catq.html.md`), as Quarto's commonmark format makes."
    from nbconvert import MarkdownExporter
    import nbformat
    ex = MarkdownExporter(exclude_output_prompt=True, exclude_input_prompt=True)
    for p in sorted(proc.glob("*.ipynb")):
        if p.stem == "README": continue
        page = names.get(f"{p.stem}.html", f"{p.stem}.html")
        nb = nbformat.read(p, as_version=4)
        for c in nb.cells:   # nbdev's processing leaves its own keys on cells; the exporter validates the schema
            for k in [k for k in c if k not in ("cell_type", "id", "metadata", "source", "outputs", "execution_count", "attachments")]: del c[k]
            c.metadata = {k: v for k, v in c.metadata.items() if k == "tags"}
        body, _ = ex.from_notebook_node(nb)
        body = re.sub(r"!\[[^\]]*\]\(data:image/[^)]*\)", "*(figure: see the HTML page)*", body)
        body = re.sub(r"(?m)^!\[[^\]]*\]\((?!https?:)[^)]*\)\s*$", "*(figure: see the HTML page)*", body)
        (site/f"{page}.md").write_text(body, encoding="utf-8")

def render_site(proc:Path):
    smalldocs = Path(sys.executable).parent/"smalldocs"
    sh(smalldocs if smalldocs.exists() else "smalldocs", "render", proc)
    out, site = proc/"_docs", ROOT/"_docs"
    shutil.rmtree(site, ignore_errors=True)
    shutil.move(str(out), str(site))
    names = page_names(proc)
    rename_pages(site, names)
    bundle_mathjax(site)
    search_from_disk(site)
    markdown_twins(proc, site, names)

def write_readme(proc:Path):
    "README.md from the processed index notebook: its Markdown and outputs, with absolute links (repository or site)."
    import nbformat
    cfg = _cfg()
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
    site = cfg.doc_url.rstrip("/") + "/"
    repo = f"{cfg.git_url.rstrip('/')}/blob/{cfg.get('branch', 'main')}/"
    names = page_names(proc)
    md = re.sub(r"\]\(results\.qmd\)", f"]({site}results.html)", md)
    md = re.sub(r"\]\(((?:\d\d[a-z]?_)[A-Za-z0-9_]+)\.ipynb\)", lambda m: f"]({site}{names.get(m[1] + '.html', m[1] + '.html')})", md)
    md = re.sub(r"\]\((?!https?:|#|mailto:)([^)\s]+)\)", lambda m: f"]({repo}{m[1]})", md)   # any other file: the repository
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
    if not args.readme: embed_claim_figures(proc)
    execute_index(proc)
    write_readme(proc)
    if not args.readme:
        render_site(proc)
        print(f"site: {ROOT/'_docs'/'index.html'} (opens from disk; or serve it: python -m http.server -d _docs 8000, "
              "then open http://localhost:8000)")

if __name__ == "__main__":
    main()
