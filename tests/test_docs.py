"Builds the docs site offline and opens pages in headless Chromium: page, sidebar and typeset equations must be there."
import os, re, shutil, subprocess, sys, tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

pytestmark = pytest.mark.timeout(900)

@pytest.fixture(scope="module")
def site():
    if shutil.which("quarto") is None:
        subprocess.run([sys.executable, str(ROOT/"tools"/"build_docs.py")], cwd=ROOT, check=True, capture_output=True)
    else:
        subprocess.run(["make", "docs"], cwd=ROOT, check=True, capture_output=True)
    return ROOT/"_docs"

def dom(page:Path)->str:
    "The page's DOM after its scripts ran (KaTeX typesets in the browser)."
    with tempfile.TemporaryDirectory() as prof:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={prof}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                           capture_output=True, text=True, timeout=120)
    return r.stdout

def method_page(site):
    pages = sorted(p for p in site.glob("[0-9][0-9]_*.html") if not p.name.startswith("00"))
    return pages[0] if pages else site/"00b_models.html"

def test_site_files(site):
    assert (site/"index.html").exists() and (site/"results.html").exists()
    assert (site/"site_libs"/"katex"/"katex.min.js").exists()
    html = (site/"index.html").read_text()
    assert "cdn.jsdelivr.net/npm/katex" not in "".join(p.read_text() for p in site.glob("*.html"))
    assert 'href="results.html"' in html                      # the home page links the results page
    for n in ["01", "05", "19"]: assert f"| {n} |" in html or f">{n}<" in html   # and lists the methods

def test_readme_is_generated_from_the_index(site):
    readme = (ROOT/"README.md").read_text()
    assert readme.startswith("# maspob_etal") and "make test" in readme and "make reproduce" in readme
    assert "#| echo: false" not in readme

@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_pages_render_in_chromium(site):
    home = dom(site/"index.html")
    assert "maspob_etal" in home and "sidebar" in home and "Results" in home
    page = dom(method_page(site))
    assert 'id="quarto-sidebar"' in page or "sidebar" in page
    assert 'class="katex"' in page, "no equation was typeset by KaTeX"
    assert "katex-error" not in page
